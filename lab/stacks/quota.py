"""The clouds' quota APIs asked, before `up`, for the vCPUs the stack needs (lab/plan/quota_needs.py).

Azure: azure-mgmt-compute's `usage.list(location)`, each usage's limit less what is in use
(quota counts allocated and deallocated VMs). AWS: boto3's Service Quotas `get_service_quota`
(the applied value; the default where none was applied); Service Quotas reports no usage, so
what other instances of the account already use is not subtracted (its CloudWatch `AWS/Usage`
metric is). A short quota of rank 1 or of a CPU pool is a required prerequisite (`up` stops
with it, naming the quota, region, amount and the request to file); a fallback rank's is a
warning: that rank cannot be used until it is raised. A quota that cannot be read (the caller
may not read it, or the API failed) is a warning on both clouds, naming the permission to grant.
"""

from __future__ import annotations

from typing import Any

from lab.plan.quota_needs import StackQuota
from lab.stacks.prerequisite import Prerequisite, said
from lab.vocab.machine_shapes import same_family
from lab.vocab.quota import QuotaNeed


def _prerequisite(need: QuotaNeed, ok: bool, found: str, fix: str, *, required: bool | None = None) -> Prerequisite:
    return Prerequisite(
        f"quota {need.title} ({need.region})", ok, found, fix, required=need.required if required is None else required
    )


def azure_quota(quota: StackQuota, compute: Any, subscription: str) -> list[Prerequisite]:
    """Each need against the region's compute usages (`compute`: a ComputeManagementClient)."""
    from azure.core.exceptions import AzureError

    try:
        usages = list(compute.usage.list(quota.region))
    except AzureError as exc:
        return [
            Prerequisite(
                f"quota ({quota.region})",
                False,
                f"cannot read the compute usages of {quota.region}: {said(exc)}",
                "let the identity read Microsoft.Compute/locations/usages (Reader on the subscription), "
                "or check the quotas in the Azure portal (Quotas > Compute)",
                required=False,
            )
        ]
    out = []
    for need in quota.needs:
        usage = next((u for u in usages if u.name and same_family(str(u.name.value), need.quota)), None)
        if usage is None:
            # Most likely a family name lab/vocab/machine_shapes.py has wrong: said, never a stop.
            out.append(
                _prerequisite(
                    need,
                    False,
                    f"Azure lists no usage {need.quota!r} in {need.region}: not checked",
                    f"check {need.title} in the Azure portal (Quotas > Compute); {need.vcpus} vCPUs are needed",
                    required=False,
                )
            )
            continue
        limit, used = int(usage.limit), int(usage.current_value)
        free = limit - used
        needs = f"the stack needs {need.vcpus} for {', '.join(need.pools)}"
        found = f"{free} of {limit} vCPUs free ({used} in use); {needs}"
        out.append(_prerequisite(need, free >= need.vcpus, found, need.request(used + need.vcpus, subscription)))
    return out


# What `aws_quota` calls: a caller without them gets a warning naming them, as Azure's unreadable
# usages are (the quota is then the caller's to check, never a reason to refuse `up`).
_QUOTA_READS = ("servicequotas:GetServiceQuota", "servicequotas:GetAWSDefaultServiceQuota")


def aws_quota(quota: StackQuota, service_quotas: Any) -> list[Prerequisite]:
    """Each need against its EC2 quota's value (`service_quotas`: a boto3 service-quotas client)."""
    from botocore.exceptions import BotoCoreError, ClientError

    values: dict[str, float | str] = {}
    for code in dict.fromkeys(n.quota for n in quota.needs):
        try:
            try:
                answer = service_quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "NoSuchResourceException":
                    raise
                answer = service_quotas.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)
            values[code] = float(answer["Quota"]["Value"])
        except (BotoCoreError, ClientError) as exc:
            values[code] = said(exc)
    out = []
    for need in quota.needs:
        value = values[need.quota]
        if isinstance(value, str):
            out.append(
                _prerequisite(
                    need,
                    False,
                    f"cannot read it: {value}: not checked",
                    f"allow {' and '.join(_QUOTA_READS)}, or check it in the Service Quotas console; "
                    f"{need.vcpus} vCPUs are needed",
                    required=False,
                )
            )
            continue
        found = f"limit {value:g} vCPUs; the stack needs {need.vcpus} for {', '.join(need.pools)}"
        out.append(_prerequisite(need, value >= need.vcpus, found, need.request(subscription=None)))
    return out
