"""AWS API conformance: recorded pulumi_aws inputs, mapped to the request of the AWS API
operation the provider makes, checked offline against the service models shipped in
`botocore`, plus the rules AWS applies that a model cannot say (IAM policy grammar, S3
bucket names, CIDR sizes, FIS references) and AWS's tag rules on every `tags` map.

How a resource is checked (generic over the model, nothing hand-listed per property):
1. `TARGETS` maps a Pulumi type token to a botocore service and the operation whose input
   shape is the request (`AwsTarget`), the Pulumi input names that differ from the model's
   member names (`renames`: a bare name at any depth, a dotted path under its own parent;
   members of PascalCase services such as iam, s3, ec2 and autoscaling are also found by
   capitalizing the input name), the inputs that are the provider's own (`pulumi_only`),
   the required members the provider fills in itself (`generated`: auto-names), the inputs
   pulumi_aws requires where the model does not (`provider_required`), and where Pulumi's
   structure differs from the request's, a `reshape` that moves the inputs where the request
   wants them (FIS takes maps keyed by name where Pulumi takes lists, S3 nests flags in a
   configuration object); findings still name the Pulumi input path (`Moved`). EC2 inputs
   that another call sets (ModifyVpcAttribute's DNS flags) are looked up in
   `more_operations`.
2. The request is walked against the operation's input shape: unknown member names (with a
   "did you mean"), values of the wrong JSON type (numbers given as strings are errors:
   Pulumi sends numbers as numbers), enum values not in the shape's enum, missing required
   members, string lengths and number ranges outside the shape's `min`/`max`, and strings
   that do not match its `pattern` (where the pattern compiles in Python's `re`; AWS matches
   the whole value). Findings name the Pulumi input path, and end with the botocore shape
   they were held to: `[botocore eks TaintEffect]`.
3. Values that cannot be judged offline, the unknown outputs of other resources, are fine.
4. Every resource's `tags` map is held to AWS's tag rules (the portable ones: EC2 alone
   allows more characters); every IAM policy document input to the IAM policy grammar
   (errors name the path inside the document: `assumeRolePolicy.Statement[0].Effect`).
5. Each target's `rules` add what its service validates that the model cannot say: bucket
   names, CIDR prefix sizes, node group sizes, FIS references and action parameters
   (lab/plan/aws_rules.py `_FIS_ACTIONS`).

An `aws:*` custom resource whose type has no entry in `TARGETS` is an error, unless its type
is in `UNCHECKED` with a reason.

This module holds the mapping and the check; the request walk is lab/plan/aws_request.py, the
IAM policy grammar lab/plan/aws_policy.py, the per-service rules and reshapes
lab/plan/aws_rules.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from lab.plan import aws_rules as rules
from lab.plan.aws_policy import policy_issues
from lab.plan.aws_request import AwsTarget, Issue, RequestWalker, indexed, is_unknown, join_path
from lab.plan.findings import WARNING, Finding, custom_resources
from lab.program.recording import Plan, RecordedResource
from lab.vocab.aws_tags import tag_problems

__all__ = ["CHECK", "TARGETS", "UNCHECKED", "applies", "aws_conformance", "check_resource"]

CHECK = "aws-api-conformance"
_PREFIX = "aws:"

# aws:* types that are not checked against a model, each with the reason why.
UNCHECKED: tuple[tuple[str, str], ...] = ()


# --------------------------------------------------------------------------- tags, documents, required inputs


def _tag_issues(tags: Any, path: str = "tags") -> Iterator[Issue]:
    """AWS's tag rules (lab.vocab.aws_tags, shared with the stack's config check); tags whose
    value is another resource's output are judged by their names only."""
    if tags is None or is_unknown(tags):
        return
    if isinstance(tags, Mapping):
        tags = {key: ("" if is_unknown(value) else value) for key, value in tags.items()}
    for problem in tag_problems(tags, path):
        yield Issue(problem.key, problem.value, problem.expected, "AWS tag rules")


def _document_issues(target: AwsTarget, inputs: dict[str, Any]) -> Iterator[Issue]:
    """The IAM policy documents and JSON inputs of a resource."""
    for name, kind in target.documents.items():
        if inputs.get(name) is not None:
            yield from policy_issues(inputs[name], name, trust=kind == "trust")
    for name in target.json_inputs:
        value = inputs.get(name)
        if isinstance(value, str) and not is_unknown(value):
            try:
                json.loads(value)
            except ValueError as e:
                yield Issue(name, value, f"a JSON document ({e})", "pulumi_aws schema: a JSON string", WARNING)


def _provider_required(paths: tuple[str, ...], inputs: dict[str, Any]) -> Iterator[Issue]:
    """Inputs pulumi_aws requires where the model leaves the member optional (`scalingConfig.maxSize`)."""
    for dotted in paths:
        yield from _require(inputs, dotted.split("."), "")


def _require(value: Any, parts: list[str], path: str) -> Iterator[Issue]:
    """Descend `parts` through objects and every list element; a missing last part is a finding
    (a missing parent is another entry's, or not required at all)."""
    if isinstance(value, list):
        for where, item in indexed(value, path):
            yield from _require(item, parts, where)
        return
    if not isinstance(value, dict):
        return
    head, rest = parts[0], parts[1:]
    where = join_path(path, head)
    if value.get(head) is None:
        if not rest:
            yield Issue(
                where, None, f"a value: {head} is required", "pulumi_aws schema; the API model leaves it optional"
            )
        return
    if rest:
        yield from _require(value[head], rest, where)


# --------------------------------------------------------------------------- the mapping

_IAM_ROLE_NAME = {"role": "RoleName"}
_S3_LEGACY_INLINE = (
    # pulumi_aws 7 Bucket's deprecated inline settings: each is another S3 call (and resource).
    "accelerationStatus",
    "acl",
    "corsRules",
    "grants",
    "lifecycleRules",
    "logging",
    "loggings",
    "objectLockConfiguration",
    "policy",
    "replicationConfiguration",
    "replicationConfigurations",
    "requestPayer",
    "serverSideEncryptionConfiguration",
    "serverSideEncryptionConfigurations",
    "versioning",
    "versionings",
    "website",
    "websites",
)
_S3_BUCKET = AwsTarget(
    "s3",
    "CreateBucket",
    renames={"objectLockEnabled": "ObjectLockEnabledForBucket"},
    pulumi_only=("bucketPrefix", "forceDestroy", *_S3_LEGACY_INLINE),
    generated=("Bucket",),
    rules=(rules.bucket_names,),
    note="the deprecated inline settings are separate S3 calls: declare their own resources to have them checked",
)
_S3_VERSIONING = AwsTarget(
    "s3",
    "PutBucketVersioning",
    renames={"mfaDelete": "MFADelete", "mfa": "MFA"},
    provider_required=("versioningConfiguration.status",),
    pulumi_values={"versioningConfiguration.status": ("Disabled",)},  # the provider's "never versioned"
)
_S3_ENCRYPTION = AwsTarget(
    "s3",
    "PutBucketEncryption",
    renames={"sseAlgorithm": "SSEAlgorithm", "kmsMasterKeyId": "KMSMasterKeyID"},
    reshape=rules.s3_encryption_request,
)

TARGETS: dict[str, AwsTarget] = {
    "aws:eks/cluster:Cluster": AwsTarget(
        "eks",
        "CreateCluster",
        renames={"vpcConfig": "resourcesVpcConfig"},
        pulumi_only=(
            "defaultAddonsToRemoves",
            "forceUpdateVersion",
            "vpcConfig.clusterSecurityGroupId",  # outputs EKS fills in
            "vpcConfig.vpcId",
            "kubernetesNetworkConfig.serviceIpv6Cidr",
        ),
        generated=("name",),
        provider_required=("vpcConfig.subnetIds",),
        reshape=rules.eks_cluster_request,
    ),
    "aws:eks/nodeGroup:NodeGroup": AwsTarget(
        "eks",
        "CreateNodegroup",
        renames={
            "nodeGroupName": "nodegroupName",
            "subnetIds": "subnets",
            "nodeRoleArn": "nodeRole",
            "sourceSecurityGroupIds": "sourceSecurityGroups",
        },
        pulumi_only=("nodeGroupNamePrefix", "forceUpdateVersion"),
        generated=("nodegroupName",),
        provider_required=(
            "scalingConfig",
            "scalingConfig.desiredSize",
            "scalingConfig.maxSize",
            "scalingConfig.minSize",
            "taints.key",
            "taints.effect",
        ),
        rules=(rules.nodegroup_sizes,),
    ),
    "aws:eks/addon:Addon": AwsTarget(
        "eks",
        "CreateAddon",
        # the create and the update conflict settings take the one enum
        renames={"resolveConflictsOnCreate": "resolveConflicts", "resolveConflictsOnUpdate": "resolveConflicts"},
        pulumi_only=("preserve",),
        json_inputs=("configurationValues",),
    ),
    "aws:eks/podIdentityAssociation:PodIdentityAssociation": AwsTarget(
        "eks", "CreatePodIdentityAssociation", documents={"policy": "identity"}
    ),
    "aws:eks/accessEntry:AccessEntry": AwsTarget("eks", "CreateAccessEntry", renames={"userName": "username"}),
    "aws:eks/accessPolicyAssociation:AccessPolicyAssociation": AwsTarget(
        "eks", "AssociateAccessPolicy", rules=(rules.access_scope,)
    ),
    "aws:fis/experimentTemplate:ExperimentTemplate": AwsTarget(
        "fis",
        "CreateExperimentTemplate",
        renames={
            "actions.target": "targets",
            "actions.startAfters": "startAfter",
            "cloudwatchLogsConfiguration": "cloudWatchLogsConfiguration",
            "cloudwatchDashboards": "cloudWatchDashboards",
        },
        provider_required=(
            "actions.name",
            "actions.parameters.key",
            "actions.parameters.value",
            "actions.target.key",
            "actions.target.value",
            "targets.name",
            "targets.resourceTags.key",
            "targets.resourceTags.value",
        ),
        reshape=rules.fis_request,
        rules=(rules.fis_rules,),
    ),
    "aws:iam/role:Role": AwsTarget(
        "iam",
        "CreateRole",
        renames={"assumeRolePolicy": "AssumeRolePolicyDocument", "name": "RoleName"},
        pulumi_only=("namePrefix", "forceDetachPolicies", "inlinePolicies", "managedPolicyArns"),
        generated=("RoleName",),
        documents={"assumeRolePolicy": "trust"},
        note="inlinePolicies and managedPolicyArns (deprecated) are other calls: use RolePolicy/RolePolicyAttachment",
    ),
    "aws:iam/rolePolicy:RolePolicy": AwsTarget(
        "iam",
        "PutRolePolicy",
        renames={"policy": "PolicyDocument", "name": "PolicyName", **_IAM_ROLE_NAME},
        pulumi_only=("namePrefix",),
        generated=("PolicyName",),
        documents={"policy": "identity"},
    ),
    "aws:iam/policy:Policy": AwsTarget(
        "iam",
        "CreatePolicy",
        renames={"policy": "PolicyDocument", "name": "PolicyName"},
        pulumi_only=("namePrefix", "delayAfterPolicyCreationInMs"),
        generated=("PolicyName",),
        documents={"policy": "identity"},
    ),
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": AwsTarget("iam", "AttachRolePolicy", renames=_IAM_ROLE_NAME),
    "aws:ecr/repository:Repository": AwsTarget(
        "ecr",
        "CreateRepository",
        renames={"name": "repositoryName"},
        pulumi_only=("forceDelete", "region"),
        generated=("repositoryName",),
        reshape=rules.ecr_repository_request,
        note="forceDelete (delete with images) and region (the provider's) are Pulumi's own",
    ),
    "aws:s3/bucket:Bucket": _S3_BUCKET,
    "aws:s3/bucketV2:BucketV2": _S3_BUCKET,
    "aws:s3/bucketVersioning:BucketVersioning": _S3_VERSIONING,
    "aws:s3/bucketVersioningV2:BucketVersioningV2": _S3_VERSIONING,
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": _S3_ENCRYPTION,
    "aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2": _S3_ENCRYPTION,
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration": AwsTarget(
        "s3",
        "PutBucketLifecycleConfiguration",
        renames={"rules.id": "ID"},
        pulumi_only=("timeouts",),
        provider_required=("rules.id", "rules.noncurrentVersionExpiration.noncurrentDays"),
        reshape=rules.s3_lifecycle_request,
    ),
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": AwsTarget(
        "s3",
        "PutPublicAccessBlock",
        pulumi_only=("skipDestroy",),
        reshape=rules.nest("PublicAccessBlockConfiguration", ("bucket",)),
    ),
    "aws:ec2/vpc:Vpc": AwsTarget(
        "ec2",
        "CreateVpc",
        renames={"assignGeneratedIpv6CidrBlock": "AmazonProvidedIpv6CidrBlock"},
        more_operations=("ModifyVpcAttribute",),
        rules=(rules.cidrs("cidrBlock", (16, 28)),),
        note="the DNS and usage-metrics flags are ModifyVpcAttribute's; tags go in TagSpecifications (tag rules only)",
    ),
    "aws:ec2/subnet:Subnet": AwsTarget(
        "ec2",
        "CreateSubnet",
        renames={"enableResourceNameDnsAaaaRecordOnLaunch": "EnableResourceNameDnsAAAARecordOnLaunch"},
        more_operations=("ModifySubnetAttribute",),
        rules=(rules.cidrs("cidrBlock", (16, 28)),),
        note="the on-launch flags are ModifySubnetAttribute's; tags go in TagSpecifications (tag rules only)",
    ),
    "aws:ec2/internetGateway:InternetGateway": AwsTarget(
        "ec2",
        "CreateInternetGateway",
        more_operations=("AttachInternetGateway",),
        note="vpcId is AttachInternetGateway's",
    ),
    "aws:ec2/natGateway:NatGateway": AwsTarget("ec2", "CreateNatGateway", renames={"privateIp": "PrivateIpAddress"}),
    "aws:ec2/eip:Eip": AwsTarget(
        "ec2",
        "AllocateAddress",
        renames={
            "instance": "InstanceId",
            "networkInterface": "NetworkInterfaceId",
            "associateWithPrivateIp": "PrivateIpAddress",
        },
        more_operations=("AssociateAddress",),
        note="instance, networkInterface and associateWithPrivateIp are AssociateAddress's",
    ),
    "aws:ec2/routeTable:RouteTable": AwsTarget(
        "ec2",
        "CreateRouteTable",
        pulumi_only=("routes", "propagatingVgws"),
        note="inline routes (CreateRoute) and propagating gateways (EnableVgwRoutePropagation) are not checked: "
        "declare aws:ec2/route:Route resources",
    ),
    "aws:ec2/routeTableAssociation:RouteTableAssociation": AwsTarget("ec2", "AssociateRouteTable"),
    "aws:ec2/vpcEndpoint:VpcEndpoint": AwsTarget(
        "ec2",
        "CreateVpcEndpoint",
        renames={"policy": "PolicyDocument"},
        pulumi_only=("autoAccept",),
        json_inputs=("policy",),
        note="autoAccept is AcceptVpcEndpointConnections' (the service owner's); tags go in TagSpecifications",
    ),
    "aws:ec2/route:Route": AwsTarget(
        "ec2",
        "CreateRoute",
        renames={"egressOnlyGatewayId": "EgressOnlyInternetGatewayId"},
        rules=(rules.cidrs("destinationCidrBlock", (0, 32)),),
    ),
    "aws:autoscaling/tag:Tag": AwsTarget(
        "autoscaling",
        "CreateOrUpdateTags",
        provider_required=("tag.value", "tag.propagateAtLaunch"),
        reshape=rules.asg_tag_request,
        rules=(rules.asg_tag_key,),
    ),
}


# --------------------------------------------------------------------------- checking resources


def _issues(target: AwsTarget, inputs: dict[str, Any]) -> list[Issue]:
    """Every issue of a mapped resource's inputs: documents, the provider's required inputs,
    the service's rules, the request against the model, and the tags."""
    inputs = {k: v for k, v in inputs.items() if v is not None}
    issues = [*_document_issues(target, inputs), *_provider_required(target.provider_required, inputs)]
    for rule in target.rules:
        issues += rule(inputs)
    for name in target.documents:  # the API takes a policy document as a JSON string
        if isinstance(inputs.get(name), (dict, list)):
            inputs[name] = json.dumps(inputs[name])
    walker = RequestWalker(target)
    walker.structure(target.reshape(inputs) if target.reshape else inputs, walker.main, "")
    return issues + walker.issues + list(_tag_issues(inputs.get("tags")))


def _finding(resource: RecordedResource, issue: Issue) -> Finding:
    return Finding(CHECK, issue.severity, resource.label, issue.path, issue.value, f"{issue.expected} [{issue.source}]")


def check_resource(resource: RecordedResource) -> list[Finding]:
    """Every finding of one recorded resource: an aws:* type mapped in TARGETS is checked
    against its botocore operation; any other aws:* type is an error unless UNCHECKED (its
    tags are still checked). Resources of other providers have none."""
    if not resource.type.startswith(_PREFIX):
        return []
    target = TARGETS.get(resource.type)
    if target is not None:
        return [_finding(resource, issue) for issue in _issues(target, resource.inputs)]
    findings = [_finding(resource, issue) for issue in _tag_issues(resource.inputs.get("tags"))]
    if resource.type in dict(UNCHECKED):
        return findings
    unmapped = Finding.error(
        CHECK,
        resource,
        "<type>",
        resource.type,
        "a type mapped to a botocore operation in lab/plan/aws_api.py TARGETS (unchecked resources are not allowed)",
    )
    return [unmapped, *findings]


def applies(plan: Plan) -> bool:
    """True when the plan declares any aws:* custom resource."""
    return bool(custom_resources(plan, _PREFIX))


def aws_conformance(plan: Plan) -> Iterable[Finding]:
    """pulumi_aws inputs against the botocore models of the AWS API requests they become; tags against AWS's rules"""
    for resource in custom_resources(plan, _PREFIX):
        yield from check_resource(resource)
