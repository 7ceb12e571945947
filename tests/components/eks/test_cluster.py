"""The EKS cluster component under the plan's mocks: what it declares, with which inputs."""

from __future__ import annotations

import json

import pytest
import yaml

from lab.program.harness import run_program
from lab.program.recording import Plan
from lab.vocab.capacity import rank_of_group


@pytest.fixture(scope="module")
def plan() -> Plan:
    return run_program("eks-dev")


def _tags(plan: Plan, key: str, group: str = "eks-gpu-spot") -> dict[str, str]:
    """The Cluster Autoscaler tags under `key` on the Auto Scaling group of node group `group`."""
    asg = plan.one("aws:eks/nodeGroup:NodeGroup", group).state["resources"][0]["autoscalingGroups"][0]["name"]
    return {
        t.inputs["tag"]["key"].removeprefix(key): t.inputs["tag"]["value"]
        for t in plan.of_type("aws:autoscaling/tag:Tag")
        if t.inputs["tag"]["key"].startswith(key) and t.inputs["autoscalingGroupName"] == asg
    }


def test_every_aws_resource_uses_the_stacks_region(plan):
    [provider] = plan.of_type("pulumi:providers:aws")
    assert provider.inputs["region"] == "us-east-1"
    aws = [r for r in plan.resources if r.custom and r.type.startswith("aws:")]
    assert aws and all(r.provider and r.provider.startswith(provider.urn) for r in aws)


def test_vpc_spans_two_zones_with_private_and_public_subnets(plan):
    subnets = plan.of_type("aws:ec2/subnet:Subnet")
    zones = {s.inputs["availabilityZone"] for s in subnets}
    assert zones == {"us-east-1a", "us-east-1b"}
    private = [s for s in subnets if "kubernetes.io/role/internal-elb" in s.inputs["tags"]]
    public = [s for s in subnets if "kubernetes.io/role/elb" in s.inputs["tags"]]
    assert len(private) == len(public) == 2
    assert all(s.inputs.get("mapPublicIpOnLaunch") is not True for s in private)
    cidrs = [s.inputs["cidrBlock"] for s in subnets]
    assert len(set(cidrs)) == 4 and all(c.startswith("10.40.") and c.endswith("/20") for c in cidrs)
    [nat] = plan.of_type("aws:ec2/natGateway:NatGateway")
    assert nat.inputs["subnetId"] in {s.id for s in public}


def test_cluster_uses_access_entries_and_both_subnet_kinds(plan):
    [cluster] = plan.of_type("aws:eks/cluster:Cluster")
    assert cluster.inputs["name"] == "esl-eks-dev" and cluster.inputs["version"] == "1.35"
    assert cluster.inputs["accessConfig"] == {
        "authenticationMode": "API",
        "bootstrapClusterCreatorAdminPermissions": True,
    }
    assert len(cluster.inputs["vpcConfig"]["subnetIds"]) == 4
    trust = json.loads(plan.one("aws:iam/role:Role", "eks-cluster-role").inputs["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"Service": "eks.amazonaws.com"}


def test_each_gpu_capacity_rank_is_a_group_the_autoscaler_tries_in_order(plan):
    """eks-dev: the xlarge spot group, the 2xlarge sizes on spot, g4dn.xlarge on demand; each
    group after the one above; the priority ConfigMap ranks their Auto Scaling groups."""
    groups = [
        plan.one("aws:eks/nodeGroup:NodeGroup", n) for n in ("eks-gpu-spot", "eks-gpu-spot-rank2", "eks-gpu-spot-rank3")
    ]
    assert [
        (g.inputs["nodeGroupName"], g.inputs["capacityType"], g.inputs["labels"]["elastic-spot-lab/gpu-rank"])
        for g in groups
    ] == [
        ("gpu-spot", "SPOT", "1"),
        ("gpu-spot-2", "SPOT", "2"),
        ("gpu-on-demand", "ON_DEMAND", "3"),
    ]
    assert groups[1].inputs["instanceTypes"] == ["g4dn.2xlarge", "g5.2xlarge", "g6.2xlarge"]
    assert groups[2].inputs["labels"]["elastic-spot-lab/capacity"] == "on-demand"
    assert {t["key"] for t in groups[2].inputs["taints"]} == {"nvidia.com/gpu", "s3.csi.aws.com/agent-not-ready"}
    assert plan.waits_for(groups[1], groups[0]) and plan.waits_for(groups[2], groups[1])
    config_map = plan.one("kubernetes:core/v1:ConfigMap", "eks-gpu-priorities")
    table = yaml.safe_load(config_map.inputs["data"]["priorities"])
    asgs = [g.state["resources"][0]["autoscalingGroups"][0]["name"] for g in groups]
    assert [rank_of_group(table, a) for a in asgs] == [30, 20, 10]
    cpu = plan.one("aws:eks/nodeGroup:NodeGroup", "eks-cpu").state["resources"][0]["autoscalingGroups"][0]["name"]
    assert rank_of_group(table, cpu) == 1
    chart = plan.one("kubernetes:helm.sh/v4:Chart", "eks-cluster-autoscaler")
    assert config_map.urn in chart.depends_on


def test_node_groups(plan):
    cpu = plan.one("aws:eks/nodeGroup:NodeGroup", "eks-cpu")
    gpu = plan.one("aws:eks/nodeGroup:NodeGroup", "eks-gpu-spot")
    assert cpu.inputs["capacityType"] == "ON_DEMAND" and cpu.inputs["amiType"] == "AL2023_x86_64_STANDARD"
    assert "taints" not in cpu.inputs or not cpu.inputs["taints"]
    assert gpu.inputs["capacityType"] == "SPOT" and gpu.inputs["amiType"] == "AL2023_x86_64_NVIDIA"
    assert gpu.inputs["instanceTypes"] == ["g4dn.xlarge", "g5.xlarge", "g6.xlarge"]
    assert gpu.inputs["scalingConfig"] == {"minSize": 0, "maxSize": 3, "desiredSize": 0}
    assert {(t["key"], t["value"], t["effect"]) for t in gpu.inputs["taints"]} == {
        ("elastic-spot-lab/spot", "true", "NO_SCHEDULE"),
        ("nvidia.com/gpu", "present", "NO_SCHEDULE"),
        # Until Mountpoint's node plugin runs there, no worker starts on a new node.
        ("s3.csi.aws.com/agent-not-ready", "", "NO_EXECUTE"),
    }
    assert gpu.inputs["labels"]["nvidia.com/gpu.present"] == "true"
    assert gpu.ignore_changes == ["scalingConfig.desiredSize"] == cpu.ignore_changes
    assert plan.waits_for(gpu, cpu)


def test_autoscaler_can_scale_the_gpu_group_from_zero(plan):
    template = "k8s.io/cluster-autoscaler/node-template/"
    assert _tags(plan, template + "taint/") == {
        "elastic-spot-lab/spot": "true:NoSchedule",
        "nvidia.com/gpu": "present:NoSchedule",
    }
    assert _tags(plan, template + "label/")["elastic-spot-lab/pool"] == "gpu-spot"
    # Every rank's group scales from zero: the on-demand rank carries no spot taint.
    assert _tags(plan, template + "taint/", "eks-gpu-spot-rank3") == {"nvidia.com/gpu": "present:NoSchedule"}
    assert _tags(plan, template + "label/", "eks-gpu-spot-rank2")["elastic-spot-lab/gpu-rank"] == "2"
    asg = {t.inputs["autoscalingGroupName"] for t in plan.of_type("aws:autoscaling/tag:Tag")}
    assert len(asg) == 3 and all(a.startswith(("eks-gpu-spot-", "eks-gpu-on-demand-")) for a in asg)
    chart = plan.one("kubernetes:helm.sh/v4:Chart", "eks-cluster-autoscaler")
    values = chart.inputs["values"]
    assert values["autoDiscovery"] == {"clusterName": "esl-eks-dev"} and values["awsRegion"] == "us-east-1"
    assert values["image"]["tag"] == "v1.35.0" and values["nodeSelector"]["elastic-spot-lab/pool"] == "cpu"
    # The startup taint is no template's (above) but the autoscaler's to ignore on new nodes.
    assert values["extraArgs"]["startup-taint"] == "s3.csi.aws.com/agent-not-ready"
    assert values["extraArgs"]["expander"] == "priority,least-waste"
    assert values["extraArgs"]["max-node-provision-time"] == "10m0s"
    assoc = plan.one("aws:eks/podIdentityAssociation:PodIdentityAssociation", "eks-cluster-autoscaler-identity")
    assert (assoc.inputs["namespace"], assoc.inputs["serviceAccount"]) == ("kube-system", "cluster-autoscaler")


def test_no_autoscaler_when_the_stack_says_so():
    plan = run_program("eks-dev", {"clusterAutoscaler": "false", "gpuFallback": "[]"})
    assert not [c for c in plan.of_type("kubernetes:helm.sh/v4:Chart") if "autoscaler" in c.name]
    assert plan.outputs["autoscaler"] == "none"


def test_checkpoint_bucket_and_its_driver_role(plan):
    bucket = plan.one("aws:s3/bucket:Bucket", "eks-checkpoints")
    assert bucket.retain_on_delete and bucket.inputs.get("forceDestroy") is False
    assert bucket.inputs["bucketPrefix"] == "esl-eks-dev-ckpt-"
    versioning = plan.one("aws:s3/bucketVersioning:BucketVersioning", "eks-checkpoints-versioning")
    assert versioning.inputs["versioningConfiguration"] == {"status": "Enabled"}
    policy = json.loads(plan.one("aws:iam/rolePolicy:RolePolicy", "eks-s3-csi-role-checkpoint-bucket").inputs["policy"])
    arn = f"arn:aws:s3:::{bucket.id}"
    assert {s["Resource"] for s in policy["Statement"]} == {arn, f"{arn}/*"}
    addon = plan.one("aws:eks/addon:Addon", "eks-s3-csi-driver")
    assert addon.inputs["addonName"] == "aws-mountpoint-s3-csi-driver"
    assert addon.inputs["addonVersion"] == "v2.7.0-eksbuild.1"  # the newest release EKS lists (mocked)
    assert addon.inputs["podIdentityAssociations"][0]["serviceAccount"] == "s3-csi-driver-sa"
    assert json.loads(addon.inputs["configurationValues"]) == {"node": {"tolerateAllTaints": True}}
    pv = plan.one("kubernetes:core/v1:PersistentVolume")
    assert pv.inputs["spec"]["csi"]["volumeAttributes"]["bucketName"] == bucket.id


def test_jobs_can_write_checkpoints_with_their_own_s3_clients(plan):
    """`submit --checkpoint-access client`: the jobs' service account has a Pod Identity role
    limited to the checkpoint bucket, and the job facts give the bucket's URL and region."""
    bucket = plan.one("aws:s3/bucket:Bucket", "eks-checkpoints")
    assoc = plan.one("aws:eks/podIdentityAssociation:PodIdentityAssociation", "eks-training-role-identity")
    assert (assoc.inputs["namespace"], assoc.inputs["serviceAccount"]) == ("training", "trainer")
    role = plan.one("aws:iam/role:Role", "eks-training-role")
    assert assoc.inputs["roleArn"] == role.state["arn"]
    trust = json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert set(trust["Action"]) == {"sts:AssumeRole", "sts:TagSession"}
    policy = json.loads(
        plan.one("aws:iam/rolePolicy:RolePolicy", "eks-training-role-checkpoint-bucket").inputs["policy"]
    )
    arn = f"arn:aws:s3:::{bucket.id}"
    assert {s["Resource"] for s in policy["Statement"]} == {arn, f"{arn}/*"}  # that bucket only
    assert plan.waits_for(assoc, plan.one("aws:eks/addon:Addon", "eks-pod-identity-agent"))
    facts = plan.one("elastic-spot-lab:platform:TrainingPlatform").outputs["jobFacts"]
    assert facts["checkpointUrl"] == f"s3://{bucket.id}" and facts["podEnv"] == {"AWS_REGION": "us-east-1"}
    assert facts["podLabels"] == {}  # Pod Identity needs no label


def test_fis_template_interrupts_one_gpu_spot_node_with_two_minutes_notice(plan):
    template = plan.one("aws:fis/experimentTemplate:ExperimentTemplate", "eks-spot-interruption")
    [action] = template.inputs["actions"]
    assert action["actionId"] == "aws:ec2:send-spot-instance-interruptions"
    assert action["parameters"] == [{"key": "durationBeforeInterruption", "value": "PT2M"}]
    [target] = template.inputs["targets"]
    assert target["selectionMode"] == "COUNT(1)" and target["resourceType"] == "aws:ec2:spot-instance"
    # The group's name is every stack's default: the cluster's tag keeps FIS to this cluster.
    assert target["resourceTags"] == [
        {"key": "eks:nodegroup-name", "value": "gpu-spot"},
        {"key": "eks:cluster-name", "value": "esl-eks-dev"},
    ]
    policy = json.loads(
        plan.one("aws:iam/rolePolicy:RolePolicy", "eks-spot-interruption-role-interrupt-gpu-spot").inputs["policy"]
    )
    assert policy["Statement"][0]["Condition"]["StringEquals"] == {
        "aws:ResourceTag/eks:nodegroup-name": "gpu-spot",
        "aws:ResourceTag/eks:cluster-name": "esl-eks-dev",
    }
    assert plan.outputs["fisTemplateId"] == template.id


def test_outputs_and_secret_kubeconfig(plan):
    assert "kubeconfig" in plan.secret_outputs
    config = yaml.safe_load(plan.outputs["kubeconfig"])
    user = config["users"][0]["user"]
    assert user["exec"]["args"] == ["eks", "get-token", "--cluster-name", "esl-eks-dev", "--region", "us-east-1"]
    assert "token" not in user
    assert plan.outputs["nodeGroupNames"] == {"cpu": "cpu", "gpu-spot": "gpu-spot"}
    assert plan.outputs["gpuTaints"] == ["elastic-spot-lab/spot=true:NoSchedule", "nvidia.com/gpu=present:NoSchedule"]


def test_platform_installs_unchanged_with_write_once_checkpoints(plan):
    facts = (
        plan.outputs.get("jobFacts")
        or next(r.outputs for r in plan.resources if r.type == "elastic-spot-lab:platform:TrainingPlatform")["jobFacts"]
    )
    assert facts["checkpointWrites"] == "write-once"
    assert not [c for c in plan.of_type("kubernetes:helm.sh/v4:Chart") if "spot-notice" in c.name]


def test_a_mountpoint_release_older_than_2_5_is_refused_before_anything_is_created(monkeypatch):
    """The newest add-on release EKS lists for the Kubernetes version is pinned; one before
    2.5.0 (its pods keep GPU nodes from scaling down) stops the preview with the reason."""
    from lab.program import mocks

    monkeypatch.setattr(mocks, "MOCK_MOUNTPOINT_RELEASE", "v2.4.1-eksbuild.1")
    with pytest.raises(Exception, match=r"v2\.4\.1-eksbuild\.1.*v2\.5\.0 or newer"):
        run_program("eks-dev", {})


def test_network_policies_are_enforced(plan):
    """EKS enforces no NetworkPolicy until the VPC CNI's agent is on: the managed add-on takes
    over the cluster's CNI with it on, before the platform's objects (etcd's policy) go in."""
    cni = plan.one("aws:eks/addon:Addon", "eks-vpc-cni")
    assert json.loads(cni.inputs["configurationValues"]) == {"enableNetworkPolicy": "true"}
    assert cni.inputs["resolveConflictsOnCreate"] == "OVERWRITE"
    # The cluster's Kubernetes provider, which every platform object is created through.
    (provider,) = [r for r in plan.resources if r.type == "pulumi:providers:kubernetes"]
    assert plan.waits_for(provider, cni)


def test_the_training_image_has_a_repository_the_nodes_pull_from(plan):
    """An ECR repository named after the cluster, tags immutable, scanned on push; both node
    groups' roles carry ECR read access; its URL is the stack's imageRegistry output."""
    (repo,) = plan.of_type("aws:ecr/repository:Repository")
    assert repo.inputs["name"] == "esl-eks-dev/trainer"
    assert repo.inputs["imageTagMutability"] == "IMMUTABLE"
    assert repo.inputs["imageScanningConfiguration"] == {"scanOnPush": True}
    assert plan.outputs["imageRegistry"] == repo.state["repositoryUrl"]
    attached = {
        (a.inputs["role"], a.inputs["policyArn"])
        for a in plan.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    }
    for group in plan.of_type("aws:eks/nodeGroup:NodeGroup"):
        role = group.inputs["nodeRoleArn"].rsplit("/", 1)[-1]
        assert (role, "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly") in attached


def test_checkpoint_versions_expire_and_cut_uploads_are_aborted(plan):
    """The versioned bucket's lifecycle: over the whole bucket, noncurrent versions (pruned
    checkpoints) expire after a few days, incomplete multipart uploads are aborted, and it is
    kept with the bucket on destroy."""
    bucket = plan.one("aws:s3/bucket:Bucket", "eks-checkpoints")
    lifecycle = plan.one(
        "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration", "eks-checkpoints-lifecycle"
    )
    assert lifecycle.inputs["bucket"] == bucket.id
    (rule,) = lifecycle.inputs["rules"]
    assert rule["status"] == "Enabled" and rule["filter"] == {}
    assert rule["noncurrentVersionExpiration"] == {"noncurrentDays": 3}
    assert rule["abortIncompleteMultipartUpload"] == {"daysAfterInitiation": 1}
    assert rule["expiration"] == {"expiredObjectDeleteMarker": True}
    assert lifecycle.retain_on_delete is bucket.retain_on_delete is True


def test_a_kept_bucket_taken_back_gets_its_lifecycle_without_an_import():
    """A bucket a destroy kept is imported with its settings; its lifecycle is created again (a
    bucket kept before it had one has none to import; S3's put replaces a kept one)."""
    adopted = run_program("eks-dev", {"adoptCheckpoints": '{"bucket": "esl-eks-dev-ckpt-cdd2c713"}'})
    imported = {typ for typ, _ in adopted.imported}
    assert {"aws:s3/bucket:Bucket", "aws:s3/bucketVersioning:BucketVersioning"} <= imported
    assert "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration" not in imported
    lifecycle = adopted.one("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")
    assert lifecycle.inputs["bucket"] == "esl-eks-dev-ckpt-cdd2c713" and lifecycle.retain_on_delete


def test_s3_traffic_of_the_private_subnets_bypasses_the_nat(plan):
    """A gateway endpoint for S3 in the stack's region on the private route table (the one whose
    default route is the NAT): image layers and checkpoints do not pay the NAT's per-GB charge."""
    (endpoint,) = plan.of_type("aws:ec2/vpcEndpoint:VpcEndpoint")
    (vpc,) = plan.of_type("aws:ec2/vpc:Vpc")
    private = plan.one("aws:ec2/routeTable:RouteTable", "eks-net-private")
    nat_route = plan.one("aws:ec2/route:Route", "eks-net-private-default")
    assert nat_route.inputs["routeTableId"] == private.id and nat_route.inputs["natGatewayId"]
    assert endpoint.inputs["vpcEndpointType"] == "Gateway"
    assert endpoint.inputs["serviceName"] == "com.amazonaws.us-east-1.s3"
    assert endpoint.inputs["vpcId"] == vpc.id and endpoint.inputs["routeTableIds"] == [private.id]


def test_an_existing_vpc_gets_no_endpoint_and_no_endpoint_check():
    from lab.plan.check_list import run_checks

    plan = run_program(
        "eks-dev",
        {
            "existingVpcId": "vpc-0123456789abcdef0",
            "existingPrivateSubnetIds": '["subnet-0a1b2c3d", "subnet-0e4f5a6b"]',
        },
    )
    assert plan.of_type("aws:ec2/vpcEndpoint:VpcEndpoint") == []
    (run,) = run_checks(plan, ["guardrail:eks-s3-endpoint"])
    assert not run.applied


def test_the_image_repository_is_deleted_with_its_images(plan):
    """`pulumi destroy` of a repository holding the pushed image: ECR refuses unless forced."""
    (repo,) = plan.of_type("aws:ecr/repository:Repository")
    assert repo.inputs["forceDelete"] is True


def test_metrics_server_serves_the_hpa_of_an_autoscaled_job(plan):
    """EKS serves no metrics.k8s.io without it: the metrics-server add-on, the newest release EKS
    lists for the Kubernetes version (pinned), created once the CPU group (where it runs: it
    tolerates neither GPU taint) is there."""
    addon = plan.one("aws:eks/addon:Addon", "eks-metrics-server")
    assert addon.inputs["addonName"] == "metrics-server"
    assert addon.inputs["addonVersion"] == "v0.8.0-eksbuild.2"  # the newest release EKS lists (mocked)
    assert plan.waits_for(addon, plan.one("aws:eks/nodeGroup:NodeGroup", "eks-cpu"))
    cpu = plan.one("aws:eks/nodeGroup:NodeGroup", "eks-cpu")
    assert not cpu.inputs.get("taints")
    assert all(g.inputs.get("taints") for g in plan.of_type("aws:eks/nodeGroup:NodeGroup") if g is not cpu)


def test_a_metrics_server_release_older_than_0_8_is_refused(monkeypatch):
    from lab.program import mocks

    monkeypatch.setattr(mocks, "MOCK_METRICS_SERVER_RELEASE", "v0.7.2-eksbuild.1")
    with pytest.raises(Exception, match=r"metrics-server.*v0\.7\.2-eksbuild\.1.*v0\.8\.0 or newer"):
        run_program("eks-dev", {})
