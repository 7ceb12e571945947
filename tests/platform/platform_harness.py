"""A small Pulumi mock harness for the platform's tests: runs a program function under
`pulumi.runtime.set_mocks` and records every resource (type, name, parent, inputs, and
the outputs components register), independent of the plan harness (lab/plan)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import pulumi
from pulumi.runtime.mocks import MockMonitor


@dataclass
class Rec:
    urn: str
    type: str
    name: str
    parent: str | None
    custom: bool
    inputs: dict[str, Any]
    outputs: dict[str, Any] | None = None
    provider: str | None = None
    depends_on: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.type} {self.name!r}"


class _Mocks(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict]:
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict, list]:
        return {}, []


def _plain(struct: Any) -> dict[str, Any]:
    from google.protobuf import json_format

    return json_format.MessageToDict(struct) if struct is not None else {}


class _Recorder(MockMonitor):
    def __init__(self, mocks: pulumi.runtime.Mocks) -> None:
        super().__init__(mocks)
        self.records: list[Rec] = []
        self.by_urn: dict[str, Rec] = {}

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            rec = Rec(
                urn=response.urn, type=request.type, name=request.name, parent=request.parent or None,
                custom=bool(request.custom), inputs=_plain(request.object), provider=request.provider or None,
                depends_on=list(request.dependencies),
            )
            self.records.append(rec)
            self.by_urn[rec.urn] = rec
        return response

    def RegisterResourceOutputs(self, request: Any) -> Any:
        rec = self.by_urn.get(request.urn)
        if rec is not None:
            rec.outputs = _plain(request.outputs)
        return super().RegisterResourceOutputs(request)


def run(program: Callable[[], Any], *, stack: str = "test", config: dict[str, str] | None = None) -> list[Rec]:
    from pulumi.runtime import settings
    from pulumi.runtime.stack import run_pulumi_func, wait_for_rpcs
    from pulumi.runtime.sync_await import _sync_await

    mocks = _Mocks()
    monitor = _Recorder(mocks)
    settings.ROOT.set(None)
    pulumi.runtime.set_mocks(mocks, project="elastic-spot-lab", stack=stack, preview=False, monitor=monitor)
    pulumi.runtime.set_all_config(dict(config or {}), [])

    async def body() -> None:
        program()
        await wait_for_rpcs()

    try:
        _sync_await(run_pulumi_func(body))
    finally:
        pulumi.runtime.set_all_config({}, [])
    return monitor.records
