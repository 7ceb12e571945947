"""Guardrails on the workers themselves: preemptible and retried on signals, saving within the
eviction notice where they can write, failing visibly, and scaled by an HPA that can move."""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from typing import Any

from lab.k8s.guardrail import GuardrailContext, Objects, Violation
from lab.k8s.objects import (
    object_id,
    pytorchjobs,
    worker_pod_specs,
)
from lab.vocab import checkpoint_location
from lab.vocab.checkpoint_location import BLOB_CSI_DRIVER, S3_CSI_DRIVER
from lab.vocab.job import ENV_CHECKPOINT_DIR, LAUNCH_MODULE, TRAINER_UID
from lab.vocab.job_parts import PART_BURST, part_of
from lab.vocab.platform_facts import PlatformFacts


def _pytorch_container(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod's `pytorch` container (the operator's), empty where it has none."""
    return next((c for c in spec.get("containers") or [] if c.get("name") == "pytorch"), {})


def workers_spot_ready(objects: Objects, ctx: GuardrailContext) -> list[Violation]:
    """Workers are preemptible, retried on signals (ExitCode), save within the eviction
    notice, get their GPUs, and mount the checkpoint claim where the script writes, or write
    under the platform's object-store URL as the platform's identity."""
    f = ctx.facts
    out = []
    for job in pytorchjobs(objects):
        replicas = job["spec"].get("pytorchReplicaSpecs") or {}
        for rtype, spec in worker_pod_specs(job):
            where = f"{object_id(job)} {rtype}"
            out += _preemptible(where, replicas[rtype], spec, f, burst=part_of(job) == PART_BURST)
            pytorch = _pytorch_container(spec)
            gpus = ((pytorch.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu")
            if f.gpus_per_node and str(gpus) != str(f.gpus_per_node):
                out.append(Violation(where, "resources.limits.nvidia.com/gpu", gpus, str(f.gpus_per_node)))
            env = {e.get("name"): e.get("value") for e in pytorch.get("env") or []}
            if checkpoint_location.is_object_store(str(env.get(ENV_CHECKPOINT_DIR) or "")):
                out += _client_checkpoint_violations(where, str(env[ENV_CHECKPOINT_DIR]), replicas[rtype], f)
            else:
                out += _claim_violations(where, spec, pytorch, env.get(ENV_CHECKPOINT_DIR), f)
    return out


def _preemptible(
    where: str, replica: Mapping[str, Any], spec: Mapping[str, Any], f: PlatformFacts, *, burst: bool = False
) -> list[Violation]:
    """A worker is retried on signals, runs at the workers' priority (a burst worker at the
    borrowed one, below it) and stops within the notice."""
    out = []
    policy = replica.get("restartPolicy")
    if policy != "ExitCode":
        out.append(
            Violation(where, "restartPolicy", policy, "ExitCode (exit codes 128-255, i.e. signals, are retried)")
        )
    wanted, expected = f.worker_priority_class, repr(f.worker_priority_class)
    if burst:
        wanted = f.burst_priority_class
        expected = (
            f"{wanted!r}, the borrowed workers' class (below {f.worker_priority_class!r})"
            if wanted
            else "a borrowed workers' class, which this platform does not declare (update the stack)"
        )
    if not wanted or spec.get("priorityClassName") != wanted:
        out.append(Violation(where, "priorityClassName", spec.get("priorityClassName"), expected))
    grace = spec.get("terminationGracePeriodSeconds", 30)
    if not grace < f.eviction_notice_s:
        out.append(
            Violation(
                where,
                "terminationGracePeriodSeconds",
                grace,
                f"< {f.eviction_notice_s} s, the cluster's spot eviction notice",
            )
        )
    return out


def _claim_violations(
    where: str, spec: Mapping[str, Any], pytorch: Mapping[str, Any], checkpoint_dir: Any, f: PlatformFacts
) -> list[Violation]:
    """A job writing checkpoints to a mounted directory: the checkpoint claim is mounted, and
    the script writes at its mount path."""
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in spec.get("volumes") or []
        if "persistentVolumeClaim" in v
    }
    mounts = {m.get("name"): m.get("mountPath") for m in pytorch.get("volumeMounts") or []}
    paths = {mounts[n] for n in mounts if claims.get(n) == f.checkpoint_claim}
    if not paths:
        return [
            Violation(where, "volumeMounts", sorted(mounts), f"the checkpoint claim {f.checkpoint_claim!r} mounted")
        ]
    if checkpoint_dir in paths:
        return []
    return [
        Violation(
            where,
            f"env.{ENV_CHECKPOINT_DIR}",
            checkpoint_dir,
            f"the checkpoint claim's mount path {sorted(paths)} (else checkpoints land on the node's disk)",
        )
    ]


def _client_checkpoint_violations(
    where: str, url: str, replica: Mapping[str, Any], f: PlatformFacts
) -> list[Violation]:
    """A job writing checkpoints with its own clients: under the platform's storage URL (the
    only place its identity may write), and its pods carry what gives them that identity."""
    out = []
    if not f.checkpoint_url or not url.startswith(f.checkpoint_url.rstrip("/") + "/"):
        expected = f"a folder under {f.checkpoint_url!r}" if f.checkpoint_url else "a mounted directory"
        out.append(
            Violation(where, f"env.{ENV_CHECKPOINT_DIR}", url, f"{expected}: the platform's identity writes there only")
        )
    template = replica.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    missing = {k: v for k, v in f.pod_labels.items() if labels.get(k) != v}
    if missing:
        out.append(
            Violation(where, "labels", labels, f"{missing} too: the pods' clients get the storage's identity by them")
        )
    return out


_OWNER_OPTION = re.compile(r"(?:^|[\s,-])(uid|gid)[\s=]+(\d+)")


def checkpoints_writable_by_workers(objects: Objects, ctx: GuardrailContext) -> list[Violation]:
    """Workers can write to the checkpoint volume they mount: their pods run as a user other
    than root with its group as fsGroup (an object-storage mount opens to other users than root
    only through it), and the volume behind the claim opens to that group."""
    f, out = ctx.facts, []
    for job in pytorchjobs(objects):
        for rtype, spec in worker_pod_specs(job):
            if not any(
                (v.get("persistentVolumeClaim") or {}).get("claimName") == f.checkpoint_claim
                for v in spec.get("volumes") or []
            ):
                continue
            where = f"{object_id(job)} {rtype}"
            context = spec.get("securityContext") or {}
            fs_group, group = context.get("fsGroup"), context.get("runAsGroup")
            if not isinstance(fs_group, int) or fs_group == 0:
                out.append(
                    Violation(
                        where,
                        "securityContext.fsGroup",
                        fs_group,
                        f"the image user's group ({TRAINER_UID} for the trainer image): Mountpoint for S3 "
                        "lets only root open the checkpoint mount otherwise",
                    )
                )
            elif group is not None and group != fs_group:
                out.append(
                    Violation(
                        where, "securityContext.runAsGroup", group, f"the fsGroup {fs_group} the mount is opened to"
                    )
                )
            if context.get("runAsUser") == 0:
                out.append(Violation(where, "securityContext.runAsUser", 0, "the image's user, not root"))
    for pv in (o for o in objects if o.get("kind") == "PersistentVolume"):
        spec = pv.get("spec") or {}
        if (spec.get("claimRef") or {}).get("name") != f.checkpoint_claim:
            continue
        driver = (spec.get("csi") or {}).get("driver")
        options = spec.get("mountOptions") or []
        if driver == BLOB_CSI_DRIVER and not any("allow_other" in o for o in options):
            out.append(
                Violation(object_id(pv), "mountOptions", options, "'-o allow_other': blobfuse opens to root only")
            )
        owners = [(k, int(n)) for o in options for k, n in _OWNER_OPTION.findall(o)]
        if driver in (BLOB_CSI_DRIVER, S3_CSI_DRIVER) and any(n != TRAINER_UID for _, n in owners):
            out.append(
                Violation(
                    object_id(pv),
                    "mountOptions",
                    options,
                    f"no uid/gid but the trainer's ({TRAINER_UID}): the workers could not write their checkpoints",
                )
            )
    return out


def _runs_module(command: list[Any], module: str) -> bool:
    return any(a == "-m" and b == module for a, b in itertools.pairwise(command))


def worker_failures_surface(objects: Objects, ctx: GuardrailContext) -> list[Violation]:
    """A worker that fails the same way every time ends its pod soon and says why: the agent is
    our launcher (its crash-loop rule stops torchrun's in-pod restarts after a few identical
    failures; torchrun alone restarts up to max_restarts inside a pod that stays Running), and
    a failed container's last log lines become its termination message (`elastic-lab status`)."""
    out = []
    for job in pytorchjobs(objects):
        for rtype, spec in worker_pod_specs(job):
            where = f"{object_id(job)} {rtype}"
            pytorch = _pytorch_container(spec)
            policy = pytorch.get("terminationMessagePolicy")
            if policy != "FallbackToLogsOnError":
                out.append(
                    Violation(
                        where,
                        "terminationMessagePolicy",
                        policy,
                        "FallbackToLogsOnError (a failed worker's last log lines become its pod's termination message)",
                    )
                )
            command = [*(pytorch.get("command") or []), *(pytorch.get("args") or [])]
            if not _runs_module(command, LAUNCH_MODULE):
                out.append(
                    Violation(
                        where,
                        "command",
                        (pytorch.get("command") or [])[:4],
                        f"the agent `python -m {LAUNCH_MODULE}` (torchrun alone restarts a worker that fails the "
                        "same way up to max_restarts times inside a pod that stays Running)",
                    )
                )
    return out


def job_autoscaler_fits(objects: Objects, ctx: GuardrailContext) -> list[Violation]:
    """An elastic job's HPA (elasticPolicy.metrics) has room to move (minReplicas below
    maxReplicas), and each Utilization target is of a resource the workers request: the HPA
    computes utilisation against the request, and without one it never scales."""
    out = []
    for job in pytorchjobs(objects):
        policy = job["spec"].get("elasticPolicy") or {}
        metrics = policy.get("metrics") or []
        if not metrics:
            continue
        where = f"{object_id(job)} elasticPolicy"
        low, high = policy.get("minReplicas"), policy.get("maxReplicas")
        if not (isinstance(low, int) and isinstance(high, int) and low < high):
            out.append(Violation(where, "minReplicas..maxReplicas", f"{low}..{high}", "minReplicas below maxReplicas"))
        requested: set[str] = set()
        for _, spec in worker_pod_specs(job):
            for c in spec.get("containers") or []:
                if c.get("name") == "pytorch":
                    requested |= set(((c.get("resources") or {}).get("requests") or {}).keys())
        for i, metric in enumerate(metrics):
            resource = metric.get("resource") or {}
            target = resource.get("target") or {}
            utilization = metric.get("type") == "Resource" and target.get("type") == "Utilization"
            if utilization and resource.get("name") not in requested:
                out.append(
                    Violation(
                        where,
                        f"metrics[{i}].resource.name",
                        resource.get("name"),
                        f"a resource the workers request ({', '.join(sorted(requested)) or 'none'}): "
                        "utilisation is measured against the request",
                    )
                )
    return out
