"""Quota before `up`: the vCPUs a stack's plan needs, against Azure's compute usages (through an
azure-core transport) and AWS's Service Quotas (through botocore's Stubber). Enough: every
check holds; short: the check names the quota, the region, the amount and the request, and
`up` stops before the Pulumi CLI is touched."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from lab.plan.quota_needs import stack_quota
from lab.program.harness import run_program
from lab.stacks import automation as stacks
from lab.stacks import prerequisites
from lab.stacks.quota import aws_quota
from tests.cluster.test_aks_eviction import Answer, ArmTransport, FakeCredential
from tests.stacks.test_prerequisites import SUB, _providers

USAGES = f"/subscriptions/{SUB}/providers/Microsoft.Compute/locations/eastus/usages"


@pytest.fixture(scope="module")
def aks_quota():
    return stack_quota(run_program("aks-dev"))


@pytest.fixture(scope="module")
def eks_quota():
    return stack_quota(run_program("eks-dev"))


def _usage(name: str, limit: int, used: int = 0) -> dict:
    return {"unit": "Count", "currentValue": used, "limit": limit, "name": {"value": name, "localizedValue": name}}


def _azure(quota, usages: list[dict]) -> list[prerequisites.Prerequisite]:
    answers = _providers(dict.fromkeys(prerequisites.AZURE_PROVIDERS, "Registered"))
    answers[("GET", USAGES)] = Answer(200, {"value": usages})
    transport = ArmTransport(answers)
    found = prerequisites.azure(
        {}, {"ARM_SUBSCRIPTION_ID": SUB}, quota, credential=FakeCredential(), transport=transport
    )
    assert ("GET", USAGES) in {(s.method, s.path) for s in transport.sent}
    return [p for p in found if p.name.startswith("quota ")]


ENOUGH = [
    _usage("lowPriorityCores", 100, 4),
    _usage("cores", 350, 8),
    _usage("standardDSv5Family", 100, 8),
    # Azure writes family names in more than one case.
    _usage("StandardNCASv3_T4Family", 24),
]


def test_plan_needs_per_quota_and_rank(aks_quota, eks_quota):
    azure = {(n.quota, n.vcpus, n.required) for n in aks_quota.needs}
    assert azure == {
        ("lowPriorityCores", 12, True),  # rank 1: 3 x NC4as_T4_v3
        ("lowPriorityCores", 24, False),  # rank 2: 3 x NC8as_T4_v3
        ("standardDSv5Family", 10, True),  # the CPU pool at 2 x 4 and the system pool's 2
        ("cores", 10, True),
        ("standardNCASv3_T4Family", 12, False),  # rank 3, on demand
        ("cores", 22, False),
    }
    aws = {(n.quota, n.vcpus, n.required) for n in eks_quota.needs}
    assert aws == {
        ("L-3819A6DF", 12, True),
        ("L-3819A6DF", 24, False),
        ("L-DB2E81BA", 12, False),
        ("L-1216C47A", 8, True),
    }


def test_azure_quota_that_suffices_holds(aks_quota):
    found = _azure(aks_quota, ENOUGH)
    assert len(found) == len(aks_quota.needs) and all(p.ok for p in found), [p.line() for p in found]
    assert "96 of 100 vCPUs free (4 in use); the stack needs 12 for rank 1 gpuspot" in found[0].found


def test_short_azure_spot_quota_names_quota_region_amount_and_request(aks_quota):
    usages = [_usage("lowPriorityCores", 10, 4), *ENOUGH[1:]]
    short_ones = [p for p in _azure(aks_quota, usages) if not p.ok]
    # Rank 1 (12 vCPUs) is required; rank 2 (24) only a warning.
    assert [(p.name, p.required) for p in short_ones] == [
        ("quota Total Regional Spot vCPUs (lowPriorityCores) (eastus)", True),
        ("quota Total Regional Spot vCPUs (lowPriorityCores) (eastus)", False),
    ]
    short = short_ones[0]
    assert short.found.startswith("6 of 10 vCPUs free (4 in use); the stack needs 12 for rank 1 gpuspot: 3 x ")
    assert "ask for a limit of 16 vCPUs of Total Regional Spot vCPUs (lowPriorityCores) in eastus" in short.fix
    assert SUB in short.fix and "Quotas > Compute" in short.fix


def test_a_fallback_rank_without_quota_is_a_warning_naming_the_rank(aks_quota):
    usages = [_usage("lowPriorityCores", 20), _usage("cores", 350), _usage("standardDSv5Family", 100)]
    short = [p for p in _azure(aks_quota, usages) if not p.ok]
    assert {p.required for p in short} == {False}
    assert any("rank 2 gpuspot2" in p.found for p in short)  # 24 spot vCPUs, 20 allowed
    assert any("Azure lists no usage 'standardNCASv3_T4Family'" in p.found for p in short)
    assert prerequisites.problems(short) == []
    # A usage Azure does not list (a family name the table has wrong) is said, never a stop.
    unlisted = _azure(aks_quota, [_usage("lowPriorityCores", 100), _usage("cores", 350)])
    assert [p.required for p in unlisted if "Azure lists no usage 'standardDSv5Family'" in p.found] == [False]


def _aws(quota, values: dict[str, float | None]) -> list[prerequisites.Prerequisite]:
    client = boto3.client("service-quotas", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        for code in dict.fromkeys(n.quota for n in quota.needs):
            params = {"ServiceCode": "ec2", "QuotaCode": code}
            if values.get(code) is None:
                stub.add_client_error("get_service_quota", "NoSuchResourceException", expected_params=params)
                stub.add_response(
                    "get_aws_default_service_quota",
                    {"Quota": {"QuotaCode": code, "Value": 0.0}},
                    expected_params=params,
                )
            else:
                stub.add_response(
                    "get_service_quota", {"Quota": {"QuotaCode": code, "Value": values[code]}}, expected_params=params
                )
        found = aws_quota(quota, client)
        stub.assert_no_pending_responses()
    return found


def test_aws_quota_that_suffices_holds(eks_quota):
    found = _aws(eks_quota, {"L-3819A6DF": 64.0, "L-DB2E81BA": 64.0, "L-1216C47A": 32.0})
    assert all(p.ok for p in found), [p.line() for p in found]


def test_short_aws_spot_quota_names_quota_region_amount_and_request(eks_quota):
    # A new account: G and VT spot never raised (its default, 0, applies).
    found = _aws(eks_quota, {"L-3819A6DF": None, "L-DB2E81BA": 64.0, "L-1216C47A": 32.0})
    required = prerequisites.problems(found)
    assert [p.name for p in required] == ["quota All G and VT Spot Instance Requests (L-3819A6DF) (us-east-1)"]
    assert required[0].found == "limit 0 vCPUs; the stack needs 12 for rank 1 gpu-spot: 3 x g4dn.xlarge (4 vCPUs)"
    assert required[0].fix.startswith(
        "aws service-quotas request-service-quota-increase --service-code ec2 --quota-code L-3819A6DF "
        "--desired-value 12 --region us-east-1"
    )
    fallback = [p for p in found if not p.ok and not p.required]
    assert [p.found.split("; ")[1] for p in fallback] == [
        "the stack needs 24 for rank 2 gpu-spot-2: 3 x g4dn.2xlarge (8 vCPUs)"
    ]


def test_up_stops_at_a_short_quota_before_the_pulumi_cli(monkeypatch, aks_quota):
    """`up` runs the checks with the plan's quota needs; a short one stops it, nothing created."""
    seen = {}

    def check(cloud, values, *, kubeconfig=None, quota=None):
        seen["quota"] = quota
        found = [prerequisites.Prerequisite("Pulumi CLI", True, "version 3.200.0")]
        return found + (_azure(quota, [_usage("lowPriorityCores", 0), *ENOUGH[1:]]) if quota else [])

    def untouchable(**kwargs):
        raise AssertionError("the Pulumi CLI must not be touched")

    monkeypatch.setattr(prerequisites, "check", check)
    monkeypatch.setattr(stacks, "_stack", untouchable)
    with pytest.raises(stacks.StackError, match=r"up of stack 'aks-dev' \(aks\) cannot start here") as err:
        stacks.run("up", "aks-dev", say=lambda line: None)
    assert seen["quota"] == aks_quota
    assert "✗ quota Total Regional Spot vCPUs (lowPriorityCores) (eastus): 0 of 0 vCPUs free" in str(err.value)
    # A destroy is never held back by quota.
    assert stacks.missing_prerequisites("aks", "aks-dev", aks_quota, with_quota=False) is None
    assert seen["quota"] is None


def test_aws_quota_the_caller_may_not_read_is_a_warning_naming_the_permission(eks_quota):
    """Service Quotas answers AccessDeniedException (its model's error for a caller without the
    permission) to a read, or to the default's read after NoSuchResourceException: each quota is
    said unchecked, with the permissions to grant, and nothing stops `up` (as on Azure)."""
    client = boto3.client("service-quotas", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    denied = "User: arn:aws:iam::123456789012:user/dev is not authorized to perform: servicequotas:GetServiceQuota"
    with Stubber(client) as stub:
        codes = list(dict.fromkeys(n.quota for n in eks_quota.needs))
        for code in codes[:-1]:
            stub.add_client_error(
                "get_service_quota",
                "AccessDeniedException",
                denied,
                400,
                expected_params={"ServiceCode": "ec2", "QuotaCode": code},
            )
        params = {"ServiceCode": "ec2", "QuotaCode": codes[-1]}
        stub.add_client_error("get_service_quota", "NoSuchResourceException", expected_params=params)
        stub.add_client_error(
            "get_aws_default_service_quota", "AccessDeniedException", denied, 400, expected_params=params
        )
        found = aws_quota(eks_quota, client)
        stub.assert_no_pending_responses()
    assert len(found) == len(eks_quota.needs)
    assert not any(p.ok for p in found)
    assert prerequisites.problems(found) == []
    for p in found:
        assert p.found.startswith("cannot read it: ") and "AccessDeniedException" in p.found, p.found
        assert p.found.endswith(": not checked")
        assert "allow servicequotas:GetServiceQuota and servicequotas:GetAWSDefaultServiceQuota" in p.fix
        assert p.line().startswith("! quota ")
