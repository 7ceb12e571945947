"""Run the project's Pulumi program offline, under mocks, and record everything it declares.

    from lab.program.harness import run_program
    plan = run_program("aks-dev", {"gpuMaxNodes": "5"})
    pool = plan.one("azure-native:containerservice:AgentPool", "aks-gpu-spot")
    pool.inputs["scaleSetPriority"], pool.ignore_changes, pool.parent_name

`run_program` reads `stacks/Pulumi.<stack>.yaml` (lab.program.stack_files), applies overrides,
feeds the config to `pulumi.Config()` with `pulumi.runtime.set_all_config`, installs
`PlanMocks` (lab.program.mocks) behind a recording monitor (lab.program.monitor), and runs the
program's body, `components.program.main`, in-process: what `__main__.py` runs. It returns a
`Plan` (lab.program.recording): every registered resource with its type token, name, parent,
inputs, options, mocked outputs, the invokes made, and the resolved stack outputs with
their secretness. Works for any stack of the project, whatever its cloud.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import settings as pulumi_settings
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

import components.program
from lab.program.mocks import PlanMocks
from lab.program.monitor import RecordingMonitor
from lab.program.recording import Plan
from lab.program.stack_files import config_string, read_stack_config
from lab.program.wire import numbers_back
from lab.vocab.layout import ROOT
from lab.vocab.names import PROJECT


def run_program(
    stack: str,
    config_overrides: Mapping[str, Any] | None = None,
    *,
    root: Path = ROOT,
    program: Callable[[], Any] | None = None,
    config: Mapping[str, Any] | None = None,
    cloud: Iterable[str] | None = None,
) -> Plan:
    """Run the project's Pulumi program for `stack` under mocks and return the Plan.

    config_overrides: keys (short `gpuMaxNodes` or full `elastic-spot-lab:gpuMaxNodes`) to
        values; None removes a key. Applied on top of the stack file.
    config: use this config instead of the stack file (full or short keys).
    program: callable to run instead of the project's program (tests of single components).
    cloud: ids the cloud already holds (e.g. a plan's `kept_by_destroy`): declaring one without
        importing it fails as the cloud would. None (the default): not modelled.
    Raises whatever the program raises (e.g. lab.vocab.problems.InvalidInput), with the
    resources recorded until then as the exception's `recorded_resources` attribute.
    """
    values, secret_keys = _config_values(stack, root, config, config_overrides)
    mocks = PlanMocks(cloud)
    monitor = RecordingMonitor(mocks)
    _start_mocked_runtime(stack, mocks, monitor, values, secret_keys)
    body = program or components.program.main
    result: dict[str, Any] = {}

    async def run() -> None:
        body()
        from pulumi.runtime.stack import wait_for_rpcs

        await wait_for_rpcs()
        result["outputs"], result["secret"] = await _resolve_outputs()

    _quiet_sibling_failures()
    try:
        _sync_await(run_pulumi_func(run))
    except BaseException as exc:
        # What had been declared when it failed (config errors: nothing).
        try:
            exc.recorded_resources = list(monitor.recorded)  # type: ignore[attr-defined]
        except AttributeError:
            pass
        raise
    finally:
        pulumi.runtime.set_all_config({}, [])
    return Plan(
        project=PROJECT,
        stack=stack,
        config=dict(values),
        resources=list(monitor.recorded),
        outputs=result.get("outputs", {}),
        secret_outputs=result.get("secret", []),
        invokes=list(monitor.invokes),
        unknown_invokes=list(mocks.unknown_calls),
        imported=list(mocks.imported),
    )


def _config_values(
    stack: str, root: Path, config: Mapping[str, Any] | None, overrides: Mapping[str, Any] | None
) -> tuple[dict[str, Any], list[str]]:
    """(full key -> config string, secret keys): the stack file's, or `config` instead, with
    the overrides on top (None removes a key)."""
    if config is None:
        values, secret_keys = read_stack_config(stack, root)
    else:
        values = {(k if ":" in k else f"{PROJECT}:{k}"): config_string(v) for k, v in config.items()}
        secret_keys = []
    for key, value in (overrides or {}).items():
        full = key if ":" in key else f"{PROJECT}:{key}"
        if value is None:
            values.pop(full, None)
        else:
            values[full] = config_string(value)
    return values, list(secret_keys)


def _start_mocked_runtime(
    stack: str, mocks: PlanMocks, monitor: RecordingMonitor, values: Mapping[str, Any], secret_keys: list[str]
) -> None:
    """Pulumi's runtime set to record under mocks, with the stack's config."""
    pulumi_settings.ROOT.set(None)
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack, preview=False, monitor=monitor)
    # A run that failed leaves its RPCs' first exception in the process-wide RPC manager,
    # and its unfinished outputs in the settings; the next run would re-raise them. Each
    # run starts clean.
    pulumi_settings._get_rpc_manager().clear()
    with pulumi_settings.SETTINGS.lock:
        pulumi_settings.SETTINGS.outputs.clear()
    pulumi.runtime.set_all_config(dict(values), list(secret_keys))


async def _resolve_outputs() -> tuple[dict[str, Any], list[str]]:
    """The stack's exports, plain (numbers as numbers), and the names of the secret ones."""
    stack_resource = pulumi_settings.get_root_resource()
    exported = dict(getattr(stack_resource, "outputs", {}) or {})
    outputs: dict[str, Any] = {}
    secret: list[str] = []
    for name, value in exported.items():
        out = pulumi.Output.from_input(value)
        outputs[name] = numbers_back(_plain(await out.future(with_unknowns=True)))
        if await out.is_secret():
            secret.append(name)
    return outputs, secret


def _quiet_sibling_failures() -> None:
    """When a program fails, the error is raised to the caller, but Pulumi leaves the other
    RPC futures that failed with it unobserved, and asyncio logs each one as "Future exception
    was never retrieved" when it is collected. Drop those messages; log everything else."""
    import asyncio

    loop = asyncio.get_event_loop()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message", "").startswith("Future exception was never retrieved"):
            return
        loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


def _plain(value: Any) -> Any:
    """Output values -> JSON-able Python (unknowns as '<unknown>', objects via their dict)."""
    from pulumi.output import Unknown

    if isinstance(value, Unknown):
        return "<unknown>"
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
