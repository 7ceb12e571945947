"""AWS API conformance: valid pulumi_aws inputs of every mapped type pass; broken variants
each fail with one error naming the input path, the value and what AWS expects."""

from __future__ import annotations

import copy
import importlib
import inspect
import json
import re
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pulumi
import pytest

from lab.plan import aws_api, aws_request
from lab.plan.findings import ERROR, WARNING, errors
from lab.program.recording import RecordedResource

TAGS = {"elastic-spot-lab-cluster": "esl-eks-dev", "environment": "dev", "project": "elastic-spot-lab"}
ROLE_ARN = "arn:aws:iam::123456789012:role/eks-node-role-020d8098"
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"  # Pulumi's value of an output unknown at plan time
SUBNETS = ["subnet-08cea0bc08cea0bc", "subnet-0e893bab0e893bab"]


def _policy(*statements: dict[str, Any]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


TRUST = _policy({"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"})
IDENTITY = _policy(
    {"Sid": "ListCheckpoints", "Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": "arn:aws:s3:::esl-ckpt"},
    {"Sid": "FindThem", "Effect": "Allow", "Action": ["ec2:Describe*"], "Resource": "*"},
)
NODE_GROUP = {
    "amiType": "AL2023_x86_64_NVIDIA",
    "capacityType": "SPOT",
    "clusterName": "esl-eks-dev",
    "diskSize": 100,
    "instanceTypes": ["g4dn.xlarge", "g5.xlarge", "g6.xlarge"],
    "labels": {"elastic-spot-lab/capacity": "spot", "elastic-spot-lab/pool": "gpu-spot"},
    "nodeGroupName": "gpu-spot",
    "nodeRoleArn": ROLE_ARN,
    "scalingConfig": {"desiredSize": 0, "maxSize": 2, "minSize": 0},
    "subnetIds": SUBNETS,
    "tags": TAGS,
    "taints": [{"effect": "NO_SCHEDULE", "key": "nvidia.com/gpu", "value": "present"}],
    "updateConfig": {"maxUnavailable": 1},
}
EXPERIMENT = {
    "actions": [
        {
            "actionId": "aws:ec2:send-spot-instance-interruptions",
            "name": "interrupt-one-gpu-spot-node",
            "parameters": [{"key": "durationBeforeInterruption", "value": "PT2M"}],
            "target": {"key": "SpotInstances", "value": "gpu-spot-instance"},
        }
    ],
    "description": "Spot interruption of one gpu-spot node of esl-eks-dev (PT2M notice)",
    "roleArn": "arn:aws:iam::123456789012:role/eks-spot-interruption-role-43dfae8a",
    "stopConditions": [{"source": "none"}],
    "tags": TAGS,
    "targets": [
        {
            "filters": [{"path": "State.Name", "values": ["running"]}],
            "name": "gpu-spot-instance",
            "resourceTags": [{"key": "eks:nodegroup-name", "value": "gpu-spot"}],
            "resourceType": "aws:ec2:spot-instance",
            "selectionMode": "COUNT(1)",
        }
    ],
}
BUCKET = {"bucket": "esl-eks-dev-ckpt-cdd2c713", "forceDestroy": False, "tags": TAGS}
VERSIONING = {"bucket": "esl-eks-dev-ckpt-cdd2c713", "versioningConfiguration": {"status": "Enabled"}}
ENCRYPTION = {
    "bucket": "esl-eks-dev-ckpt-cdd2c713",
    "rules": [{"applyServerSideEncryptionByDefault": {"sseAlgorithm": "aws:kms", "kmsMasterKeyId": "alias/ckpt"}}],
}

# Realistic inputs of each mapped type, as the engine receives them (most from the eks-dev stack).
VALID: dict[str, dict[str, Any]] = {
    "aws:eks/cluster:Cluster": {
        "accessConfig": {"authenticationMode": "API", "bootstrapClusterCreatorAdminPermissions": True},
        "enabledClusterLogTypes": ["api", "audit"],
        "name": "esl-eks-dev",
        "roleArn": "arn:aws:iam::123456789012:role/eks-cluster-role-3b586c25",
        "tags": TAGS,
        "version": "1.35",
        "vpcConfig": {
            "endpointPrivateAccess": True,
            "endpointPublicAccess": True,
            "publicAccessCidrs": ["0.0.0.0/0"],
            "subnetIds": SUBNETS,
        },
    },
    "aws:eks/nodeGroup:NodeGroup": NODE_GROUP,
    "aws:eks/addon:Addon": {
        "addonName": "aws-mountpoint-s3-csi-driver",
        "clusterName": "esl-eks-dev",
        "configurationValues": '{"node": {"tolerateAllTaints": true}}',
        "podIdentityAssociations": [{"roleArn": ROLE_ARN, "serviceAccount": "s3-csi-driver-sa"}],
        "resolveConflictsOnCreate": "OVERWRITE",
        "resolveConflictsOnUpdate": "PRESERVE",
        "tags": TAGS,
    },
    "aws:eks/podIdentityAssociation:PodIdentityAssociation": {
        "clusterName": "esl-eks-dev",
        "namespace": "kube-system",
        "roleArn": ROLE_ARN,
        "serviceAccount": "cluster-autoscaler",
        "tags": TAGS,
    },
    "aws:eks/accessEntry:AccessEntry": {
        "clusterName": "esl-eks-dev",
        "principalArn": ROLE_ARN,
        "kubernetesGroups": ["lab-viewers"],
        "type": "STANDARD",
        "userName": "lab-admin",
        "tags": TAGS,
    },
    "aws:eks/accessPolicyAssociation:AccessPolicyAssociation": {
        "accessScope": {"type": "namespace", "namespaces": ["training"]},
        "clusterName": "esl-eks-dev",
        "policyArn": "arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy",
        "principalArn": ROLE_ARN,
    },
    "aws:fis/experimentTemplate:ExperimentTemplate": EXPERIMENT,
    "aws:iam/role:Role": {"assumeRolePolicy": TRUST, "maxSessionDuration": 3600, "path": "/lab/", "tags": TAGS},
    "aws:iam/rolePolicy:RolePolicy": {"name": "checkpoint-bucket", "policy": IDENTITY, "role": "eks-s3-csi-role-a75f"},
    "aws:iam/policy:Policy": {"name": "lab-read", "path": "/lab/", "policy": IDENTITY, "tags": TAGS},
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": {
        "policyArn": "arn:aws:iam::aws:policy/AmazonEKSClusterPolicy",
        "role": "eks-cluster-role-3b586c25",
    },
    "aws:ecr/repository:Repository": {
        "name": "esl-eks-dev/trainer",
        "imageTagMutability": "IMMUTABLE",
        "imageScanningConfiguration": {"scanOnPush": True},
        "encryptionConfigurations": [{"encryptionType": "AES256"}],
        "tags": {"elastic-spot-lab/cluster": "esl-eks-dev"},
    },
    "aws:s3/bucket:Bucket": BUCKET,
    "aws:s3/bucketV2:BucketV2": {"bucketPrefix": "esl-eks-dev-ckpt-", "forceDestroy": False, "tags": TAGS},
    "aws:s3/bucketVersioning:BucketVersioning": VERSIONING,
    "aws:s3/bucketVersioningV2:BucketVersioningV2": VERSIONING,
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": ENCRYPTION,
    "aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2": ENCRYPTION,
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration": {
        "bucket": "esl-eks-dev-ckpt-cdd2c713",
        "rules": [
            {
                "abortIncompleteMultipartUpload": {"daysAfterInitiation": 1},
                "expiration": {"expiredObjectDeleteMarker": True},
                "filter": {},
                "id": "expire-old-checkpoint-versions",
                "noncurrentVersionExpiration": {"noncurrentDays": 3},
                "status": "Enabled",
            },
            {
                "filter": {"and": {"prefix": "scratch/", "tags": {"kind": "scratch"}}},
                "expiration": {"days": 7},
                "id": "expire-scratch",
                "status": "Enabled",
            },
        ],
    },
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": {
        "blockPublicAcls": True,
        "blockPublicPolicy": True,
        "bucket": "esl-eks-dev-ckpt-cdd2c713",
        "ignorePublicAcls": True,
        "restrictPublicBuckets": True,
    },
    "aws:ec2/vpc:Vpc": {
        "cidrBlock": "10.40.0.0/16",
        "enableDnsHostnames": True,
        "enableDnsSupport": True,
        "tags": TAGS,
    },
    "aws:ec2/subnet:Subnet": {
        "availabilityZone": "us-east-1a",
        "cidrBlock": "10.40.32.0/20",
        "mapPublicIpOnLaunch": True,
        "tags": {**TAGS, "kubernetes.io/cluster/esl-eks-dev": "shared", "kubernetes.io/role/elb": "1"},
        "vpcId": "vpc-fd12ea78fd12ea78",
    },
    "aws:ec2/internetGateway:InternetGateway": {"tags": TAGS, "vpcId": "vpc-fd12ea78fd12ea78"},
    "aws:ec2/natGateway:NatGateway": {
        "allocationId": "eipalloc-5c0be26c5c0be26c",
        "connectivityType": "public",
        "subnetId": "subnet-3cf7c5413cf7c541",
        "tags": TAGS,
    },
    "aws:ec2/eip:Eip": {"domain": "vpc", "tags": TAGS},
    "aws:ec2/routeTable:RouteTable": {"tags": TAGS, "vpcId": "vpc-fd12ea78fd12ea78"},
    "aws:ec2/routeTableAssociation:RouteTableAssociation": {
        "routeTableId": "rtb-1e90c6bc1e90c6bc",
        "subnetId": "subnet-3cf7c5413cf7c541",
    },
    "aws:ec2/vpcEndpoint:VpcEndpoint": {
        "routeTableIds": ["rtb-5a81a9965a81a996"],
        "serviceName": "com.amazonaws.us-east-1.s3",
        "tags": TAGS,
        "vpcEndpointType": "Gateway",
        "vpcId": "vpc-fd12ea78fd12ea78",
    },
    "aws:ec2/route:Route": {
        "destinationCidrBlock": "0.0.0.0/0",
        "gatewayId": "igw-2ab54b2d2ab54b2d",
        "routeTableId": "rtb-1e90c6bc1e90c6bc",
    },
    "aws:autoscaling/tag:Tag": {
        "autoscalingGroupName": "eks-gpu-spot-3ac92ad5-4785-5154-b66c-505d5571778a",
        "tag": {
            "key": "k8s.io/cluster-autoscaler/node-template/label/elastic-spot-lab/pool",
            "propagateAtLaunch": False,
            "value": "gpu-spot",
        },
    },
}


@dataclass
class _Plan:
    resources: list[RecordedResource]


def _resource(type_: str, inputs: dict[str, Any], name: str = "r", custom: bool = True) -> RecordedResource:
    return RecordedResource(
        urn=f"urn:pulumi:dev::elastic-spot-lab::{type_}::{name}",
        type=type_,
        name=name,
        parent=None,
        custom=custom,
        remote=False,
        inputs=copy.deepcopy(inputs),
        secret_inputs=[],
    )


def _parts(path: str) -> list[str | int]:
    """`actions[0].parameters[0].value` -> ["actions", 0, "parameters", 0, "value"]."""
    return [int(p) if p.isdigit() else p for p in re.findall(r"[^.\[\]]+", path)]


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(inputs: dict[str, Any]) -> None:
        *head, last = _parts(path)
        cur: Any = inputs
        for part in head:
            cur = cur[part]
        cur[last] = value

    return change


def _drop(path: str) -> Callable[[dict[str, Any]], None]:
    def change(inputs: dict[str, Any]) -> None:
        *head, last = _parts(path)
        cur: Any = inputs
        for part in head:
            cur = cur[part]
        del cur[last]

    return change


def _rename(old: str, new: str) -> Callable[[dict[str, Any]], None]:
    def change(inputs: dict[str, Any]) -> None:
        inputs[new] = inputs.pop(old)

    return change


def _errors_of(type_: str, inputs: dict[str, Any]) -> list[Any]:
    return errors(aws_api.check_resource(_resource(type_, inputs)))


NG = "aws:eks/nodeGroup:NodeGroup"
FIS = "aws:fis/experimentTemplate:ExperimentTemplate"
ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
POLICY = "aws:iam/policy:Policy"
NOT_JSON = '{"Version": "2012-10-17", "Statement": [}'

LIFECYCLE = "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration"
ENDPOINT = "aws:ec2/vpcEndpoint:VpcEndpoint"

# (type, change to its valid inputs, the one error's path, a fragment of what it expects)
BROKEN = {
    "lifecycle rule status in lower case": (
        LIFECYCLE,
        _set("rules[0].status", "enabled"),
        "rules[0].status",
        "Enabled",
    ),
    "noncurrent days as a string": (
        LIFECYCLE,
        _set("rules[0].noncurrentVersionExpiration.noncurrentDays", "3"),
        "rules[0].noncurrentVersionExpiration.noncurrentDays",
        "an integer",
    ),
    "noncurrent expiry without its days": (
        LIFECYCLE,
        _set("rules[0].noncurrentVersionExpiration", {"newerNoncurrentVersions": 2}),
        "rules[0].noncurrentVersionExpiration.noncurrentDays",
        "noncurrentDays is required",
    ),
    "lifecycle rule without its id": (LIFECYCLE, _drop("rules[0].id"), "rules[0].id", "id is required"),
    "abort after an unknown member": (
        LIFECYCLE,
        _set("rules[0].abortIncompleteMultipartUpload", {"daysAfterInitation": 1}),
        "rules[0].abortIncompleteMultipartUpload.daysAfterInitation",
        "did you mean daysAfterInitiation",
    ),
    "lifecycle rule with a tag filter value not a string": (
        LIFECYCLE,
        _set("rules[1].filter.and.tags.kind", 7),
        "rules[1].filter.and.tags.kind",
        "a string",
    ),
    "endpoint type in lower case": (ENDPOINT, _set("vpcEndpointType", "gateway"), "vpcEndpointType", "Gateway"),
    "endpoint without its VPC": (ENDPOINT, _drop("vpcId"), "vpcId", "VpcId is required"),
    "endpoint route tables not a list": (ENDPOINT, _set("routeTableIds", "rtb-1"), "routeTableIds", "a list"),
    "node group labels not a map": (NG, _set("labels", ["gpu-spot"]), "labels", "a map (labelsMap)"),
    "ecr exclusion filters over the list's bound": (
        "aws:ecr/repository:Repository",
        _set("imageTagMutabilityExclusionFilters", [{"filter": f"v{i}*", "filterType": "WILDCARD"} for i in range(6)]),
        "imageTagMutabilityExclusionFilters",
        "at most 5 items (6 given)",
    ),
    "unknown property": (NG, _rename("capacityType", "capacityTyp"), "capacityTyp", "did you mean capacityType"),
    "capacity type not in the enum": (NG, _set("capacityType", "SPOTTY"), "capacityType", "ON_DEMAND, SPOT"),
    "AMI type not in the enum": (NG, _set("amiType", "AL2_x86_64_GPUX"), "amiType", "AL2023_x86_64_NVIDIA"),
    "taint effect in Kubernetes' spelling": (
        NG,
        _set("taints[0].effect", "NoSchedule"),
        "taints[0].effect",
        "NO_SCHEDULE",
    ),
    "number as a string": (NG, _set("scalingConfig.minSize", "0"), "scalingConfig.minSize", "an integer"),
    "scaling without maxSize": (NG, _drop("scalingConfig.maxSize"), "scalingConfig.maxSize", "required"),
    "label value of 64 characters": (
        NG,
        _set("labels.elastic-spot-lab/pool", "x" * 64),
        "labels.elastic-spot-lab/pool",
        "at most 63",
    ),
    "desired above max": (NG, _set("scalingConfig.desiredSize", 3), "scalingConfig.desiredSize", "at most maxSize"),
    "no node unavailable during updates": (
        NG,
        _set("updateConfig.maxUnavailable", 0),
        "updateConfig.maxUnavailable",
        "at least 1",
    ),
    "node role missing": (NG, _drop("nodeRoleArn"), "nodeRoleArn", "nodeRole is required"),
    "subnets not a list": (NG, _set("subnetIds", "subnet-1"), "subnetIds", "a list"),
    "cluster authentication mode": (
        "aws:eks/cluster:Cluster",
        _set("accessConfig.authenticationMode", "IAM"),
        "accessConfig.authenticationMode",
        "API_AND_CONFIG_MAP",
    ),
    "cluster log type": (
        "aws:eks/cluster:Cluster",
        _set("enabledClusterLogTypes[1]", "audits"),
        "enabledClusterLogTypes[1]",
        "controllerManager",
    ),
    "cluster name pattern": ("aws:eks/cluster:Cluster", _set("name", "-esl"), "name", "a string matching"),
    "cluster without subnets": (
        "aws:eks/cluster:Cluster",
        _drop("vpcConfig.subnetIds"),
        "vpcConfig.subnetIds",
        "required",
    ),
    "addon conflicts lowercase": (
        "aws:eks/addon:Addon",
        _set("resolveConflictsOnCreate", "overwrite"),
        "resolveConflictsOnCreate",
        "OVERWRITE, NONE, PRESERVE",
    ),
    "addon pod identity without role": (
        "aws:eks/addon:Addon",
        _drop("podIdentityAssociations[0].roleArn"),
        "podIdentityAssociations[0].roleArn",
        "roleArn is required",
    ),
    "pod identity without service account": (
        "aws:eks/podIdentityAssociation:PodIdentityAssociation",
        _drop("serviceAccount"),
        "serviceAccount",
        "required",
    ),
    "access entry typo": (
        "aws:eks/accessEntry:AccessEntry",
        _rename("userName", "username"),
        "username",
        "did you mean userName",
    ),
    "access scope type": (
        "aws:eks/accessPolicyAssociation:AccessPolicyAssociation",
        _set("accessScope.type", "namespaces"),
        "accessScope.type",
        "cluster, namespace",
    ),
    "namespace scope without namespaces": (
        "aws:eks/accessPolicyAssociation:AccessPolicyAssociation",
        _drop("accessScope.namespaces"),
        "accessScope.namespaces",
        "at least one namespace",
    ),
    "FIS action targets a missing target": (
        FIS,
        _set("actions[0].target.value", "gpu-spot-instances"),
        "actions[0].target.value",
        "defined: gpu-spot-instance",
    ),
    "FIS target with tags and ARNs": (
        FIS,
        _set("targets[0].resourceArns", ["arn:aws:ec2:us-east-1:123456789012:instance/i-0abc"]),
        "targets[0].resourceArns",
        "not both",
    ),
    "FIS spot notice under 2 minutes": (
        FIS,
        _set("actions[0].parameters[0].value", "PT1M"),
        "actions[0].parameters[0].value",
        "PT2M to PT15M",
    ),
    "FIS spot notice not a duration": (
        FIS,
        _set("actions[0].parameters[0].value", "2m"),
        "actions[0].parameters[0].value",
        "ISO-8601",
    ),
    "FIS selection mode": (FIS, _set("targets[0].selectionMode", "SOME(1)"), "targets[0].selectionMode", "COUNT(n)"),
    "FIS wrong target key": (FIS, _set("actions[0].target.key", "Instances"), "actions[0].target.key", "SpotInstances"),
    "FIS stop condition source": (FIS, _set("stopConditions[0].source", "alarm"), "stopConditions[0].source", "none"),
    "FIS description too long": (FIS, _set("description", "x" * 513), "description", "at most 512"),
    "FIS target without resource type": (
        FIS,
        _drop("targets[0].resourceType"),
        "targets[0].resourceType",
        "resourceType is required",
    ),
    "trust policy not JSON": (ROLE, _set("assumeRolePolicy", NOT_JSON), "assumeRolePolicy", "a JSON policy document"),
    "trust policy lowercase effect": (
        ROLE,
        _set("assumeRolePolicy", TRUST.replace('"Allow"', '"allow"')),
        "assumeRolePolicy.Statement[0].Effect",
        "Allow or Deny",
    ),
    "trust policy without principal": (
        ROLE,
        _set("assumeRolePolicy", _policy({"Effect": "Allow", "Action": "sts:AssumeRole"})),
        "assumeRolePolicy.Statement[0].Principal",
        "Principal",
    ),
    "trust policy with a resource": (
        ROLE,
        _set("assumeRolePolicy", _policy({**json.loads(TRUST)["Statement"][0], "Resource": "*"})),
        "assumeRolePolicy.Statement[0].Resource",
        "no Resource in a trust policy",
    ),
    "role session too long": (ROLE, _set("maxSessionDuration", 86400), "maxSessionDuration", "at most 43200"),
    "role path without slashes": (ROLE, _set("path", "lab"), "path", "a string matching"),
    "identity policy without resource": (
        ROLE_POLICY,
        _set("policy", _policy({"Effect": "Allow", "Action": "s3:ListBucket"})),
        "policy.Statement[0].Resource",
        "Resource or NotResource",
    ),
    "identity policy action shape": (
        ROLE_POLICY,
        _set("policy", _policy({"Effect": "Allow", "Action": ["ec2-DescribeInstances"], "Resource": "*"})),
        "policy.Statement[0].Action[0]",
        "service:Action",
    ),
    "identity policy with a principal": (
        ROLE_POLICY,
        _set("policy", _policy({"Effect": "Allow", "Principal": "*", "Action": "s3:*", "Resource": "*"})),
        "policy.Statement[0].Principal",
        "no Principal in an identity policy",
    ),
    "policy version": (
        POLICY,
        _set("policy", IDENTITY.replace("2012-10-17", "2012-10-18")),
        "policy.Version",
        "2012-10-17",
    ),
    "policy resource not an ARN": (
        POLICY,
        _set("policy", _policy({"Effect": "Allow", "Action": "s3:*", "Resource": "my-bucket"})),
        "policy.Statement[0].Resource",
        "an ARN",
    ),
    "attachment role given as an ARN": (
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
        _set("role", ROLE_ARN),
        "role",
        "a string matching",
    ),
    "bucket name with uppercase": ("aws:s3/bucket:Bucket", _set("bucket", "Esl-Checkpoints"), "bucket", "lowercase"),
    "bucket name like an IP address": ("aws:s3/bucket:Bucket", _set("bucket", "10.40.0.1"), "bucket", "IP address"),
    "bucket name with a reserved suffix": (
        "aws:s3/bucket:Bucket",
        _set("bucket", "ckpt-s3alias"),
        "bucket",
        "-s3alias",
    ),
    "bucket prefix too long": (
        "aws:s3/bucketV2:BucketV2",
        _set("bucketPrefix", "a" * 38),
        "bucketPrefix",
        "at most 37",
    ),
    "versioning status lowercase": (
        "aws:s3/bucketVersioning:BucketVersioning",
        _set("versioningConfiguration.status", "enabled"),
        "versioningConfiguration.status",
        "Enabled, Suspended",
    ),
    "encryption algorithm": (
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
        _set("rules[0].applyServerSideEncryptionByDefault.sseAlgorithm", "AES-256"),
        "rules[0].applyServerSideEncryptionByDefault.sseAlgorithm",
        "AES256",
    ),
    "encryption without rules": (
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
        _drop("rules"),
        "rules",
        "Rules is required",
    ),
    "public access flag as a string": (
        "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
        _set("blockPublicAcls", "true"),
        "blockPublicAcls",
        "a boolean",
    ),
    "public access flag typo": (
        "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
        _rename("blockPublicPolicy", "blockPublicPolicies"),
        "blockPublicPolicies",
        "did you mean blockPublicPolicy",
    ),
    "VPC CIDR too large": ("aws:ec2/vpc:Vpc", _set("cidrBlock", "10.0.0.0/8"), "cidrBlock", "/16 to /28"),
    "VPC DNS flag as a string": (
        "aws:ec2/vpc:Vpc",
        _set("enableDnsHostnames", "yes"),
        "enableDnsHostnames",
        "a boolean",
    ),
    "subnet CIDR with host bits": (
        "aws:ec2/subnet:Subnet",
        _set("cidrBlock", "10.40.32.1/20"),
        "cidrBlock",
        "host bits set",
    ),
    "internet gateway VPC not a string": (
        "aws:ec2/internetGateway:InternetGateway",
        _set("vpcId", 42),
        "vpcId",
        "a string",
    ),
    "NAT connectivity uppercase": (
        "aws:ec2/natGateway:NatGateway",
        _set("connectivityType", "PUBLIC"),
        "connectivityType",
        "private, public",
    ),
    "EIP domain": ("aws:ec2/eip:Eip", _set("domain", "classic"), "domain", "vpc, standard"),
    "route table typo": (
        "aws:ec2/routeTable:RouteTable",
        _set("propagatingVgw", ["vgw-1"]),
        "propagatingVgw",
        "did you mean propagatingVgws",
    ),
    "association without route table": (
        "aws:ec2/routeTableAssociation:RouteTableAssociation",
        _drop("routeTableId"),
        "routeTableId",
        "RouteTableId is required",
    ),
    "route destination not a CIDR": (
        "aws:ec2/route:Route",
        _set("destinationCidrBlock", "internet"),
        "destinationCidrBlock",
        "IPv4 CIDR",
    ),
    "group tag propagate as a string": (
        "aws:autoscaling/tag:Tag",
        _set("tag.propagateAtLaunch", "false"),
        "tag.propagateAtLaunch",
        "a boolean",
    ),
    "group tag value too long": ("aws:autoscaling/tag:Tag", _set("tag.value", "v" * 257), "tag.value", "at most 256"),
    "group tag without value": ("aws:autoscaling/tag:Tag", _drop("tag.value"), "tag.value", "pulumi_aws schema"),
    "tag key reserved for AWS": (NG, _set("tags.aws:owner", "lab"), "tags['aws:owner']", "not starting with 'aws:'"),
    "tag key too long": ("aws:ec2/vpc:Vpc", _set("tags." + "k" * 129, "v"), f"tags[{'k' * 129!r}]", "1-128"),
    "tag value with a bad character": (ROLE, _set("tags.team", "ml#1"), "tags['team']", "letters, digits, spaces"),
    "tag value with a newline": (ROLE, _set("tags.team", "ml\nops"), "tags['team']", "letters, digits, spaces"),
    "tag value a number": ("aws:eks/cluster:Cluster", _set("tags.cost", 7), "tags['cost']", "a string tag value"),
    "ecr tag mutability unknown": (
        "aws:ecr/repository:Repository",
        _set("imageTagMutability", "SOMETIMES"),
        "imageTagMutability",
        "one of MUTABLE, IMMUTABLE",
    ),
    "ecr encryption type unknown": (
        "aws:ecr/repository:Repository",
        _set("encryptionConfigurations.0.encryptionType", "ROT13"),
        "encryptionConfigurations[0].encryptionType",
        "one of AES256",
    ),
}


def test_every_mapped_type_has_valid_inputs():
    assert set(VALID) == set(aws_api.TARGETS)


@pytest.mark.parametrize("type_", sorted(VALID))
def test_valid_inputs_pass(type_):
    findings = aws_api.check_resource(_resource(type_, VALID[type_]))
    assert findings == [], "\n".join(map(str, findings))


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_variant_is_one_error(case):
    type_, change, path, fragment = BROKEN[case]
    inputs = copy.deepcopy(VALID[type_])
    change(inputs)
    found = _errors_of(type_, inputs)
    assert [f.property for f in found] == [path], "\n".join(map(str, found))
    assert fragment in found[0].expected, str(found[0])
    assert found[0].check == aws_api.CHECK
    assert found[0].resource == f"{type_} 'r'"


def test_findings_name_the_botocore_shape_and_the_value():
    inputs = copy.deepcopy(NODE_GROUP)
    inputs["taints"][0]["effect"] = "NoSchedule"
    (finding,) = _errors_of(NG, inputs)
    assert finding.value == "NoSchedule"
    assert finding.expected == "one of NO_SCHEDULE, NO_EXECUTE, PREFER_NO_SCHEDULE [botocore eks TaintEffect]"


def test_label_value_length_comes_from_the_model():
    inputs = copy.deepcopy(NODE_GROUP)
    inputs["labels"]["elastic-spot-lab/pool"] = "x" * 64
    (finding,) = _errors_of(NG, inputs)
    assert finding.expected == "at most 63 characters (64 given) [botocore eks labelValue]"


def test_a_label_key_too_long_is_named_as_a_key():
    inputs = copy.deepcopy(NODE_GROUP)
    inputs["labels"]["k" * 64] = "v"
    (finding,) = _errors_of(NG, inputs)
    assert finding.property == "labels." + "k" * 64
    assert finding.expected.startswith("key: at most 63 characters")


def test_unknown_outputs_are_fine():
    """Values from other resources' outputs, unknown at plan time, cannot be judged."""
    inputs = copy.deepcopy(NODE_GROUP)
    inputs.update(
        clusterName=UNKNOWN,
        scalingConfig={"minSize": UNKNOWN, "maxSize": 2, "desiredSize": 0},
        subnetIds=UNKNOWN,
        tags={"owner": UNKNOWN},
    )
    assert aws_api.check_resource(_resource(NG, inputs)) == []
    assert aws_api.check_resource(_resource(ROLE, {"assumeRolePolicy": UNKNOWN})) == []


def test_numbers_that_arrive_as_whole_floats_are_integers():
    inputs = copy.deepcopy(NODE_GROUP)
    inputs["scalingConfig"] = {"minSize": 0.0, "maxSize": 2.0, "desiredSize": 0.0}
    assert _errors_of(NG, inputs) == []


def test_a_policy_document_may_be_an_object():
    assert _errors_of(ROLE, {"assumeRolePolicy": json.loads(TRUST)}) == []
    broken = json.loads(TRUST)
    broken["Statement"][0]["Effect"] = "allow"
    (finding,) = _errors_of(ROLE, {"assumeRolePolicy": broken})
    assert finding.property == "assumeRolePolicy.Statement[0].Effect"


def test_a_policy_without_version_is_a_warning():
    doc = json.dumps({"Statement": json.loads(TRUST)["Statement"]})
    findings = aws_api.check_resource(_resource(ROLE, {"assumeRolePolicy": doc}))
    assert [(f.severity, f.property) for f in findings] == [(WARNING, "assumeRolePolicy.Version")]


def test_duplicate_sids_are_an_error():
    doc = _policy(*([json.loads(IDENTITY)["Statement"][1]] * 2))
    (finding,) = _errors_of(ROLE_POLICY, {**VALID[ROLE_POLICY], "policy": doc})
    assert (finding.property, finding.value) == ("policy.Statement", "FindThem")


def test_versioning_disabled_is_the_providers_own_value():
    """pulumi_aws takes status Disabled for a bucket never versioned (it makes no call)."""
    inputs = {"bucket": "esl-ckpt", "versioningConfiguration": {"status": "Disabled"}}
    assert _errors_of("aws:s3/bucketVersioning:BucketVersioning", inputs) == []


def test_configuration_values_that_are_not_json_are_a_warning():
    inputs = {**VALID["aws:eks/addon:Addon"], "configurationValues": "node: {tolerateAllTaints: true}"}
    findings = aws_api.check_resource(_resource("aws:eks/addon:Addon", inputs))
    assert [(f.severity, f.property) for f in findings] == [(WARNING, "configurationValues")]


def test_fis_duplicate_target_names():
    inputs = copy.deepcopy(EXPERIMENT)
    inputs["targets"].append(copy.deepcopy(inputs["targets"][0]))
    (finding,) = _errors_of(FIS, inputs)
    assert (finding.property, finding.value) == ("targets", "gpu-spot-instance")


def test_fis_spot_action_on_a_target_of_another_type():
    inputs = copy.deepcopy(EXPERIMENT)
    inputs["targets"][0]["resourceType"] = "aws:ec2:instance"
    (finding,) = _errors_of(FIS, inputs)
    assert finding.property == "actions[0].target.value"
    assert "aws:ec2:spot-instance" in finding.expected


def test_too_many_tags():
    inputs = {**VALID["aws:ec2/vpc:Vpc"], "tags": {f"k{i}": "v" for i in range(51)}}
    (finding,) = _errors_of("aws:ec2/vpc:Vpc", inputs)
    assert (finding.property, finding.value) == ("tags", 51)
    assert "at most 50 tags" in finding.expected


def test_an_unmapped_aws_type_is_an_error_and_its_tags_are_checked():
    resource = _resource("aws:sqs/queue:Queue", {"name": "q", "tags": {"aws:team": "ml"}})
    found = aws_api.check_resource(resource)
    assert [(f.severity, f.property) for f in found] == [(ERROR, "<type>"), (ERROR, "tags['aws:team']")]
    assert "TARGETS (unchecked resources are not allowed)" in found[0].expected


def test_an_unchecked_type_is_not_an_error(monkeypatch):
    monkeypatch.setattr(aws_api, "UNCHECKED", (("aws:sqs/queue:Queue", "no request model needed here"),))
    assert aws_api.check_resource(_resource("aws:sqs/queue:Queue", {"name": "q"})) == []


def test_other_providers_resources_are_not_checked():
    assert aws_api.check_resource(_resource("pulumi:providers:aws", {"region": "us-east-1"})) == []


def test_applies_only_to_plans_with_aws_resources():
    others = [
        _resource("azure-native:containerservice:ManagedCluster", {}),
        _resource("kubernetes:core/v1:Namespace", {}),
        _resource("pulumi:providers:aws", {}),
        _resource("aws:eks/cluster:Cluster", {}, custom=False),  # a component of that name is no AWS resource
    ]
    assert not aws_api.applies(_Plan(others))
    assert aws_api.applies(_Plan([*others, _resource(NG, NODE_GROUP)]))


def test_aws_conformance_checks_every_aws_resource():
    broken = copy.deepcopy(NODE_GROUP)
    broken["capacityType"] = "SPOTTY"
    plan = _Plan(
        [
            _resource(NG, NODE_GROUP, name="cpu"),
            _resource(NG, broken, name="gpu"),
            _resource("aws:sqs/queue:Queue", {}, name="q"),
            _resource("kubernetes:core/v1:Namespace", {"metadata": {"name": "aws"}}),
        ]
    )
    found = list(aws_api.aws_conformance(plan))
    assert [(f.resource, f.property) for f in found] == [
        (f"{NG} 'gpu'", "capacityType"),
        ("aws:sqs/queue:Queue 'q'", "<type>"),
    ]


def test_the_eks_dev_plan_conforms(eks_plan):
    """Every AWS resource the program declares is mapped and its inputs pass."""
    findings = list(aws_api.aws_conformance(eks_plan))
    assert findings == [], "\n".join(map(str, findings))
    assert aws_api.applies(eks_plan)


# --------------------------------------------------------------------------- the mapping against its sources


@pytest.mark.parametrize("type_", sorted(aws_api.TARGETS))
def test_targets_name_real_botocore_operations_and_members(type_):
    """Each operation exists, and each rename names a member somewhere in its requests."""
    target = aws_api.TARGETS[type_]
    session = aws_request.botocore_session()
    model = session.get_service_model(target.service)
    members: set[str] = set()
    for op in (target.operation, *target.more_operations):
        members |= _members(model.operation_model(op).input_shape, set())
    missing = {k: v for k, v in target.renames.items() if v not in members}
    assert not missing, f"renames to members {target.operation} does not have"


def _members(shape: Any, seen: set[str]) -> set[str]:
    if shape.name in seen:
        return set()
    seen.add(shape.name)
    if shape.type_name == "structure":
        return set(shape.members) | {m for s in shape.members.values() for m in _members(s, seen)}
    if shape.type_name == "list":
        return _members(shape.member, seen)
    if shape.type_name == "map":
        return _members(shape.value, seen)
    return set()


def _pulumi_args(type_: str) -> type:
    """The pulumi_aws Args class of a type token (`aws:eks/nodeGroup:NodeGroup`)."""
    package, _, name = re.fullmatch(r"aws:(\w+)/(\w+):(\w+)", type_).groups()
    # Through the package, never its submodule first: pulumi_aws loads its services lazily,
    # and a service whose submodule was imported before it loaded stays without its classes
    # for every later test in this process.
    resource = getattr(importlib.import_module(f"pulumi_aws.{package}"), name)
    mod = sys.modules[resource.__module__]
    return getattr(mod, f"{name}InitArgs", None) or getattr(mod, f"{name}Args")


def _sample(args_cls: type, depth: int = 0) -> dict[str, Any]:
    """Inputs naming every input of an Args class (and of its nested Args, a level or two
    down), each with an unknown value, so only the names are judged."""
    names = pulumi._types.input_type_py_to_pulumi_names(args_cls)
    module = importlib.import_module(args_cls.__module__.rsplit(".", 1)[0] + "._inputs")
    # pulumi.Input names "Output[T]" as a forward reference: evaluated here with pulumi's own
    # names in scope, whatever other code evaluated before in this process.
    hints = typing.get_type_hints(
        args_cls.__init__,
        globalns=vars(pulumi.output) | vars(module) | vars(importlib.import_module(args_cls.__module__)),
    )
    sample: dict[str, Any] = {}
    for py, wire in names.items():
        text = str(hints.get(py, ""))
        nested = re.findall(r"(\w+Args)\b", text)
        if nested and depth < 2 and hasattr(module, nested[-1]):
            inner = _sample(getattr(module, nested[-1]), depth + 1)
            if "name" in inner:
                inner["name"] = "n"  # FIS keys actions and targets by name
            sample[wire] = [inner] if "Sequence" in text else inner
        else:
            sample[wire] = UNKNOWN
    return sample


@pytest.mark.parametrize("type_", sorted(aws_api.TARGETS))
def test_every_pulumi_input_is_a_member_or_the_providers(type_):
    """No input of the pulumi_aws resource (two levels deep) is unknown to the mapping: each is
    a request member (renamed where needed) or listed as the provider's own."""
    findings = aws_api.check_resource(_resource(type_, _sample(_pulumi_args(type_))))
    unknown = [str(f) for f in findings if "unknown property" in f.expected]
    assert unknown == []


@pytest.mark.parametrize("type_", sorted(t for t, target in aws_api.TARGETS.items() if target.provider_required))
def test_provider_required_inputs_are_required_by_pulumi_aws(type_):
    for path in aws_api.TARGETS[type_].provider_required:
        cls = _pulumi_args(type_)
        *parents, last = path.split(".")
        for part in parents:
            cls = _nested_args(cls, part)
        param = _py_param(cls, last)
        assert param.default is param.empty, f"{path} is optional in {cls.__name__}"


def _py_param(cls: type, wire: str) -> Any:
    py = {w: p for p, w in pulumi._types.input_type_py_to_pulumi_names(cls).items()}[wire]
    return inspect.signature(cls.__init__).parameters[py]


def _nested_args(cls: type, wire: str) -> type:
    module = importlib.import_module(cls.__module__.rsplit(".", 1)[0] + "._inputs")
    text = str(_py_param(cls, wire).annotation)
    return getattr(module, re.findall(r"(\w+Args)\b", text)[-1])
