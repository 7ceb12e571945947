"""What the AKS and the EKS guardrails both check, each over its own cloud's resources:
resources of a cluster that the cloud changes one at a time, and checkpoints that outlive the
cluster."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator

from lab.plan.findings import Finding
from lab.program.recording import Plan, RecordedResource
from lab.vocab.names import PROJECT


def not_one_at_a_time(
    check: str,
    plan: Plan,
    resources: Iterable[RecordedResource],
    group_of: Callable[[RecordedResource], Hashable],
    why: str,
) -> Iterator[Finding]:
    """The resources of each group (`group_of`: their cluster) must form a chain of
    dependencies, so that Pulumi creates them one after the other and deletes them in reverse:
    an error for each pair in a group where neither waits for the other (`why`: what the cloud
    does with two at once)."""
    groups: dict[Hashable, list[RecordedResource]] = {}
    for r in resources:
        groups.setdefault(group_of(r), []).append(r)
    for group in groups.values():
        for i, a in enumerate(group):
            for b in group[i + 1 :]:
                if not (plan.waits_for(b, a) or plan.waits_for(a, b)):
                    yield Finding.error(
                        check,
                        b,
                        "options.depends_on",
                        b.depends_on,
                        f"a dependency on {a.name!r} (or the reverse): {why}",
                    )


def keeps_checkpoints(plan: Plan) -> bool:
    """Whether the stack keeps its checkpoints on `pulumi destroy` (checkpointsOnDestroy, `keep`
    unless set to `delete`)."""
    mode: str = plan.config.get(f"{PROJECT}:checkpointsOnDestroy", "keep")
    return mode != "delete"


def deleted_on_destroy(check: str, holder: RecordedResource) -> Finding | None:
    """An error when `pulumi destroy` would delete `holder`, a resource holding checkpoints,
    instead of forgetting it; None when it is retained or protected."""
    if holder.retain_on_delete or holder.protect:
        return None
    return Finding.error(
        check,
        holder,
        "options.retain_on_delete",
        holder.retain_on_delete,
        f"True: `pulumi destroy` would delete the checkpoints (set {PROJECT}:checkpointsOnDestroy "
        "to 'delete' to let them go)",
    )
