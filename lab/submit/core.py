"""Render a job for a stack, check it, and apply it with the stack's kubeconfig.

The platform's facts (namespace, etcd Service, checkpoint claim, pools, priorities, the
eviction notice) come from the stack's own Pulumi program run offline under mocks
(lab.plan.harness): the same code that declares the platform, so a job always matches the
platform it lands on.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.k8s.helm import render_chart, to_yaml
from lab.k8s.job_values import values_for
from lab.k8s.platform_guardrails import GuardrailContext, run_guardrails
from lab.k8s.schemas import CrdSchemaMissing, validate_objects
from lab.plan.harness import run_program
from lab.spec.job import JobSpec
from lab.spec.layout import JOB_CHART, ROOT
from lab.spec.names import BYO_CLUSTER_TYPE, PLATFORM_TYPE
from lab.spec.platform_facts import PlatformFacts
from lab.spec.versions import DEFAULT_KUBERNETES_VERSION


class SubmitError(RuntimeError):
    """Submission cannot go on; the message says why and what to do."""


@dataclass(frozen=True)
class StackTarget:
    stack: str
    cloud: str
    kubernetes_version: str
    facts: PlatformFacts
    kubeconfig_path: str | None  # byo: from the stack config
    inference_priority_class: str = "elastic-inference"


def stack_target(stack: str) -> StackTarget:
    """Run the stack's program offline and read the platform's facts back."""
    try:
        plan = run_program(stack)
    except FileNotFoundError as exc:
        raise SubmitError(str(exc)) from None
    platforms = [r for r in plan.resources if r.type == PLATFORM_TYPE]
    if not platforms:
        raise SubmitError(f"stack {stack!r} declares no training platform ({PLATFORM_TYPE}); nothing to submit to")
    outputs = platforms[0].outputs or {}
    byo = next((r for r in plan.resources if r.type == BYO_CLUSTER_TYPE), None)
    return StackTarget(
        stack=stack,
        cloud=str(plan.cloud),
        kubernetes_version=str(outputs.get("kubernetesVersion", DEFAULT_KUBERNETES_VERSION)),
        facts=PlatformFacts.from_dict(outputs["jobFacts"]),
        kubeconfig_path=((byo.outputs or {}).get("kubeconfigPath") if byo else None),
        inference_priority_class=str((outputs.get("priorityClasses") or {}).get("inference", "elastic-inference")),
    )


def render_job(spec: JobSpec, target: StackTarget) -> tuple[JobSpec, list[dict[str, Any]]]:
    """The job's objects for the stack's platform, validated and guarded (raises on problems)."""
    cluster_spec, values = values_for(spec, target.facts)
    objects = render_chart(JOB_CHART, values, release=spec.name, namespace=target.facts.namespace)
    problems: list[str] = []
    try:
        problems += [str(p) for p in validate_objects(objects, target.kubernetes_version)]
    except CrdSchemaMissing as exc:
        problems.append(f"cannot check the PyTorchJob: {exc}")
    ctx = GuardrailContext(
        facts=target.facts, expect_platform=False, inference_priority_class=target.inference_priority_class
    )
    for name, violations in run_guardrails(objects, ctx).items():
        problems += [f"[guardrail:{name}] {v}" for v in violations]
    if problems:
        raise SubmitError("the rendered job fails its checks:\n  - " + "\n  - ".join(problems))
    return cluster_spec, objects


# ------------------------------------------------------------------ applying
@contextmanager
def kubeconfig_for(target: StackTarget, explicit: str | None) -> Iterator[str]:
    """A kubeconfig path for the stack: --kubeconfig, the byo stack's path, or the Pulumi
    stack output `kubeconfig` (written to a private temporary file, removed afterwards,
    never printed)."""
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise SubmitError(f"--kubeconfig {explicit}: no such file")
        yield str(path)
        return
    if target.kubeconfig_path:
        path = Path(target.kubeconfig_path).expanduser()
        if not path.is_absolute():
            path = ROOT / path
        if not path.is_file():
            raise SubmitError(f"stack {target.stack!r}: kubeconfig {path} does not exist (elastic-spot-lab:kubeconfig)")
        yield str(path)
        return
    pulumi = shutil.which("pulumi")
    if not pulumi:
        raise SubmitError(
            f"stack {target.stack!r} ({target.cloud}): its kubeconfig is the Pulumi stack output `kubeconfig`, "
            "and the Pulumi CLI is not installed here; pass --kubeconfig PATH, or use --dry-run"
        )
    proc = subprocess.run(
        [pulumi, "stack", "output", "kubeconfig", "--show-secrets", "--stack", target.stack],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SubmitError(
            f"stack {target.stack!r}: cannot read the stack output kubeconfig ({last}); is the stack deployed?"
        )
    fd, name = tempfile.mkstemp(prefix="elastic-lab-kubeconfig-", suffix=".yaml")
    try:
        with os.fdopen(fd, "w") as fh:
            os.chmod(name, 0o600)
            fh.write(proc.stdout)
        yield name
    finally:
        Path(name).unlink(missing_ok=True)


def apply(manifest: str, kubeconfig: str, *, timeout_s: int = 30) -> str:
    """`kubectl apply -f -` with `kubeconfig`, after checking the API server answers."""
    kubectl = shutil.which("kubectl")
    if not kubectl:
        raise SubmitError(
            "kubectl is not installed: install it, or pipe `elastic-lab submit --dry-run` into your own tooling"
        )
    base = [kubectl, "--kubeconfig", kubeconfig, f"--request-timeout={timeout_s}s"]
    probe = subprocess.run(
        [*base, "get", "--raw", "/version"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s + 15,
    )
    if probe.returncode != 0:
        raise SubmitError(
            f"no Kubernetes API server reachable with kubeconfig {kubeconfig}: {_last_line(probe.stderr)}"
        )
    proc = subprocess.run(
        [*base, "apply", "-f", "-"], input=manifest, capture_output=True, text=True, timeout=timeout_s + 60
    )
    if proc.returncode != 0:
        hint = ""
        if "PyTorchJob" in proc.stderr and "no matches for kind" in proc.stderr:
            hint = " (the training operator is not installed: deploy the platform first)"
        raise SubmitError(f"kubectl apply failed{hint}: {_last_line(proc.stderr)}")
    return proc.stdout


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no error output"


def manifest_text(spec: JobSpec, target: StackTarget, objects: list[Mapping[str, Any]]) -> str:
    header = (
        f"# elastic-lab submit --stack {target.stack}: job {spec.name} on {target.cloud}, "
        f"namespace {target.facts.namespace}\n"
        f"# rendezvous {spec.rdzv_backend.value} at {spec.rdzv_endpoint}, id {spec.rdzv_id}, nodes {spec.nnodes}\n"
    )
    return header + "---\n" + to_yaml([dict(o) for o in objects])
