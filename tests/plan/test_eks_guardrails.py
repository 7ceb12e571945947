"""EKS guardrails: the real plan passes; a broken variant of each fails, naming resource,
property, value and what was expected."""

from __future__ import annotations

import pytest

from lab.plan.check_list import findings_of, run_checks
from lab.plan.findings import WARNING, errors

from .conftest import EKS_CHECKS

GPU = ("aws:eks/nodeGroup:NodeGroup", "eks-gpu-spot")
CPU = ("aws:eks/nodeGroup:NodeGroup", "eks-cpu")
BUCKET = ("aws:s3/bucket:Bucket", "eks-checkpoints")
BLOCK = ("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", "eks-checkpoints-public-access")
FIS = ("aws:fis/experimentTemplate:ExperimentTemplate", "eks-spot-interruption")
ECR = ("aws:ecr/repository:Repository", "eks-trainer-images")
LIFECYCLE = ("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration", "eks-checkpoints-lifecycle")
S3_ENDPOINT = ("aws:ec2/vpcEndpoint:VpcEndpoint", "eks-net-s3")


def _errors(plan, check):
    return [str(f) for f in errors(findings_of(run_checks(plan, [check])))]


def test_the_real_plan_passes_every_eks_guardrail(eks_plan):
    runs = run_checks(eks_plan, EKS_CHECKS)
    assert all(r.applied for r in runs), [r.check for r in runs if not r.applied]
    assert findings_of(runs) == []


def test_eks_guardrails_do_not_apply_to_aks(aks_plan):
    runs = run_checks(aks_plan, EKS_CHECKS)
    assert not any(r.applied for r in runs)


def _inputs(where, **changes):
    def mutate(plan):
        plan.one(*where).inputs.update(changes)

    return mutate


def _without_taint(key):
    def mutate(plan):
        g = plan.one(*GPU)
        g.inputs["taints"] = [t for t in g.inputs["taints"] if t["key"] != key]

    return mutate


def _no_ignore(plan):
    plan.one(*GPU).ignore_changes = []


def _no_template_tags(plan):
    plan.resources = [r for r in plan.resources if r.type != "aws:autoscaling/tag:Tag"]


def _startup_taint_in_the_template(plan):
    """A scale-from-zero template tag for the Mountpoint startup taint, which no pod tolerates."""
    import copy

    tag = copy.deepcopy(plan.of_type("aws:autoscaling/tag:Tag")[0])
    tag.name += "-startup"
    tag.urn += "-startup"
    tag.inputs["tag"] = {
        "key": "k8s.io/cluster-autoscaler/node-template/taint/s3.csi.aws.com/agent-not-ready",
        "value": ":NoExecute",
        "propagateAtLaunch": False,
    }
    plan.resources.append(tag)


def _parallel_groups(plan):
    gpu, cpu = plan.one(*GPU), plan.one(*CPU)
    gpu.depends_on = [u for u in gpu.depends_on if u != cpu.urn]
    gpu.dependencies = [u for u in gpu.dependencies if u != cpu.urn]


def _forgets_bucket(plan):
    plan.one(*BUCKET).retain_on_delete = False


def _fis_target(**changes):
    def mutate(plan):
        plan.one(*FIS).inputs["targets"][0].update(changes)

    return mutate


def _without(where):
    def mutate(plan):
        plan.resources.remove(plan.one(*where))

    return mutate


def _lifecycle_rule(**changes):
    def mutate(plan):
        rule = plan.one(*LIFECYCLE).inputs["rules"][0]
        rule.update(changes)
        for key in [k for k, v in changes.items() if v is None]:
            del rule[key]

    return mutate


def _endpoint_on_the_public_table(plan):
    public = plan.one("aws:ec2/routeTable:RouteTable", "eks-net-public")
    endpoint = plan.one(*S3_ENDPOINT)
    endpoint.inputs["routeTableIds"] = [public.id]
    endpoint.property_dependencies["routeTableIds"] = [public.urn]


def _endpoint_in_another_vpc(plan):
    endpoint = plan.one(*S3_ENDPOINT)
    endpoint.inputs["vpcId"] = "vpc-0123456789abcdef0"
    endpoint.property_dependencies.pop("vpcId")


def _no_ecr_read(plan):
    plan.resources = [
        r
        for r in plan.resources
        if not (r.type == "aws:iam/rolePolicyAttachment:RolePolicyAttachment" and "ContainerRegistry" in str(r.inputs))
    ]


BROKEN = [
    (
        "mutable image tags",
        "guardrail:image-registry",
        _inputs(("aws:ecr/repository:Repository", "eks-trainer-images"), imageTagMutability="MUTABLE"),
        ["Repository 'eks-trainer-images'", "imageTagMutability='MUTABLE'", "'IMMUTABLE'"],
    ),
    (
        "nodes cannot pull from ECR",
        "guardrail:image-registry",
        _no_ecr_read,
        ["NodeGroup 'eks-", "nodeRoleArn=", "AmazonEC2ContainerRegistryReadOnly attached"],
    ),
    (
        "CPU group on spot",
        "guardrail:eks-on-demand-groups",
        _inputs(CPU, capacityType="SPOT"),
        ["NodeGroup 'eks-cpu'", "capacityType='SPOT'", "'ON_DEMAND'"],
    ),
    (
        "GPU group on demand",
        "guardrail:gpu-capacity-ranks",
        _inputs(GPU, capacityType="ON_DEMAND"),
        ["NodeGroup 'eks-gpu-spot'", "capacity='on-demand'", "spot: rank 1"],
    ),
    (
        "GPU group without the spot taint",
        "guardrail:eks-gpu-group",
        _without_taint("elastic-spot-lab/spot"),
        ["taints=", "a elastic-spot-lab/spot taint", "EKS taints no spot node"],
    ),
    (
        "GPU group without the GPU taint",
        "guardrail:eks-gpu-group",
        _without_taint("nvidia.com/gpu"),
        ["a nvidia.com/gpu taint"],
    ),
    (
        "GPU group on a CPU AMI",
        "guardrail:eks-gpu-group",
        _inputs(GPU, amiType="AL2023_x86_64_STANDARD"),
        ["amiType='AL2023_x86_64_STANDARD'", "an NVIDIA AMI type"],
    ),
    (
        "GPU group that cannot reach zero",
        "guardrail:eks-gpu-group",
        _inputs(GPU, scalingConfig={"minSize": 1, "maxSize": 3, "desiredSize": 1}),
        ["scalingConfig.minSize=1", "scales to zero"],
    ),
    (
        "GPU group whose size pulumi resets",
        "guardrail:eks-gpu-group",
        _no_ignore,
        ["options.ignore_changes=[]", "scalingConfig.desiredSize"],
    ),
    (
        "GPU group without the device plugin's label",
        "guardrail:eks-gpu-group",
        _inputs(GPU, labels={"elastic-spot-lab/pool": "gpu-spot"}),
        ["labels.nvidia.com/gpu.present=None", "device plugin"],
    ),
    (
        "GPU group without the autoscaler's accelerator label",
        "guardrail:eks-gpu-group",
        _inputs(GPU, labels={"elastic-spot-lab/pool": "gpu-spot", "nvidia.com/gpu.present": "true"}),
        ["labels.k8s.amazonaws.com/accelerator=None", "counts a new node as GPU-less"],
    ),
    (
        "no node-template tags",
        "guardrail:eks-scale-from-zero",
        _no_template_tags,
        ["asgTags['k8s.io/cluster-autoscaler/node-template/taint/nvidia.com/gpu']=None", "'present:NoSchedule'"],
    ),
    (
        "startup taint in the scale-from-zero template",
        "guardrail:eks-scale-from-zero",
        _startup_taint_in_the_template,
        ["node-template/taint/s3.csi.aws.com/agent-not-ready']=':NoExecute'", "no template tag for a startup taint"],
    ),
    (
        "Mountpoint add-on left to EKS's default",
        "guardrail:eks-scale-from-zero",
        lambda plan: plan.one("aws:eks/addon:Addon", "eks-s3-csi-driver").inputs.pop("addonVersion"),
        ["Addon 'eks-s3-csi-driver'", "addonVersion=None", "a pinned release, v2.5.0 or newer"],
    ),
    (
        "Mountpoint add-on older than 2.5.0",
        "guardrail:eks-scale-from-zero",
        _inputs(("aws:eks/addon:Addon", "eks-s3-csi-driver"), addonVersion="v2.4.1-eksbuild.1"),
        ["addonVersion='v2.4.1-eksbuild.1'", "keep GPU nodes from scaling down"],
    ),
    (
        "no metrics-server for a job's HPA",
        "guardrail:eks-metrics-server",
        _without(("aws:eks/addon:Addon", "eks-metrics-server")),
        ["Cluster 'eks'", "addons=None", "the metrics-server add-on", "never reads the workers' CPU"],
    ),
    (
        "metrics-server left to EKS's default",
        "guardrail:eks-metrics-server",
        lambda plan: plan.one("aws:eks/addon:Addon", "eks-metrics-server").inputs.pop("addonVersion"),
        ["Addon 'eks-metrics-server'", "addonVersion=None", "a pinned release, v0.8.0 or newer"],
    ),
    (
        "metrics-server of the line before Kubernetes 1.31",
        "guardrail:eks-metrics-server",
        _inputs(("aws:eks/addon:Addon", "eks-metrics-server"), addonVersion="v0.7.2-eksbuild.1"),
        ["addonVersion='v0.7.2-eksbuild.1'", "upstream's for Kubernetes before 1.31"],
    ),
    (
        "NetworkPolicies not enforced (no VPC CNI add-on)",
        "guardrail:eks-network-policy",
        lambda plan: plan.resources.remove(plan.one("aws:eks/addon:Addon", "eks-vpc-cni")),
        ["Cluster 'eks'", "addons=None", "enableNetworkPolicy 'true'"],
    ),
    (
        "VPC CNI without its network policy agent",
        "guardrail:eks-network-policy",
        _inputs(("aws:eks/addon:Addon", "eks-vpc-cni"), configurationValues="{}"),
        ["configurationValues.enableNetworkPolicy=None", "enforces NetworkPolicies"],
    ),
    (
        "node groups in parallel",
        "guardrail:eks-group-operations",
        _parallel_groups,
        ["NodeGroup 'eks-gpu-spot'", "a dependency on 'eks-cpu'"],
    ),
    (
        "a public bucket",
        "guardrail:bucket-not-public",
        _inputs(BLOCK, restrictPublicBuckets=False),
        ["BucketPublicAccessBlock 'eks-checkpoints-public-access'", "restrictPublicBuckets=False"],
    ),
    (
        "checkpoints deleted on destroy",
        "guardrail:eks-checkpoints-kept",
        _forgets_bucket,
        ["Bucket 'eks-checkpoints'", "options.retain_on_delete=False", "would delete the checkpoints"],
    ),
    (
        "checkpoints emptied on destroy",
        "guardrail:eks-checkpoints-kept",
        _inputs(BUCKET, forceDestroy=True),
        ["forceDestroy=True", "empties the bucket"],
    ),
    (
        "image repository that destroy cannot delete once an image is pushed",
        "guardrail:eks-registry-force-delete",
        _inputs(ECR, forceDelete=False),
        ["Repository 'eks-trainer-images'", "forceDelete=False", "RepositoryNotEmptyException"],
    ),
    (
        "image repository without force delete",
        "guardrail:eks-registry-force-delete",
        lambda plan: plan.one(*ECR).inputs.pop("forceDelete"),
        ["forceDelete=None", "stops `pulumi destroy`"],
    ),
    (
        "versioned bucket without a lifecycle",
        "guardrail:bucket-lifecycle",
        _without(LIFECYCLE),
        ["BucketVersioning 'eks-checkpoints-versioning'", "lifecycle.noncurrentVersionExpiration=None", "for ever"],
    ),
    (
        "lifecycle that never expires noncurrent versions",
        "guardrail:bucket-lifecycle",
        _lifecycle_rule(noncurrentVersionExpiration=None),
        ["lifecycle.noncurrentVersionExpiration=None", "noncurrent_days"],
    ),
    (
        "lifecycle that leaves incomplete uploads",
        "guardrail:bucket-lifecycle",
        _lifecycle_rule(abortIncompleteMultipartUpload=None),
        ["lifecycle.abortIncompleteMultipartUpload=None", "days_after_initiation"],
    ),
    (
        "lifecycle rule over one prefix only",
        "guardrail:bucket-lifecycle",
        _lifecycle_rule(filter={"prefix": "jobs/"}),
        ["lifecycle.noncurrentVersionExpiration=None", "over the whole bucket"],
    ),
    (
        "lifecycle rule disabled",
        "guardrail:bucket-lifecycle",
        _lifecycle_rule(status="Disabled"),
        ["lifecycle.noncurrentVersionExpiration=None"],
    ),
    (
        "private subnets reach S3 through the NAT",
        "guardrail:eks-s3-endpoint",
        _without(S3_ENDPOINT),
        [
            "RouteTable 'eks-net-private'",
            "s3GatewayEndpoint=None",
            "of type Gateway for com.amazonaws.us-east-1.s3 in its VPC on this route table",
            "bills each GB",
        ],
    ),
    (
        "S3 endpoint on the public route table only",
        "guardrail:eks-s3-endpoint",
        _endpoint_on_the_public_table,
        ["RouteTable 'eks-net-private'", "s3GatewayEndpoint=None"],
    ),
    (
        "S3 endpoint of another region",
        "guardrail:eks-s3-endpoint",
        _inputs(S3_ENDPOINT, serviceName="com.amazonaws.eu-west-1.s3"),
        ["s3GatewayEndpoint=None", "com.amazonaws.us-east-1.s3"],
    ),
    (
        "S3 endpoint of another VPC",
        "guardrail:eks-s3-endpoint",
        _endpoint_in_another_vpc,
        ["RouteTable 'eks-net-private'", "s3GatewayEndpoint=None"],
    ),
    (
        "interface endpoint instead of a gateway",
        "guardrail:eks-s3-endpoint",
        _inputs(S3_ENDPOINT, vpcEndpointType="Interface"),
        ["s3GatewayEndpoint=None", "of type Gateway"],
    ),
    (
        "FIS aimed at the GPU group of every cluster with that name",
        "guardrail:fis-targets-gpu-spot",
        _fis_target(resourceTags=[{"key": "eks:nodegroup-name", "value": "gpu-spot"}]),
        ["targets[0].resourceTags", "eks:cluster-name = this cluster (esl-eks-dev)", "would reach other clusters"],
    ),
    (
        "FIS aimed at the CPU group",
        "guardrail:fis-targets-gpu-spot",
        _fis_target(resourceTags=[{"key": "eks:nodegroup-name", "value": "cpu"}]),
        [
            "ExperimentTemplate 'eks-spot-interruption'",
            "targets[0].resourceTags",
            "a spot GPU group (gpu-spot, gpu-spot-2)",
        ],
    ),
    (
        "FIS on listed instances",
        "guardrail:fis-targets-gpu-spot",
        _fis_target(resourceArns=["arn:aws:ec2:::instance/i-1"]),
        ["targets[0].resourceArns", "the group's tag"],
    ),
    (
        "FIS on every node at once",
        "guardrail:fis-targets-gpu-spot",
        _fis_target(selectionMode="ALL"),
        ["targets[0].selectionMode='ALL'", "COUNT(1)"],
    ),
]


@pytest.mark.parametrize("check,mutate,fragments", [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_each_eks_guardrail_fails_on_a_broken_variant(broken_eks_plan, check, mutate, fragments):
    mutate(broken_eks_plan)
    found = _errors(broken_eks_plan, check)
    assert found, f"{check} found nothing"
    assert any(all(f in e for f in fragments) for e in found), found


def test_a_gpu_group_of_one_instance_type_is_a_warning(broken_eks_plan):
    _inputs(GPU, instanceTypes=["g5.xlarge"])(broken_eks_plan)
    runs = run_checks(broken_eks_plan, ["guardrail:eks-gpu-group"])
    assert not errors(findings_of(runs))
    [w] = [f for f in findings_of(runs) if f.severity == WARNING]
    assert "one type's spot capacity often runs out" in str(w)


def test_deleting_checkpoints_when_the_stack_says_so_is_fine(broken_eks_plan):
    _forgets_bucket(broken_eks_plan)
    broken_eks_plan.config["elastic-spot-lab:checkpointsOnDestroy"] = "delete"
    assert _errors(broken_eks_plan, "guardrail:eks-checkpoints-kept") == []


# The engine hands a policy pack a Helm Chart v4 without its inputs (lab.plan.policy_pack): these
# run in `elastic-lab plan` only; at `pulumi up` the stack's config check refuses the same
# mismatch (tests/components/eks/test_args.py).
PLAN_ONLY_BROKEN = [
    (
        "autoscaler chart older than its image",
        "guardrail:eks-scale-from-zero",
        _inputs(("kubernetes:helm.sh/v4:Chart", "eks-cluster-autoscaler"), version="9.43.1"),
        ["version='9.43.1'", "a chart checked against its image: 9.54.0 (1.35.0)"],
    ),
    (
        "autoscaler image newer than its chart",
        "guardrail:eks-scale-from-zero",
        _inputs(("kubernetes:helm.sh/v4:Chart", "eks-cluster-autoscaler"), values={"image": {"tag": "v1.36.0"}}),
        ["values.image.tag='v1.36.0'", "a v1.35.x image, the release of chart 9.54.0"],
    ),
    (
        "autoscaler not told of the GPU group's startup taint",
        "guardrail:eks-scale-from-zero",
        _inputs(("kubernetes:helm.sh/v4:Chart", "eks-cluster-autoscaler"), values={"image": {"tag": "v1.35.0"}}),
        ["values.extraArgs.startup-taint=None", "'s3.csi.aws.com/agent-not-ready', a startup taint of node group"],
    ),
]


@pytest.mark.parametrize("case,check,mutate,fragments", PLAN_ONLY_BROKEN, ids=[c[0] for c in PLAN_ONLY_BROKEN])
def test_the_autoscalers_chart_and_image_agree(broken_eks_plan, case, check, mutate, fragments):
    mutate(broken_eks_plan)
    found = _errors(broken_eks_plan, check)
    assert any(all(f in str(x) for f in fragments) for x in found), [str(x) for x in found]


def test_an_imported_repository_is_the_owners_to_force(broken_eks_plan):
    """A repository the stack takes back (imported) keeps the deletion its owner chose."""
    repository = broken_eks_plan.one(*ECR)
    repository.inputs["forceDelete"] = False
    broken_eks_plan.imported.append((repository.type, repository.id))
    assert _errors(broken_eks_plan, "guardrail:eks-registry-force-delete") == []


def test_an_unversioned_bucket_needs_no_noncurrent_expiry(broken_eks_plan):
    _without(LIFECYCLE)(broken_eks_plan)
    versioning = broken_eks_plan.one("aws:s3/bucketVersioning:BucketVersioning")
    versioning.inputs["versioningConfiguration"] = {"status": "Suspended"}
    assert _errors(broken_eks_plan, "guardrail:bucket-lifecycle") == []
