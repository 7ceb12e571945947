"""The pieces both clouds' guardrails share, on the eks-dev plan (the AKS and EKS guardrail
tests check them through each cloud's checks)."""

from lab.plan.eks_guardrails import BUCKET, NODE_GROUP
from lab.plan.guardrails import deleted_on_destroy, keeps_checkpoints, not_one_at_a_time


def _one_at_a_time(plan, groups):
    return list(not_one_at_a_time("c", plan, groups, lambda g: g.inputs.get("clusterName"), "why"))


def test_a_chain_of_dependencies_is_one_at_a_time(eks_plan):
    groups = eks_plan.of_type(NODE_GROUP)
    assert len(groups) >= 2 and _one_at_a_time(eks_plan, groups) == []


def test_two_resources_of_a_group_neither_waiting_for_the_other_are_one_finding(broken_eks_plan):
    first, second = broken_eks_plan.of_type(NODE_GROUP)[:2]
    for later, earlier in ((first, second), (second, first)):
        later.depends_on = [u for u in later.depends_on if u != earlier.urn]
        later.dependencies = [u for u in later.dependencies if u != earlier.urn]
    [finding] = _one_at_a_time(broken_eks_plan, [first, second])
    assert finding.check == "c" and finding.property == "options.depends_on"
    assert finding.expected == f"a dependency on {first.name!r} (or the reverse): why"


def test_groups_are_apart(broken_eks_plan):
    first, second = broken_eks_plan.of_type(NODE_GROUP)[:2]
    for later, earlier in ((first, second), (second, first)):
        later.dependencies = [u for u in later.dependencies if u != earlier.urn]
    groups = [first, second]
    assert list(not_one_at_a_time("c", broken_eks_plan, groups, lambda g: g.name, "why")) == []


def test_checkpoints_are_kept_unless_the_stack_lets_them_go(broken_eks_plan):
    assert keeps_checkpoints(broken_eks_plan)
    broken_eks_plan.config["elastic-spot-lab:checkpointsOnDestroy"] = "delete"
    assert not keeps_checkpoints(broken_eks_plan)


def test_a_holder_of_checkpoints_deleted_on_destroy_is_an_error(broken_eks_plan):
    [bucket] = broken_eks_plan.of_type(BUCKET)
    assert deleted_on_destroy("c", bucket) is None
    bucket.retain_on_delete = False
    finding = deleted_on_destroy("c", bucket)
    assert finding is not None and finding.severity == "error" and finding.value is False
    assert "`pulumi destroy` would delete the checkpoints" in finding.expected
    bucket.protect = True
    assert deleted_on_destroy("c", bucket) is None
