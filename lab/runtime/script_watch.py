"""What the drill sees of a user's script that reports nothing itself.

A script of one's own (a DDP tutorial, an FSDP2 example, a trainer with snapshots) emits none of
our events, yet whether it survives an eviction is decided by what it does with checkpoints:
which file each rank loads when it starts, whether any rank saves after a notice, and how each
worker ends. So, where the drill asks ($LAB_WATCH_SCRIPT, set by the local target), each worker
records, as events (lab.vocab.events, with its rank, node and round from torchrun's environment):

  script_started   when the worker starts running the script;
  script_loaded    each checkpoint file it loads: torch.load of a path (or of a file object that
                   names one) and torch.distributed.checkpoint's load, with the file's size and
                   modification time, which tell apart two files of one name on two nodes;
  script_saved     each one it saves: torch.save to a path, torch.distributed.checkpoint's save
                   and async_save (both with the script's file:line that called them);
  script_group     its process group: init_process_group's backend, timeout, file:line;
  script_trained   its first optimizer step (any torch.optim optimizer) since it started or
                   since its last save: whether it trained after the state it last saved;
  script_ended     how the script ended: its exit code, and the exception that ended it; a
                   script that ends its process itself (os._exit, from any thread) included.

Each wrapper calls torch's own function with the same arguments and records only once it
returned: what the script sees is unchanged. Nothing is recorded outside a drill.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from lab.runtime.events import emit
from lab.vocab.events import Event
from lab.vocab.job import ENV_WATCH_SCRIPT


def watching() -> bool:
    return os.environ.get(ENV_WATCH_SCRIPT) == "1"


def _path_of(target: Any) -> str | None:
    """The file a torch.save/torch.load target names: a path, or a file object's name."""
    if target is None:
        return None
    if isinstance(target, (str, os.PathLike)):
        return os.path.abspath(os.fspath(target))
    name = getattr(target, "name", None)
    return os.path.abspath(name) if isinstance(name, str) and os.path.sep in os.path.abspath(name) else None


def _file_facts(path: str) -> dict[str, Any]:
    """The size and modification time of a file, or of a folder's newest file (a sharded
    checkpoint), as the drill compares them across ranks."""
    try:
        if os.path.isdir(path):
            stats = [os.stat(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files]
            if not stats:
                return {}
            return {"bytes": sum(s.st_size for s in stats), "mtime": max(s.st_mtime for s in stats)}
        stat = os.stat(path)
    except OSError:
        return {}
    return {"bytes": stat.st_size, "mtime": stat.st_mtime}


def _checkpoint_id(args: tuple[Any, ...], kwargs: dict[str, Any], io: str) -> str | None:
    """Where a torch.distributed.checkpoint call reads or writes: its checkpoint_id, else its
    storage reader's or writer's path."""
    given = kwargs.get("checkpoint_id")
    if given is None:
        given = getattr(kwargs.get(io), "path", None)
    return _path_of(given) if given is not None else None


def _call_site() -> str | None:
    """`file:line` of the script's call that reached us: the innermost frame outside torch and
    this module (a helper of the script's own counts as the script)."""
    import torch

    torch_dir = os.path.dirname(torch.__file__) + os.sep
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(torch_dir) and name != __file__ and not name.startswith("<"):
            return f"{os.path.basename(name)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


# Whether this worker began an optimizer step since it started or last saved (recorded once each time).
_TRAINED_SINCE_SAVE: list[bool] = [False]


def _recording(original: Callable[..., Any], where: Callable[..., str | None], event: Event, api: str) -> Any:
    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        try:
            path = where(*args, **kwargs)
            if path is not None:
                emit(event, path=path, api=api, at=_call_site(), **_file_facts(path))
                if event == Event.SCRIPT_SAVED:
                    _TRAINED_SINCE_SAVE[0] = False
        except Exception:  # noqa: BLE001 - what the script asked for is done; a record is an extra
            pass
        return result

    wrapper.lab_watched = True  # type: ignore[attr-defined]
    return wrapper


def install() -> None:
    """Wrap torch's checkpoint functions in this worker, before the script imports them."""
    import torch
    import torch.distributed.checkpoint as dcp

    if getattr(torch.save, "lab_watched", False):
        return
    torch.save = _recording(
        torch.save, lambda *a, **k: _path_of(k.get("f", a[1] if len(a) > 1 else None)), Event.SCRIPT_SAVED, "torch.save"
    )
    torch.load = _recording(
        torch.load, lambda *a, **k: _path_of(k.get("f", a[0] if a else None)), Event.SCRIPT_LOADED, "torch.load"
    )
    torch.distributed.init_process_group = _group_recording(torch.distributed.init_process_group)
    # Before each step of every optimizer: a step begun is training the last save does not hold.
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    register_optimizer_step_pre_hook(_step_begun)
    os._exit = _exit_recording(os._exit)
    for name, io, event in (
        ("save", "storage_writer", Event.SCRIPT_SAVED),
        ("async_save", "storage_writer", Event.SCRIPT_SAVED),
        ("load", "storage_reader", Event.SCRIPT_LOADED),
    ):
        original = getattr(dcp, name, None)
        if original is not None:
            where = functools.partial(lambda io, *a, **k: _checkpoint_id(a, k, io), io)
            setattr(dcp, name, _recording(original, where, event, f"torch.distributed.checkpoint.{name}"))


def _step_begun(optimizer: Any, args: Any, kwargs: Any) -> None:
    """An optimizer step begins: recorded when it is the first since the start or the last save."""
    if _TRAINED_SINCE_SAVE[0]:
        return
    _TRAINED_SINCE_SAVE[0] = True
    try:
        emit(Event.SCRIPT_TRAINED, at=_call_site())
    except Exception:  # noqa: BLE001 - the step goes on; a record is an extra
        pass


def _group_recording(original: Callable[..., Any]) -> Any:
    """init_process_group, recording its backend, its timeout (None: torch's default, 30 min
    for gloo) and where the script called it."""

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        try:
            timeout = kwargs.get("timeout")
            backend = kwargs.get("backend", args[0] if args else None)
            emit(
                Event.SCRIPT_GROUP,
                backend=str(backend) if backend is not None else None,
                timeout_s=timeout.total_seconds() if timeout is not None else None,
                at=_call_site(),
            )
        except Exception:  # noqa: BLE001 - the group is up; a record is an extra
            pass
        return result

    return wrapper


def _exit_recording(original: Callable[[int], Any]) -> Any:
    """os._exit, recording the code first: the process ends there, before the script returns
    to the runner that records how it ended."""

    @functools.wraps(original)
    def _exit(code: int) -> Any:
        ended(code)
        return original(code)

    return _exit


_ENDED: list[int] = []  # the code recorded, once: a script's os._exit, then the runner's own


def started() -> None:
    """The script starts; with the folder its output goes to (torchrun puts the worker's error
    file there: TORCHELASTIC_ERROR_FILE), so that the drill reads this worker's own output."""
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    emit(Event.SCRIPT_STARTED, **({"logs": os.path.dirname(error_file)} if error_file else {}))


def ended(code: int, error: BaseException | None = None) -> None:
    """How the script ended: 0 when it returned, its exit code, or 1 with the exception."""
    if _ENDED:
        return
    _ENDED.append(code)
    emit(Event.SCRIPT_ENDED, code=code, **({"error": type(error).__name__} if error is not None else {}))
