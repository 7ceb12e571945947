"""A deployed stack's outputs, as a typed record, and the kubeconfig a command uses for it.

The outputs are what `components/program.py` exports (the cluster component's `outputs()`
and the platform's namespace, etcd host and checkpoint claim), read back through the Pulumi
Automation API, which drives the Pulumi CLI and the stack's backend (`pulumi login`). The
kubeconfig is a secret: it is never printed, and the record's repr leaves it out.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.stacks.automation import PULUMI_INSTALL, StackError
from lab.vocab.layout import ROOT
from lab.vocab.placeholders import placeholder

# Output name (as the program exports it) -> the record's field.
_OUTPUT_FIELDS = {
    "kubeconfig": "kubeconfig",
    "kubeconfigPath": "kubeconfig_path",
    "clusterName": "cluster_name",
    "resourceGroupName": "resource_group_name",
    "nodeResourceGroup": "node_resource_group",
    "poolNames": "pool_names",
    "storageAccountName": "storage_account_name",
    "region": "region",
    "vpcId": "vpc_id",
    "nodeGroupNames": "node_group_names",
    "checkpointBucket": "checkpoint_bucket",
    "fisTemplateId": "fis_template_id",
    "fisRoleArn": "fis_role_arn",
    "platformNamespace": "platform_namespace",
    "etcdHost": "etcd_host",
    "checkpointClaim": "checkpoint_claim",
    "imageRegistry": "image_registry",
    "gpuRanks": "gpu_ranks",
}
# The outputs the offline plan (lab.program.harness) knows as a deployment of the stack will have
# them: the names its config gives or derives from its own names. The others are the cloud's to
# choose (ids, ARNs, a VPC, a bucket's suffix) or derive from the subscription or account, which
# the offline plan mocks; the kubeconfig is a secret of the cluster.
_PLANNED_OUTPUTS = frozenset(
    {
        "kubeconfigPath",
        "clusterName",
        "resourceGroupName",
        "nodeResourceGroup",
        "poolNames",
        "region",
        "nodeGroupNames",
        "platformNamespace",
        "etcdHost",
        "checkpointClaim",
        "gpuRanks",
    }
)


@dataclass(frozen=True)
class StackOutputs:
    """What one deployed stack exported. A cloud's own fields are None on another cloud's
    stack; `need` names a missing one in a StackError."""

    stack: str
    kubeconfig: str | None = field(default=None, repr=False)  # a secret: never shown
    kubeconfig_path: str | None = None  # byo
    cluster_name: str | None = None
    # AKS
    resource_group_name: str | None = None
    node_resource_group: str | None = None
    pool_names: Mapping[str, str] = field(default_factory=dict)  # pool role -> AKS agent pool name
    storage_account_name: str | None = None
    # EKS
    region: str | None = None
    vpc_id: str | None = None
    node_group_names: Mapping[str, str] = field(default_factory=dict)  # pool role -> EKS node group name
    checkpoint_bucket: str | None = None
    fis_template_id: str | None = None
    fis_role_arn: str | None = None
    # The training platform
    platform_namespace: str | None = None
    etcd_host: str | None = None
    checkpoint_claim: str | None = None
    # The registry the nodes pull the training image from (AKS: an ACR login server; EKS: an
    # ECR repository URL)
    image_registry: str | None = None
    # The GPU capacity ranks in the order the autoscaler tries them: {rank, pool | group, capacity, ...}
    gpu_ranks: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def from_outputs(cls, stack: str, outputs: Mapping[str, Any]) -> StackOutputs:
        """The record of a stack's outputs by their exported names (others are ignored)."""
        values: dict[str, Any] = {}
        for name, attr in _OUTPUT_FIELDS.items():
            value = outputs.get(name)
            if value is None:
                continue
            if attr == "kubeconfig" and not isinstance(value, str):
                value = json.dumps(value)  # a kubeconfig exported as an object
            elif attr in ("pool_names", "node_group_names"):
                value = {str(k): str(v) for k, v in dict(value).items()}
            elif attr == "gpu_ranks":
                value = tuple(dict(r) for r in value if isinstance(r, Mapping))
            else:
                value = str(value)
            values[attr] = value
        return cls(stack=stack, **values)

    @classmethod
    def planned(cls, stack: str, outputs: Mapping[str, Any]) -> StackOutputs:
        """The record of the outputs of the stack's offline plan, for a dry run that cannot read
        the deployed stack: each output the plan cannot know a placeholder naming it, the
        kubeconfig none."""
        known = {name: value for name, value in outputs.items() if name in _PLANNED_OUTPUTS}
        unknown = {
            name: placeholder(f"{name} of {stack}: known once deployed")
            for name in _OUTPUT_FIELDS
            if name not in _PLANNED_OUTPUTS and name != "kubeconfig" and outputs.get(name) is not None
        }
        return cls.from_outputs(stack, {**known, **unknown})

    def need(self, attr: str) -> str:
        """The value of field `attr`; StackError naming the output when the stack has none."""
        value = getattr(self, attr)
        if not value:
            name = next(k for k, v in _OUTPUT_FIELDS.items() if v == attr)
            raise StackError(f"stack {self.stack!r} has no `{name}` output: is it deployed (`elastic-lab up`)?")
        return str(value)

    def spot_gpu_pools(self, names: str) -> tuple[str, ...]:
        """Every spot GPU rank's pool (AKS) or group (EKS) name, rank 1 first; rank 1's alone
        for a stack deployed before it exported its ranks."""
        key = "pool" if names == "pool_names" else "group"
        spot = tuple(str(r[key]) for r in self.gpu_ranks if r.get("capacity") == "spot" and r.get(key))
        return spot or (self.gpu_pool(names),)

    def gpu_pool(self, names: str) -> str:
        """The GPU spot pool's name in `pool_names` or `node_group_names`."""
        found = getattr(self, names).get("gpu-spot")
        if not found:
            name = next(k for k, v in _OUTPUT_FIELDS.items() if v == names)
            raise StackError(f"stack {self.stack!r}: its `{name}` output names no gpu-spot pool")
        return str(found)


def read_outputs(stack: str) -> StackOutputs:
    """The deployed stack's outputs, secrets included (never printed), through the Pulumi
    Automation API."""
    from pulumi import automation

    try:
        selected = automation.select_stack(stack_name=stack, work_dir=str(ROOT))
        outputs = {key: out.value for key, out in selected.outputs().items()}
    except FileNotFoundError:
        raise StackError(
            f"stack {stack!r}: its outputs (kubeconfig, pool and eviction names) are read with the Pulumi CLI, "
            f"which is not installed here ({PULUMI_INSTALL})"
        ) from None
    except automation.errors.CommandError as exc:
        last = (str(exc).strip().splitlines() or ["no output"])[-1]
        raise StackError(f"stack {stack!r}: cannot read its outputs ({last}); is the stack deployed?") from None
    return StackOutputs.from_outputs(stack, outputs)


@contextmanager
def kubeconfig_file(stack: str, *, explicit: str | None = None, configured: str | None = None) -> Iterator[str]:
    """A kubeconfig path for the stack: `explicit` (--kubeconfig), else `configured` (the byo
    stack's file, relative to the project), else the stack output `kubeconfig`, written to a
    private temporary file that is removed afterwards."""
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise StackError(f"--kubeconfig {explicit}: no such file")
        yield str(path)
        return
    if configured:
        path = Path(configured).expanduser()
        if not path.is_absolute():
            path = ROOT / path
        if not path.is_file():
            raise StackError(f"stack {stack!r}: kubeconfig {path} does not exist (elastic-spot-lab:kubeconfig)")
        yield str(path)
        return
    kubeconfig = read_outputs(stack).kubeconfig
    if not kubeconfig:
        raise StackError(f"stack {stack!r} has no `kubeconfig` output: is it deployed (`pulumi up`)?")
    fd, name = tempfile.mkstemp(prefix="elastic-lab-kubeconfig-", suffix=".yaml")
    try:
        with os.fdopen(fd, "w") as fh:
            os.chmod(name, 0o600)
            fh.write(kubeconfig)
        yield name
    finally:
        Path(name).unlink(missing_ok=True)
