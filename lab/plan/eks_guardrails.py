"""Our guardrails on an EKS plan (beyond what AWS itself would reject).

  guardrail:eks-on-demand-groups  node groups labelled cpu or system are on-demand
  guardrail:eks-gpu-group         the GPU group: spot, several instance types, an NVIDIA AMI,
                                  tainted (EKS taints nothing), the device plugin's label, can
                                  reach zero, its desired size left to the autoscaler
  guardrail:eks-scale-from-zero   a GPU group that can reach zero tells Cluster Autoscaler its
                                  nodes' labels and taints (node-template tags on its ASG), all but
                                  its startup taints, which the autoscaler is told of instead; the
                                  autoscaler's chart and image agree; the Mountpoint add-on is a
                                  pinned release that lets nodes scale down (>= 2.5.0)
  guardrail:eks-network-policy    the VPC CNI add-on enforces NetworkPolicies (off by default on EKS)
  guardrail:eks-metrics-server    the metrics-server add-on, a pinned release: the resource metrics
                                  API a job's HPA (`submit --autoscale-cpu`) reads
  guardrail:bucket-not-public     every bucket has a public access block with all four settings
  guardrail:fis-targets-gpu-spot  every FIS target is one running spot instance of the GPU group,
                                  chosen by its node-group tag, never listed ARNs
  guardrail:eks-group-operations  the node groups of a cluster are created one after the other
  guardrail:eks-checkpoints-kept  `pulumi destroy` leaves the checkpoint bucket (and does not
                                  empty it), unless the stack lets it go
  guardrail:bucket-lifecycle      a versioned bucket expires its noncurrent versions and aborts
                                  incomplete multipart uploads (S3 bills both until deleted)
  guardrail:eks-registry-force-delete  an ECR repository the stack creates is deleted with its
                                  images (ECR refuses otherwise, and the destroy stops there)
  guardrail:eks-s3-endpoint       every route table that sends the internet through a NAT gateway
                                  reaches S3 through a gateway endpoint (free) instead

Each finding names resource, property, value and what was expected.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from components.eks.catalogue import ACCELERATOR_LABEL, GPU_AMI_TYPES
from components.eks.cluster import VPC_CNI_ADDON
from components.eks.fis import CLUSTER_TAG as FIS_CLUSTER_TAG
from components.eks.fis import NODEGROUP_TAG, SPOT_INTERRUPTION
from components.eks.network import GATEWAY_ENDPOINT, s3_service
from components.eks.node_groups import NODE_TEMPLATE
from lab.plan.findings import Finding
from lab.plan.guardrails import deleted_on_destroy, keeps_checkpoints, not_one_at_a_time
from lab.vocab import pools as labels
from lab.vocab.versions import (
    CLUSTER_AUTOSCALER_CHART,
    CLUSTER_AUTOSCALER_CHARTS,
    METRICS_SERVER_ADDON,
    METRICS_SERVER_MIN,
    MOUNTPOINT_S3_CSI_ADDON,
    MOUNTPOINT_S3_CSI_MIN,
    add_on_release,
)

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
BUCKET = "aws:s3/bucket:Bucket"
PUBLIC_ACCESS_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
FIS_TEMPLATE = "aws:fis/experimentTemplate:ExperimentTemplate"
ASG_TAG = "aws:autoscaling/tag:Tag"
HELM_CHART = "kubernetes:helm.sh/v4:Chart"
ADDON = "aws:eks/addon:Addon"
CLUSTER = "aws:eks/cluster:Cluster"
ECR = "aws:ecr/repository:Repository"
VERSIONING = "aws:s3/bucketVersioning:BucketVersioning"
LIFECYCLE = "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration"
ROUTE = "aws:ec2/route:Route"
ROUTE_TABLE = "aws:ec2/routeTable:RouteTable"
VPC_ENDPOINT = "aws:ec2/vpcEndpoint:VpcEndpoint"
AWS_PROVIDER = "pulumi:providers:aws"
# Taints a node loses once its agents are ready: never in a scale-from-zero template (no pod
# tolerates them, so none would fit), always among the autoscaler's `--startup-taint`s.
STARTUP_TAINT_KEYS = frozenset({labels.MOUNTPOINT_STARTUP_TAINT.key})
_BLOCKS = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


def is_eks(plan: Any) -> bool:
    return bool(plan.of_type(NODE_GROUP))


def has_bucket(plan: Any) -> bool:
    return bool(plan.of_type(BUCKET))


def has_fis(plan: Any) -> bool:
    return bool(plan.of_type(FIS_TEMPLATE))


def has_registry(plan: Any) -> bool:
    return bool(plan.of_type(ECR))


def has_nat_routes(plan: Any) -> bool:
    return bool(_nat_routes(plan))


def _role(group: Any) -> str | None:
    return (group.inputs.get("labels") or {}).get(labels.POOL_LABEL)


def gpu_groups(plan: Any) -> list[Any]:
    return [g for g in plan.of_type(NODE_GROUP) if _role(g) == labels.POOL_GPU_SPOT]


def on_demand_groups(plan: Any) -> Iterator[Finding]:
    """The CPU group (etcd, the operator) and any system group run on on-demand capacity."""
    for g in plan.of_type(NODE_GROUP):
        if (
            _role(g) in (labels.POOL_CPU, labels.POOL_SYSTEM)
            and g.inputs.get("capacityType", "ON_DEMAND") != "ON_DEMAND"
        ):
            yield Finding.error(
                "guardrail:eks-on-demand-groups",
                g,
                "capacityType",
                g.inputs.get("capacityType"),
                "'ON_DEMAND': this group runs the rendezvous server and the operator, which a spot "
                "interruption must not take away",
            )


def gpu_group(plan: Any) -> Iterator[Finding]:
    """The GPU group: spot, several instance types, NVIDIA AMI, tainted, labelled for the device
    plugin, able to reach zero, its desired size owned by the autoscaler."""
    name = "guardrail:eks-gpu-group"
    groups = gpu_groups(plan)
    if not groups:
        yield Finding.error(name, "stack", "labels", None, f"a node group labelled {labels.POOL_LABEL}=gpu-spot")
    for g in groups:
        i = g.inputs
        spot = i.get("capacityType") == "SPOT"  # rank 1 is (lab/plan/capacity_checks.py)
        types = i.get("instanceTypes") or []
        if spot and len(types) < 2:
            yield Finding.warning(
                name, g, "instanceTypes", types, "two or more instance types: one type's spot capacity often runs out"
            )
        if i.get("amiType") not in GPU_AMI_TYPES:
            yield Finding.error(name, g, "amiType", i.get("amiType"), "an NVIDIA AMI type: " + ", ".join(GPU_AMI_TYPES))
        taints = i.get("taints") or []
        keys = {t.get("key") for t in taints if t.get("effect") in ("NO_SCHEDULE", "NO_EXECUTE")}
        for wanted in (labels.GPU_TAINT, labels.SPOT_TAINT) if spot else (labels.GPU_TAINT,):
            if wanted.key not in keys:
                yield Finding.error(
                    name,
                    g,
                    "taints",
                    taints,
                    f"a {wanted.key} taint with effect NO_SCHEDULE (EKS taints no spot node: without it any pod "
                    "may land on a spot GPU node)",
                )
        node_labels = i.get("labels") or {}
        if node_labels.get(labels.NVIDIA_GPU_PRESENT_LABEL) != "true":
            yield Finding.error(
                name,
                g,
                f"labels.{labels.NVIDIA_GPU_PRESENT_LABEL}",
                node_labels.get(labels.NVIDIA_GPU_PRESENT_LABEL),
                "'true' (the NVIDIA device plugin's node affinity selects it)",
            )
        if not node_labels.get(ACCELERATOR_LABEL):
            yield Finding.error(
                name,
                g,
                f"labels.{ACCELERATOR_LABEL}",
                node_labels.get(ACCELERATOR_LABEL),
                "the GPU type (e.g. 'nvidia-a10g'): the autoscaler counts a new node as GPU-less without it, "
                "until the device plugin advertises it, and scales out more spot GPUs meanwhile",
            )
        scaling = i.get("scalingConfig") or {}
        if scaling.get("minSize") != 0:
            yield Finding.error(
                name, g, "scalingConfig.minSize", scaling.get("minSize"), "0 (the spot GPU group scales to zero)"
            )
        if "scalingConfig.desiredSize" not in g.ignore_changes:
            yield Finding.error(
                name,
                g,
                "options.ignore_changes",
                g.ignore_changes,
                "to include 'scalingConfig.desiredSize': the autoscaler owns it; `pulumi up` would reset it",
            )


def scale_from_zero(plan: Any) -> Iterator[Finding]:
    """A GPU group at zero has no node to read labels and taints from: its Auto Scaling group
    carries them as Cluster Autoscaler node-template tags (taints in Kubernetes effect spelling)."""
    yield from autoscaler_chart_and_image_agree(plan)
    yield from startup_taints_known_to_the_autoscaler(plan)
    yield from mountpoint_release(plan)
    for g in gpu_groups(plan):
        if (g.inputs.get("scalingConfig") or {}).get("minSize") != 0:
            continue
        tags = _asg_tags(plan, g)
        wanted = {f"{NODE_TEMPLATE}/label/{k}": v for k, v in (g.inputs.get("labels") or {}).items()}
        for t in g.inputs.get("taints") or []:
            key = f"{NODE_TEMPLATE}/taint/{t.get('key')}"
            if t.get("key") in STARTUP_TAINT_KEYS:
                if key in tags:
                    yield Finding.error(
                        "guardrail:eks-scale-from-zero",
                        g,
                        f"asgTags[{key!r}]",
                        tags[key],
                        "no template tag for a startup taint: no pod tolerates it, so the autoscaler would "
                        "find that no pending pod fits a new node",
                    )
                continue
            wanted[key] = f"{t.get('value', '')}:{_EFFECTS.get(t.get('effect'), '?')}"
        for key, value in sorted(wanted.items()):
            if tags.get(key) != value:
                yield Finding.error(
                    "guardrail:eks-scale-from-zero",
                    g,
                    f"asgTags[{key!r}]",
                    tags.get(key),
                    f"{value!r}: an aws.autoscaling.Tag on the group's Auto Scaling group, or Cluster Autoscaler "
                    "cannot tell that a new node would fit a pending GPU pod",
                )


def _asg_tags(plan: Any, group: Any) -> dict[Any, Any]:
    """The tags on `group`'s Auto Scaling group (every tag where the plan does not know the
    group's Auto Scaling group name)."""
    asgs = {
        a.get("name")
        for r in (group.state or {}).get("resources") or []
        for a in (r or {}).get("autoscalingGroups") or []
    }
    return {
        (t.inputs.get("tag") or {}).get("key"): (t.inputs.get("tag") or {}).get("value")
        for t in plan.of_type(ASG_TAG)
        if not asgs or t.inputs.get("autoscalingGroupName") in asgs
    }


def autoscaler_chart_and_image_agree(plan: Any) -> Iterator[Finding]:
    """Cluster Autoscaler's image is its chart's release: an image newer than its chart watches
    what the chart's RBAC does not grant, waits for those informers, and never scales."""
    app_versions = dict(CLUSTER_AUTOSCALER_CHARTS.values())
    for chart in plan.of_type(HELM_CHART):
        if chart.inputs.get("chart") != CLUSTER_AUTOSCALER_CHART:
            continue
        version = chart.inputs.get("version")
        tag = str(((chart.inputs.get("values") or {}).get("image") or {}).get("tag") or "")
        app = app_versions.get(str(version))
        if app is None:
            yield Finding.error(
                "guardrail:eks-scale-from-zero",
                chart,
                "version",
                version,
                "a chart checked against its image: " + ", ".join(f"{c} ({a})" for c, a in app_versions.items()),
            )
        elif tag.lstrip("v").split(".")[:2] != app.split(".")[:2]:
            yield Finding.error(
                "guardrail:eks-scale-from-zero",
                chart,
                "values.image.tag",
                tag,
                f"a v{app.rsplit('.', 1)[0]}.x image, the release of chart {version} ({app})",
            )


def startup_taints_known_to_the_autoscaler(plan: Any) -> Iterator[Finding]:
    """Every startup taint of a node group is one of Cluster Autoscaler's `--startup-taint`s
    (where the plan shows its chart's values): otherwise a new node still carrying it counts as
    unable to take the pending pods, and the autoscaler adds more spot GPUs for them."""
    charts = [c for c in plan.of_type(HELM_CHART) if c.inputs.get("chart") == CLUSTER_AUTOSCALER_CHART]
    for chart in charts:
        args = (chart.inputs.get("values") or {}).get("extraArgs") or {}
        told = {str(v) for k, v in args.items() if str(k).split("_", 1)[0] == "startup-taint"}
        for g in plan.of_type(NODE_GROUP):
            for t in g.inputs.get("taints") or []:
                if t.get("key") in STARTUP_TAINT_KEYS and t.get("key") not in told:
                    yield Finding.error(
                        "guardrail:eks-scale-from-zero",
                        chart,
                        "values.extraArgs.startup-taint",
                        sorted(told) or None,
                        f"{t.get('key')!r}, a startup taint of node group {g.name}",
                    )


def mountpoint_release(plan: Any) -> Iterator[Finding]:
    """The Mountpoint S3 CSI add-on is a pinned release of at least MOUNTPOINT_S3_CSI_MIN: an
    unpinned add-on is whatever EKS defaults to, and before 2.5.0 its pods keep nodes from
    scaling down."""
    why = "older ones keep GPU nodes from scaling down"
    yield from _pinned_releases(
        plan, "guardrail:eks-scale-from-zero", MOUNTPOINT_S3_CSI_ADDON, MOUNTPOINT_S3_CSI_MIN, why
    )


def _pinned_releases(plan: Any, check: str, name: str, minimum: tuple[int, int, int], why: str) -> Iterator[Finding]:
    """Each add-on `name` is a pinned release of at least `minimum` (`why` says what an older
    or unpinned one does)."""
    for addon in plan.of_type(ADDON):
        if addon.inputs.get("addonName") != name:
            continue
        version = addon.inputs.get("addonVersion")
        release = add_on_release(version)
        if release is None or release < minimum:
            at_least = "v" + ".".join(map(str, minimum))
            yield Finding.error(check, addon, "addonVersion", version, f"a pinned release, {at_least} or newer ({why})")


def metrics_server(plan: Any) -> Iterator[Finding]:
    """Each cluster runs metrics-server (the metrics-server add-on, a pinned release of at least
    METRICS_SERVER_MIN): without the resource metrics API it serves, the HPA that `submit
    --autoscale-cpu` asks the training operator for never reads a metric and never scales."""
    name = "guardrail:eks-metrics-server"
    if not [a for a in plan.of_type(ADDON) if a.inputs.get("addonName") == METRICS_SERVER_ADDON]:
        for cluster in plan.of_type(CLUSTER):
            yield Finding.error(
                name,
                cluster,
                "addons",
                None,
                f"the {METRICS_SERVER_ADDON} add-on: EKS serves no metrics.k8s.io API otherwise, and a job's HPA "
                "never reads the workers' CPU",
            )
    why = "older lines are upstream's for Kubernetes before 1.31"
    yield from _pinned_releases(plan, name, METRICS_SERVER_ADDON, METRICS_SERVER_MIN, why)


def network_policy_enforced(plan: Any) -> Iterator[Finding]:
    """Each cluster runs the VPC CNI as a managed add-on with `enableNetworkPolicy`: without
    it EKS enforces no NetworkPolicy, and etcd's (only job pods may reach it) does nothing."""
    addons = [a for a in plan.of_type(ADDON) if a.inputs.get("addonName") == VPC_CNI_ADDON]
    for cluster in plan.of_type(CLUSTER):
        if not addons:
            yield Finding.error(
                "guardrail:eks-network-policy",
                cluster,
                "addons",
                None,
                f"the {VPC_CNI_ADDON} add-on with enableNetworkPolicy 'true' (EKS enforces no NetworkPolicy otherwise)",
            )
    for addon in addons:
        try:
            config = json.loads(addon.inputs.get("configurationValues") or "{}")
        except ValueError:
            config = {}
        if str(config.get("enableNetworkPolicy")).lower() != "true":
            yield Finding.error(
                "guardrail:eks-network-policy",
                addon,
                "configurationValues.enableNetworkPolicy",
                config.get("enableNetworkPolicy"),
                "'true': the add-on's network policy agent enforces NetworkPolicies",
            )


def bucket_not_public(plan: Any) -> Iterator[Finding]:
    """Every bucket has a public access block with all four settings on."""
    blocks = {str(b.inputs.get("bucket")): b for b in plan.of_type(PUBLIC_ACCESS_BLOCK)}
    for bucket in plan.of_type(BUCKET):
        ident = str(bucket.id or bucket.state.get("bucket"))
        block = blocks.get(ident) or blocks.get(str(bucket.state.get("bucket")))
        if block is None:
            yield Finding.error(
                "guardrail:bucket-not-public", bucket, "publicAccessBlock", None, "an aws.s3.BucketPublicAccessBlock"
            )
            continue
        for key in _BLOCKS:
            if block.inputs.get(key) is not True:
                yield Finding.error("guardrail:bucket-not-public", block, key, block.inputs.get(key), "True")


def fis_targets_gpu_spot(plan: Any) -> Iterator[Finding]:
    """FIS interrupts one running spot instance of the GPU group: chosen by the group's tag and
    its cluster's (group names repeat across stacks), never by listed ARNs, never all at once."""
    name = "guardrail:fis-targets-gpu-spot"
    allowed = {str(g.inputs.get("nodeGroupName")) for g in gpu_groups(plan) if g.inputs.get("capacityType") == "SPOT"}
    clusters = {str(c.inputs.get("name")) for c in plan.of_type(CLUSTER)}
    for t in plan.of_type(FIS_TEMPLATE):
        for i, target in enumerate(t.inputs.get("targets") or []):
            where = f"targets[{i}]"
            tags = {x.get("key"): x.get("value") for x in target.get("resourceTags") or []}
            if target.get("resourceArns"):
                yield Finding.error(
                    name, t, f"{where}.resourceArns", target["resourceArns"], "no ARNs: the group's tag"
                )
            if tags.get(NODEGROUP_TAG) not in allowed:
                yield Finding.error(
                    name,
                    t,
                    f"{where}.resourceTags",
                    target.get("resourceTags"),
                    f"{NODEGROUP_TAG} = a spot GPU group ({', '.join(sorted(allowed)) or 'none in the plan'})",
                )
            if tags.get(FIS_CLUSTER_TAG) not in clusters:
                yield Finding.error(
                    name,
                    t,
                    f"{where}.resourceTags",
                    target.get("resourceTags"),
                    f"{FIS_CLUSTER_TAG} = this cluster ({', '.join(sorted(clusters)) or 'none in the plan'}): "
                    "the group's name is the same in every stack, and would reach other clusters' nodes",
                )
            if target.get("resourceType") != "aws:ec2:spot-instance":
                yield Finding.error(
                    name, t, f"{where}.resourceType", target.get("resourceType"), "'aws:ec2:spot-instance'"
                )
            if target.get("selectionMode") == "ALL":
                yield Finding.error(
                    name, t, f"{where}.selectionMode", "ALL", "COUNT(1): one node, as a spot interruption takes"
                )
        for i, action in enumerate(t.inputs.get("actions") or []):
            if action.get("actionId") != SPOT_INTERRUPTION:
                yield Finding.error(name, t, f"actions[{i}].actionId", action.get("actionId"), repr(SPOT_INTERRUPTION))


def group_operations(plan: Any) -> Iterator[Finding]:
    """The node groups of a cluster form a chain: the CPU group (etcd, operator) first, the
    GPU group after it; deleted in reverse."""
    yield from not_one_at_a_time(
        "guardrail:eks-group-operations",
        plan,
        plan.of_type(NODE_GROUP),
        lambda g: str(g.inputs.get("clusterName")),
        "the groups are created and updated one at a time, the CPU group first",
    )


def checkpoints_kept(plan: Any) -> Iterator[Finding]:
    """Checkpoints outlive the cluster: `pulumi destroy` forgets the bucket instead of emptying
    and deleting it (unless the stack lets it go)."""
    if not keeps_checkpoints(plan):
        return
    for b in plan.of_type(BUCKET):
        if (deleted := deleted_on_destroy("guardrail:eks-checkpoints-kept", b)) is not None:
            yield deleted
        if b.inputs.get("forceDestroy") is True:
            yield Finding.error(
                "guardrail:eks-checkpoints-kept", b, "forceDestroy", True, "False: it empties the bucket on delete"
            )


def _reference(resource: Any, name: str) -> str:
    """What input `name` of `resource` names: the resources its value came from (their URNs: an
    id unknown at preview still names them), else the value itself."""
    urns = resource.property_dependencies.get(name)
    return " ".join(sorted(urns)) if urns else str(resource.inputs.get(name))


# What a lifecycle rule over a versioned checkpoint bucket must do: (the rule's action, its
# number of days, what the check expects when no enabled rule over the whole bucket does it).
_LIFECYCLE_ACTIONS = (
    (
        "noncurrentVersionExpiration",
        "noncurrentDays",
        "an aws.s3.BucketLifecycleConfiguration of bucket {bucket} with an enabled rule over the whole "
        "bucket that expires noncurrent versions (noncurrent_days): without it every pruned or "
        "overwritten checkpoint stays billed, for ever",
    ),
    (
        "abortIncompleteMultipartUpload",
        "daysAfterInitiation",
        "an enabled rule over the whole bucket {bucket} that aborts incomplete multipart uploads "
        "(days_after_initiation): the parts of a save cut short stay billed otherwise",
    ),
)


def bucket_lifecycle(plan: Any) -> Iterator[Finding]:
    """A versioned bucket keeps every overwritten or deleted object as a noncurrent version, and
    S3 bills it until it is deleted: a lifecycle rule over the whole bucket expires them. The
    same configuration aborts multipart uploads never completed (a save cut short by an
    eviction), whose parts are billed too and never listed as objects."""
    name = "guardrail:bucket-lifecycle"
    rules_of: dict[str, list[Any]] = {}
    for config in plan.of_type(LIFECYCLE):
        rules_of.setdefault(_reference(config, "bucket"), []).extend(config.inputs.get("rules") or [])
    for versioning in plan.of_type(VERSIONING):
        if (versioning.inputs.get("versioningConfiguration") or {}).get("status") != "Enabled":
            continue
        bucket = versioning.inputs.get("bucket")
        rules = [
            r
            for r in rules_of.get(_reference(versioning, "bucket"), [])
            if r.get("status") == "Enabled" and _whole_bucket(r)
        ]
        for action, days, expected in _LIFECYCLE_ACTIONS:
            if not any((r.get(action) or {}).get(days) for r in rules):
                yield Finding.error(name, versioning, f"lifecycle.{action}", None, expected.format(bucket=bucket))


def _whole_bucket(rule: dict[str, Any]) -> bool:
    """The rule applies to every object: no prefix, and a filter (if any) that selects nothing out."""
    return not rule.get("prefix") and not any(v not in (None, "") for v in (rule.get("filter") or {}).values())


def registry_force_deleted(plan: Any) -> Iterator[Finding]:
    """Every ECR repository the stack creates (not one it imports) is one `elastic-lab image`
    pushes to, and ECR refuses to delete a repository holding images unless forced
    (RepositoryNotEmptyException): `pulumi destroy` would stop there and start no further
    deletes, leaving the control plane, the NAT gateway and the CPU nodes billing."""
    imported = {str(rid) for typ, rid in plan.imported if typ == ECR}
    for repository in plan.of_type(ECR):
        if str(repository.id) in imported:
            continue
        if repository.inputs.get("forceDelete") is not True:
            yield Finding.error(
                "guardrail:eks-registry-force-delete",
                repository,
                "forceDelete",
                repository.inputs.get("forceDelete"),
                "True: the repository holds the pushed training image, and ECR refuses to delete it otherwise "
                "(RepositoryNotEmptyException), which stops `pulumi destroy` with the cluster still billing",
            )


def _nat_routes(plan: Any) -> list[Any]:
    """The routes that send a route table's traffic through a NAT gateway."""
    return [r for r in plan.of_type(ROUTE) if r.inputs.get("natGatewayId")]


def _region(plan: Any, resource: Any) -> str | None:
    """The region a resource is made in: its own `region` input, else its provider's (a
    recorded provider reference is "<urn>::<id>"; the policy pack's is the URN)."""
    if resource.inputs.get("region"):
        return str(resource.inputs["region"])
    reference = str(resource.provider or "")
    provider = plan.by_urn(reference) or plan.by_urn(reference.rsplit("::", 1)[0])
    if provider is not None and provider.type == AWS_PROVIDER and provider.inputs.get("region"):
        return str(provider.inputs["region"])
    return None


def _serves(endpoint: Any, route: Any, table: Any, service: str | None) -> bool:
    """`endpoint` is an S3 gateway endpoint (of `service`, where the region is known) of the
    VPC of `table`, on the route table of `route`."""
    inputs = endpoint.inputs
    if inputs.get("vpcEndpointType") != GATEWAY_ENDPOINT:
        return False
    if not (inputs.get("serviceName") == service if service else str(inputs.get("serviceName")).endswith(".s3")):
        return False
    if table is not None and _reference(endpoint, "vpcId") != _reference(table, "vpcId"):
        return False
    on_tables = set(endpoint.property_dependencies.get("routeTableIds") or [])
    listed = {str(t) for t in inputs.get("routeTableIds") or []}
    return bool(set(route.property_dependencies.get("routeTableId") or []) & on_tables) or (
        not on_tables and str(route.inputs.get("routeTableId")) in listed
    )


def s3_gateway_endpoint(plan: Any) -> Iterator[Finding]:
    """A private subnet's route table that sends the internet through a NAT gateway also sends
    S3 through a gateway endpoint of its VPC: the endpoint is free, the NAT bills every GB it
    carries, and ECR's image layers and the checkpoints are S3 traffic."""
    for route in _nat_routes(plan):
        table = next((plan.by_urn(u) for u in route.property_dependencies.get("routeTableId") or []), None)
        where = table or route
        service = s3_service(region) if (region := _region(plan, where)) else None
        if any(_serves(e, route, table, service) for e in plan.of_type(VPC_ENDPOINT)):
            continue
        yield Finding.error(
            "guardrail:eks-s3-endpoint",
            where,
            "s3GatewayEndpoint",
            None,
            f"an aws.ec2.VpcEndpoint of type {GATEWAY_ENDPOINT} for {service or 'S3'} in its VPC on this route table: "
            "the table sends the internet through a NAT gateway, which bills each GB of image layers (ECR serves "
            "them from S3) and checkpoints; a gateway endpoint carries them for free",
        )
