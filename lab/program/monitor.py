"""A mock resource monitor that records every RegisterResource request (inputs and options)
and every invoke, on top of Pulumi's own MockMonitor."""

from __future__ import annotations

from typing import Any

from pulumi.runtime.mocks import MockMonitor, Mocks

from lab.program.recording import RecordedResource
from lab.program.wire import struct


class RecordingMonitor(MockMonitor):
    """MockMonitor that keeps each RegisterResource request (inputs and options)."""

    def __init__(self, mocks: Mocks) -> None:
        super().__init__(mocks)
        self.recorded: list[RecordedResource] = []
        self.by_urn: dict[str, RecordedResource] = {}
        self.invokes: list[dict[str, Any]] = []

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 - the gRPC method name
        response = super().RegisterResource(request)  # type: ignore[no-untyped-call]  # unannotated in pulumi
        inputs, secrets = struct(request.object)
        state, _ = struct(getattr(response, "object", None)) if getattr(response, "object", None) else ({}, [])
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

    def RegisterResourceOutputs(self, request: Any) -> Any:  # noqa: N802
        outputs, secrets = struct(request.outputs)
        rec = self.by_urn.get(request.urn)
        if rec is not None:
            rec.outputs, rec.secret_outputs = outputs, secrets
        return super().RegisterResourceOutputs(request)  # type: ignore[no-untyped-call]  # unannotated in pulumi

    def Invoke(self, request: Any) -> Any:  # noqa: N802
        args, _ = struct(request.args)
        self.invokes.append({"token": request.tok, "args": args})
        return super().Invoke(request)  # type: ignore[no-untyped-call]  # unannotated in pulumi
