"""Run the real Pulumi program offline, under mocks, and record everything it declares.

    from lab.plan.harness import run_program
    plan = run_program("aks-dev", {"gpuMaxNodes": "5"})
    pool = plan.one("azure-native:containerservice:AgentPool", "aks-gpu-spot")
    pool.inputs["scaleSetPriority"], pool.ignore_changes, pool.parent_name

`run_program` reads `stacks/Pulumi.<stack>.yaml`, applies overrides, feeds the config to
`pulumi.Config()` with `pulumi.runtime.set_all_config`, installs `PlanMocks` behind a
recording resource monitor, and executes the project's `__main__.py` in-process. It returns
a `Plan`: every registered resource with its type token, name, parent, inputs (wire
names, camelCase, secrets unwrapped but remembered), options (ignore_changes, depends_on,
provider, protect, ...), mocked outputs, the invokes made, and the resolved stack outputs
with their secretness. Works for any stack of the project, whatever its cloud.

The monitor records the RegisterResource requests themselves, so what is recorded is what
the Pulumi engine would receive, options included.
"""

from __future__ import annotations

import json
import runpy
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _project_name(root: Path) -> str:
    try:
        return str((yaml.safe_load((root / "Pulumi.yaml").read_text()) or {}).get("name") or "elastic-spot-lab")
    except OSError:
        return "elastic-spot-lab"


PROJECT = _project_name(ROOT)

# Wire-format signatures (pulumi/sdk/go/common/resource/sig).
_SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
_RESOURCE_SIG = "5cf8f73096256a8f31e491e813e4eb8e"
_SIG_KEY = "4dabf18193072939515e22adb298388d"
_UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
SECRET_PLACEHOLDER = "[secret]"


class StackNotFound(FileNotFoundError):
    pass


@dataclass
class RecordedResource:
    """One resource as the engine would have received it."""

    urn: str
    type: str
    name: str
    parent: str | None  # parent URN (None for the stack itself)
    custom: bool
    remote: bool
    inputs: dict[str, Any]
    secret_inputs: list[str]  # dotted paths of inputs that were secrets
    id: str | None = None
    state: dict[str, Any] = field(default_factory=dict)  # mocked outputs
    ignore_changes: list[str] = field(default_factory=list)
    replace_on_changes: list[str] = field(default_factory=list)
    dependencies: list[str] = field(default_factory=list)  # every dependency (URNs), implied ones too
    depends_on: list[str] = field(default_factory=list)  # explicit `depends_on` (not implied by an input)
    property_dependencies: dict[str, list[str]] = field(default_factory=dict)  # input -> URNs it came from
    provider: str | None = None
    protect: bool = False
    delete_before_replace: bool = False
    retain_on_delete: bool = False
    additional_secret_outputs: list[str] = field(default_factory=list)
    outputs: dict[str, Any] | None = None  # registered outputs (components)
    secret_outputs: list[str] = field(default_factory=list)

    @property
    def parent_name(self) -> str | None:
        return self.parent.rsplit("::", 1)[-1] if self.parent else None

    @property
    def label(self) -> str:
        return f"{self.type} {self.name!r}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["parent_name"] = self.parent_name
        return d


@dataclass
class Plan:
    """Everything one run of the program declared."""

    project: str
    stack: str
    config: dict[str, str]
    resources: list[RecordedResource]
    outputs: dict[str, Any]
    secret_outputs: list[str]
    invokes: list[dict[str, Any]]
    unknown_invokes: list[str] = field(default_factory=list)

    @property
    def cloud(self) -> str | None:
        return self.config.get(f"{PROJECT}:cloud")

    def of_type(self, *types: str) -> list[RecordedResource]:
        return [r for r in self.resources if r.type in types]

    def with_prefix(self, prefix: str) -> list[RecordedResource]:
        return [r for r in self.resources if r.type.startswith(prefix)]

    def one(self, type_: str, name: str | None = None) -> RecordedResource:
        found = [r for r in self.of_type(type_) if name is None or r.name == name]
        if len(found) != 1:
            raise LookupError(f"expected exactly one {type_} {name or ''!s}, found {len(found)}: {[r.name for r in found]}")
        return found[0]

    def by_urn(self, urn: str) -> RecordedResource | None:
        return next((r for r in self.resources if r.urn == urn), None)

    def children(self, urn: str | None) -> list[RecordedResource]:
        return [r for r in self.resources if r.parent == urn]

    def to_json_dict(self, *, show_secrets: bool = False) -> dict[str, Any]:
        def mask(r: RecordedResource) -> dict[str, Any]:
            d = r.to_dict()
            if not show_secrets:
                d["inputs"] = mask_paths(d["inputs"], r.secret_inputs)
                if d["outputs"] is not None:
                    d["outputs"] = mask_paths(d["outputs"], r.secret_outputs)
                d["state"] = mask_paths(d["state"], r.secret_inputs)
            return d

        outputs = {
            k: (SECRET_PLACEHOLDER if k in self.secret_outputs and not show_secrets else v) for k, v in self.outputs.items()
        }
        return {
            "project": self.project,
            "stack": self.stack,
            "config": self.config,
            "resources": [mask(r) for r in self.resources],
            "outputs": outputs,
            "secret_outputs": sorted(self.secret_outputs),
            "invokes": self.invokes,
        }


def mask_paths(value: Any, paths: Iterable[str]) -> Any:
    """Copy of `value` with each dotted path replaced by SECRET_PLACEHOLDER."""
    value = json.loads(json.dumps(value, default=str))
    for path in paths:
        parts = path.split(".") if path else []
        if not parts:
            return SECRET_PLACEHOLDER
        cur = value
        for i, part in enumerate(parts):
            key: Any = int(part) if isinstance(cur, list) and part.isdigit() else part
            last = i == len(parts) - 1
            try:
                if last:
                    cur[key] = SECRET_PLACEHOLDER
                else:
                    cur = cur[key]
            except (KeyError, IndexError, TypeError):
                break
    return value


# --------------------------------------------------------------------------- wire decoding


def _decode(value: Any, path: str, secrets: list[str]) -> Any:
    """Struct-as-dict from the wire -> plain Python; records secret paths; resource refs
    become {"$ref": urn, "id": id}."""
    if isinstance(value, dict):
        sig = value.get(_SIG_KEY)
        if sig == _SECRET_SIG:
            secrets.append(path)
            return _decode(value.get("value"), path, secrets)
        if sig == _RESOURCE_SIG:
            return {"$ref": value.get("urn"), "id": value.get("id")}
        return {k: _decode(v, f"{path}.{k}" if path else k, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, f"{path}.{i}" if path else str(i), secrets) for i, v in enumerate(value)]
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)  # protobuf Struct carries every number as a double
    if value == _UNKNOWN:
        return "<unknown>"
    return value


def _struct(msg: Any) -> tuple[dict[str, Any], list[str]]:
    from google.protobuf import json_format

    raw = json_format.MessageToDict(msg) if msg is not None else {}
    secrets: list[str] = []
    return _decode(raw, "", secrets), secrets


def numbers_back(value: Any) -> Any:
    """Numbers come back from the Pulumi wire as doubles: whole ones become ints again."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: numbers_back(v) for k, v in value.items()}
    if isinstance(value, list):
        return [numbers_back(v) for v in value]
    return value


# --------------------------------------------------------------------------- monitor


def _recording_monitor_class():
    from pulumi.runtime.mocks import MockMonitor

    class RecordingMonitor(MockMonitor):
        """MockMonitor that keeps each RegisterResource request (inputs and options)."""

        def __init__(self, mocks):
            super().__init__(mocks)
            self.recorded: list[RecordedResource] = []
            self.by_urn: dict[str, RecordedResource] = {}
            self.invokes: list[dict[str, Any]] = []

        def RegisterResource(self, request):
            response = super().RegisterResource(request)
            inputs, secrets = _struct(request.object)
            state, _ = _struct(getattr(response, "object", None)) if getattr(response, "object", None) else ({}, [])
            deps = list(request.dependencies)
            prop_deps = {k: list(v.urns) for k, v in request.propertyDependencies.items()}
            implied = {u for urns in prop_deps.values() for u in urns}
            rec = RecordedResource(
                urn=response.urn,
                type=request.type,
                name=request.name,
                parent=request.parent or None,
                custom=bool(request.custom),
                remote=bool(request.remote),
                inputs=inputs,
                secret_inputs=secrets,
                id=(getattr(response, "id", None) or None) if request.custom else None,
                state=state,
                ignore_changes=list(request.ignoreChanges),
                replace_on_changes=list(request.replaceOnChanges),
                dependencies=deps,
                depends_on=[d for d in deps if d not in implied and d != request.parent],
                property_dependencies=prop_deps,
                provider=request.provider or None,
                protect=bool(request.protect),
                delete_before_replace=bool(request.deleteBeforeReplace),
                retain_on_delete=bool(request.retainOnDelete),
                additional_secret_outputs=list(request.additionalSecretOutputs),
            )
            if request.type != "pulumi:pulumi:Stack":
                self.recorded.append(rec)
            self.by_urn[rec.urn] = rec
            return response

        def RegisterResourceOutputs(self, request):
            outputs, secrets = _struct(request.outputs)
            rec = self.by_urn.get(request.urn)
            if rec is not None:
                rec.outputs, rec.secret_outputs = outputs, secrets
            return super().RegisterResourceOutputs(request)

        def Invoke(self, request):
            args, _ = _struct(request.args)
            self.invokes.append({"token": request.tok, "args": args})
            return super().Invoke(request)

    return RecordingMonitor


# --------------------------------------------------------------------------- stack config


def stack_file(stack: str, root: Path = ROOT) -> Path:
    path = root / "stacks" / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        have = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in (root / "stacks").glob("Pulumi.*.yaml"))
        raise StackNotFound(f"stack {stack!r} has no config file {path} (stacks here: {', '.join(have) or 'none'})")
    return path


def list_stacks(root: Path = ROOT) -> list[str]:
    return sorted(p.name[len("Pulumi."):-len(".yaml")] for p in (root / "stacks").glob("Pulumi.*.yaml"))


def _config_string(value: Any) -> str:
    """A stack-file value as Pulumi hands it to programs: strings, JSON for structures."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    if value is None:
        return ""
    return str(value)


def read_stack_config(stack: str, root: Path = ROOT) -> tuple[dict[str, str], list[str]]:
    """(config with full keys as strings, secret keys) from stacks/Pulumi.<stack>.yaml.

    `secure:` values cannot be decrypted offline; they become SECRET_PLACEHOLDER, secret."""
    doc = yaml.safe_load(stack_file(stack, root).read_text()) or {}
    raw = doc.get("config") or {}
    if not isinstance(raw, dict):
        raise ValueError(f"{stack_file(stack, root)}: 'config' must be a mapping")
    config: dict[str, str] = {}
    secret_keys: list[str] = []
    for key, value in raw.items():
        key = str(key) if ":" in str(key) else f"{PROJECT}:{key}"
        if isinstance(value, dict) and set(value) == {"secure"}:
            config[key] = SECRET_PLACEHOLDER
            secret_keys.append(key)
        else:
            config[key] = _config_string(value)
    return config, secret_keys


# --------------------------------------------------------------------------- run


def run_program(
    stack: str,
    config_overrides: Mapping[str, Any] | None = None,
    *,
    root: Path = ROOT,
    program: Callable[[], Any] | None = None,
    config: Mapping[str, Any] | None = None,
) -> Plan:
    """Run the project's Pulumi program for `stack` under mocks and return the Plan.

    config_overrides: keys (short `gpuMaxNodes` or full `elastic-spot-lab:gpuMaxNodes`) to
        values; None removes a key. Applied on top of the stack file.
    config: use this config instead of the stack file (full or short keys).
    program: callable to run instead of `<root>/__main__.py` (tests of single components).
    Raises whatever the program raises (e.g. components.config.ConfigError), with the
    resources recorded until then as the exception's `recorded_resources` attribute.
    """
    import pulumi
    from pulumi.runtime import settings as pulumi_settings
    from pulumi.runtime.stack import run_pulumi_func
    from pulumi.runtime.sync_await import _sync_await

    from lab.plan.mocks import PlanMocks

    if config is None:
        values, secret_keys = read_stack_config(stack, root)
    else:
        values = {(k if ":" in k else f"{PROJECT}:{k}"): _config_string(v) for k, v in config.items()}
        secret_keys = []
    for key, value in (config_overrides or {}).items():
        full = key if ":" in key else f"{PROJECT}:{key}"
        if value is None:
            values.pop(full, None)
        else:
            values[full] = _config_string(value)

    mocks = PlanMocks()
    monitor = _recording_monitor_class()(mocks)
    pulumi_settings.ROOT.set(None)
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack, preview=False, monitor=monitor)
    # A run that failed leaves its RPCs' first exception in the process-wide RPC manager,
    # and its unfinished outputs in the settings; the next run would re-raise them. Each
    # run starts clean.
    pulumi_settings._get_rpc_manager().clear()
    with pulumi_settings.SETTINGS.lock:
        pulumi_settings.SETTINGS.outputs.clear()
    pulumi.runtime.set_all_config(dict(values), list(secret_keys))

    if program is None:
        main_py = root / "__main__.py"
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))

        def program() -> Any:
            return runpy.run_path(str(main_py), run_name="__pulumi_main__")

    async def resolve_outputs() -> tuple[dict[str, Any], list[str]]:
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

    result: dict[str, Any] = {}

    async def run() -> None:
        program()
        from pulumi.runtime.stack import wait_for_rpcs

        await wait_for_rpcs()
        result["outputs"], result["secret"] = await resolve_outputs()

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
    )


def _quiet_sibling_failures() -> None:
    """When a program fails, the error is raised to the caller, but Pulumi leaves the other
    RPC futures that failed with it unobserved, and asyncio logs each one as "Future exception
    was never retrieved" when it is collected. Drop those messages; log everything else."""
    import asyncio

    loop = asyncio.get_event_loop()

    def handler(loop: asyncio.AbstractEventLoop, context: dict) -> None:
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
