"""Teardown on AWS: load balancers, target groups, ENIs, PVC volumes and controller security
groups tagged for the stack's cluster in its VPC; the stack's image repository with its images;
the checkpoint bucket only when asked."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from lab.cluster.aws_requests import AwsRequests, Refused
from lab.cluster.eviction import ApiCall
from lab.cluster.polling import Poll
from lab.cluster.teardown.base import GONE, Leftover, Recorded, TeardownError, _delete_all, _planned
from lab.vocab import aws_tags

if TYPE_CHECKING:
    import boto3.session


LOAD_BALANCER = "load-balancer"
CLASSIC_LOAD_BALANCER = "classic-load-balancer"
TARGET_GROUP = "target-group"
NETWORK_INTERFACE = "network-interface"
VOLUME = "volume"
SECURITY_GROUP = "security-group"
REPOSITORY = "repository"
BUCKET = "bucket"

# Our stack's tag, the Kubernetes cluster tag (the key names the cluster), and the tags the
# AWS Load Balancer Controller, the VPC CNI and the EBS CSI driver put on what they make.
AWS_CLUSTER_TAG = aws_tags.CLUSTER_TAG
K8S_CLUSTER_TAG_PREFIX = "kubernetes.io/cluster/"
LBC_CLUSTER_TAG = "elbv2.k8s.aws/cluster"
CNI_CLUSTER_TAG = "cluster.k8s.amazonaws.com/name"
LEGACY_CLUSTER_TAG = "KubernetesCluster"
EBS_PVC_NAME_TAG = "kubernetes.io/created-for/pvc/name"
EBS_PVC_NAMESPACE_TAG = "kubernetes.io/created-for/pvc/namespace"
CNI_DESCRIPTION_PREFIX = "aws-K8S-"
CLASSIC_ELB_GROUP_PREFIX = "k8s-elb-"
# Tags whose value is a cluster's name.
_VALUED_CLUSTER_TAGS = (
    AWS_CLUSTER_TAG,
    LBC_CLUSTER_TAG,
    CNI_CLUSTER_TAG,
    LEGACY_CLUSTER_TAG,
    aws_tags.EKS_CLUSTER_NAME_TAG,
)

# Error codes meaning a deletion's target is already gone.
_AWS_GONE = {
    CLASSIC_LOAD_BALANCER: ("LoadBalancerNotFound", "AccessPointNotFound"),
    LOAD_BALANCER: ("LoadBalancerNotFound",),
    TARGET_GROUP: ("TargetGroupNotFound",),
    NETWORK_INTERFACE: ("InvalidNetworkInterfaceID.NotFound",),
    VOLUME: ("InvalidVolume.NotFound",),
    SECURITY_GROUP: ("InvalidGroup.NotFound",),
    REPOSITORY: ("RepositoryNotFoundException",),
    BUCKET: ("NoSuchBucket",),
}
# How each kind (but the bucket, emptied first) is deleted: the API, the operation, and the
# parameter that names the item.
_DELETIONS = {
    CLASSIC_LOAD_BALANCER: ("aws elb", "delete_load_balancer", "LoadBalancerName"),
    LOAD_BALANCER: ("aws elbv2", "delete_load_balancer", "LoadBalancerArn"),
    TARGET_GROUP: ("aws elbv2", "delete_target_group", "TargetGroupArn"),
    NETWORK_INTERFACE: ("aws ec2", "delete_network_interface", "NetworkInterfaceId"),
    VOLUME: ("aws ec2", "delete_volume", "VolumeId"),
    SECURITY_GROUP: ("aws ec2", "delete_security_group", "GroupId"),
    REPOSITORY: ("aws ecr", "delete_repository", "repositoryName"),
}
# Error codes meaning "not yet": something being deleted still uses it.
_AWS_BUSY = {TARGET_GROUP: ("ResourceInUse",), SECURITY_GROUP: ("DependencyViolation",)}


def _aws_tags(tags: Iterable[Mapping[str, str]] | None) -> dict[str, str]:
    """AWS's [{Key, Value}] tag list as a mapping."""
    return {t["Key"]: t.get("Value", "") for t in tags or []}


T = TypeVar("T")


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class AwsSweep(Recorded):
    """An EKS stack's leftovers in AWS (a `Sweep`).

    `region`, `cluster_name`, `vpc_id` and `checkpoint_bucket` are the stack's outputs
    (region, clusterName, vpcId, checkpointBucket). A resource counts as the cluster's when a
    cluster tag names this cluster (`kubernetes.io/cluster/<cluster>`, or one of
    `elastic-spot-lab-cluster`, `elbv2.k8s.aws/cluster`, `cluster.k8s.amazonaws.com/name`,
    `KubernetesCluster`, `eks:cluster-name` valued with it) and none names another; an ENI
    also when it is the VPC CNI's (description `aws-K8S-...`) in the stack's VPC. Load
    balancers, target groups, ENIs and security groups must be in the stack's VPC. Only EBS
    volumes of PVCs that are `available` and ENIs that are `available` are deleted. The
    stack's image repository (`image_registry`, the stack's imageRegistry output: an ECR
    repository URL) is deleted with its images (DeleteRepository with force) when it carries the
    stack's cluster tag: ECR refuses a plain delete of a repository holding images
    (RepositoryNotEmptyException), so a `pulumi destroy` of a stack made without force_delete
    fails there, and once the sweep took it, the destroy's own delete finds it gone, which
    pulumi_aws counts as deleted. The checkpoint bucket is deleted (emptied of every version
    first) only with `keep_checkpoints=False` and when it carries the stack's cluster tag.

    `clients` maps a service name (elbv2, elb, ec2, ecr, s3) to a botocore client used instead of
    one of the lazily made session (tests hand in stubbed or moto clients). A security group
    or target group still used by a load balancer being deleted is retried every `poll_s`
    for up to `busy_timeout_s`."""

    name = "aws"
    ORDER = (
        CLASSIC_LOAD_BALANCER,
        LOAD_BALANCER,
        TARGET_GROUP,
        NETWORK_INTERFACE,
        VOLUME,
        SECURITY_GROUP,
        REPOSITORY,
        BUCKET,
    )

    def __init__(
        self,
        region: str,
        cluster_name: str,
        vpc_id: str | None,
        clients: Mapping[str, Any] | None = None,
        keep_checkpoints: bool = True,
        *,
        checkpoint_bucket: str | None = None,
        image_registry: str | None = None,
        session: boto3.session.Session | None = None,
        busy_timeout_s: float = 300.0,
        poll_s: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.region = region
        self.cluster_name = cluster_name
        self.vpc_id = vpc_id
        self.keep_checkpoints = keep_checkpoints
        self.checkpoint_bucket = checkpoint_bucket
        # The repository's name: the URL's path (<account>.dkr.ecr.<region>.amazonaws.com/<name>).
        self.repository = (image_registry or "").partition("/")[2] or None
        self.busy_timeout_s = busy_timeout_s
        self._aws = AwsRequests(region, TeardownError, session, clients)
        self._poll = Poll(poll_s, sleep, clock)
        super().__init__()

    # ------------------------------------------------------------------ the Sweep protocol
    def _look(self) -> list[Leftover]:
        found = [*self._find_load_balancers(), *self._find_target_groups(), *self._find_classic_load_balancers()]
        if self.vpc_id:
            found += self._find_network_interfaces()
        else:
            self.notes.append("no VPC given: network interfaces and security groups were not looked for")
        found += self._find_volumes()
        if self.vpc_id:
            found += self._find_security_groups()
        found += self._find_repository()
        found += self._find_bucket()
        return found

    def delete(self, items: Sequence[Leftover]) -> list[str]:
        def delete_one(item: Leftover) -> bool:
            if item.kind == BUCKET:
                return self._delete_bucket(item.id)
            call = self._delete_call(item)
            service = call.api.removeprefix("aws ")
            busy: list[Refused] = []

            def deleted() -> bool | None:
                result = self._request(
                    service, call.operation, gone=_AWS_GONE[item.kind], busy=_AWS_BUSY.get(item.kind, ()), **call.params
                )
                if isinstance(result, Refused):
                    busy.append(result)
                    return None
                return result is GONE

            gone = self._poll.until(deleted, self.busy_timeout_s)
            if gone is None:
                raise TeardownError(
                    f"{call} still failed with {busy[-1].code} after {self.busy_timeout_s:g} s ({busy[-1].message}); "
                    "something outside this sweep still uses it"
                )
            return gone

        return _delete_all(self.name, items, self.ORDER, delete_one)

    def calls(self) -> list[ApiCall]:
        vpc = self._vpc_filter()
        out = [
            ApiCall("aws elbv2", "describe_load_balancers", {}, reads_only=True),
            ApiCall("aws elbv2", "describe_tags", {"ResourceArns": ["<load balancers in the VPC>"]}, reads_only=True),
            ApiCall("aws elbv2", "describe_target_groups", {}, reads_only=True),
            ApiCall("aws elbv2", "describe_tags", {"ResourceArns": ["<target groups in the VPC>"]}, reads_only=True),
            ApiCall("aws elb", "describe_load_balancers", {}, reads_only=True),
            ApiCall(
                "aws elb", "describe_tags", {"LoadBalancerNames": ["<load balancers in the VPC>"]}, reads_only=True
            ),
        ]
        if self.vpc_id:
            out.append(ApiCall("aws ec2", "describe_network_interfaces", {"Filters": vpc}, reads_only=True))
        out.append(ApiCall("aws ec2", "describe_volumes", {"Filters": self._volume_filter()}, reads_only=True))
        if self.vpc_id:
            out.append(ApiCall("aws ec2", "describe_security_groups", {"Filters": vpc}, reads_only=True))
        if self.repository:
            named = {"repositoryNames": [self.repository]}
            out.append(ApiCall("aws ecr", "describe_repositories", named, reads_only=True))
            out.append(ApiCall("aws ecr", "list_tags_for_resource", {"resourceArn": "<its ARN>"}, reads_only=True))
        if self.checkpoint_bucket and not self.keep_checkpoints:
            out.append(ApiCall("aws s3", "get_bucket_tagging", {"Bucket": self.checkpoint_bucket}, reads_only=True))
        placeholders = {
            CLASSIC_LOAD_BALANCER: "<each classic load balancer found>",
            LOAD_BALANCER: "<each load balancer found>",
            TARGET_GROUP: "<each target group found>",
            NETWORK_INTERFACE: "<each network interface found>",
            VOLUME: "<each volume found>",
            SECURITY_GROUP: "<each security group found>",
        }
        if self.repository:
            placeholders[REPOSITORY] = self.repository
        for kind, placeholder in placeholders.items():
            out += [self._delete_call(item) for item in _planned(self._found, kind, placeholder)]
        buckets = [] if self.keep_checkpoints or not self.checkpoint_bucket else [self.checkpoint_bucket]
        if self._found is not None:
            buckets = [i.id for i in self._found if i.kind == BUCKET]
        for bucket in buckets:
            out += [
                ApiCall("aws s3", "list_object_versions", {"Bucket": bucket}, reads_only=True),
                ApiCall("aws s3", "delete_objects", {"Bucket": bucket, "Delete": "<every version and delete marker>"}),
                ApiCall("aws s3", "delete_bucket", {"Bucket": bucket}),
            ]
        return out

    # ------------------------------------------------------------------ tags
    def _verdict(self, tags: Mapping[str, str]) -> tuple[bool | None, str]:
        """(True, the tag) when the tags name this cluster and no other; (False, the tag) when
        one names another cluster; (None, '') when none names a cluster."""
        mine: list[str] = []
        for key, value in tags.items():
            if key.startswith(K8S_CLUSTER_TAG_PREFIX):
                if key != K8S_CLUSTER_TAG_PREFIX + self.cluster_name:
                    return False, key
                mine.append(f"{key}={value}" if value else key)
            elif key in _VALUED_CLUSTER_TAGS:
                if value != self.cluster_name:
                    return False, f"{key}={value}"
                mine.append(f"{key}={value}")
        return (True, ", ".join(mine)) if mine else (None, "")

    def _mine(
        self, items: Iterable[Mapping[str, Any]], tags_key: str
    ) -> Iterator[tuple[Mapping[str, Any], dict[str, str], str]]:
        """(item, its tags, the tag that names this cluster) of the items whose tags (under
        `tags_key`) name this cluster and no other; the others (untagged: whose are they? or
        another cluster's) are passed over."""
        for item in items:
            tags = _aws_tags(item.get(tags_key))
            mine, tag = self._verdict(tags)
            if mine:
                yield item, tags, tag

    def _where(self, vpc: bool = True) -> str:
        return f"{self.region}, {self.vpc_id}" if vpc and self.vpc_id else self.region

    def _in_vpc(self, vpc_id: str | None) -> bool:
        return self.vpc_id is None or vpc_id == self.vpc_id

    # ------------------------------------------------------------------ what is found
    def _find_load_balancers(self) -> list[Leftover]:
        return self._find_elbv2(LOAD_BALANCER, "describe_load_balancers", "LoadBalancers", "LoadBalancerArn")

    def _find_target_groups(self) -> list[Leftover]:
        return self._find_elbv2(TARGET_GROUP, "describe_target_groups", "TargetGroups", "TargetGroupArn")

    def _find_elbv2(self, kind: str, operation: str, key: str, arn_key: str) -> list[Leftover]:
        """The load balancers or target groups (`kind`) in the stack's VPC tagged for this cluster."""
        listed = self._pages("elbv2", operation, key)
        arns = [each[arn_key] for each in listed if self._in_vpc(each.get("VpcId"))]
        found = []
        for arn, tags in self._elbv2_tags(arns).items():
            mine, tag = self._verdict(tags)
            if mine:
                found.append(Leftover(kind, arn, self._where(), f"tagged {tag}"))
        return found

    def _elbv2_tags(self, arns: Sequence[str]) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for chunk in _chunks(arns, 20):  # DescribeTags takes at most 20 ARNs
            reply = self._request("elbv2", "describe_tags", ResourceArns=list(chunk))
            for description in reply.get("TagDescriptions", []):
                out[description["ResourceArn"]] = _aws_tags(description.get("Tags"))
        return out

    def _find_classic_load_balancers(self) -> list[Leftover]:
        balancers = self._pages("elb", "describe_load_balancers", "LoadBalancerDescriptions")
        names = [b["LoadBalancerName"] for b in balancers if self._in_vpc(b.get("VPCId"))]
        found = []
        for chunk in _chunks(names, 20):
            reply = self._request("elb", "describe_tags", LoadBalancerNames=list(chunk))
            for description, _, tag in self._mine(reply.get("TagDescriptions", []), "Tags"):
                name = description["LoadBalancerName"]
                found.append(Leftover(CLASSIC_LOAD_BALANCER, name, self._where(), f"tagged {tag}"))
        return found

    def _find_network_interfaces(self) -> list[Leftover]:
        interfaces = self._pages("ec2", "describe_network_interfaces", "NetworkInterfaces", Filters=self._vpc_filter())
        found = []
        for eni in interfaces:
            if eni.get("Status") != "available":
                continue  # attached: it goes with what it is attached to
            mine, tag = self._verdict(_aws_tags(eni.get("TagSet")))
            description = eni.get("Description") or ""
            if mine:
                reason = f"tagged {tag}, attached to nothing"
            elif mine is None and description.startswith(CNI_DESCRIPTION_PREFIX):
                reason = f"the VPC CNI's ({description!r}), attached to nothing"
            else:
                continue  # another cluster's, or nobody's we know
            found.append(Leftover(NETWORK_INTERFACE, eni["NetworkInterfaceId"], self._where(), reason))
        return found

    def _find_volumes(self) -> list[Leftover]:
        volumes = self._pages("ec2", "describe_volumes", "Volumes", Filters=self._volume_filter())
        found = []
        for volume, tags, tag in self._mine(volumes, "Tags"):
            namespace = tags.get(EBS_PVC_NAMESPACE_TAG)
            claim = f"{namespace + '/' if namespace else ''}{tags.get(EBS_PVC_NAME_TAG, '?')}"
            leftover = Leftover(
                VOLUME, volume["VolumeId"], self._where(vpc=False), f"PVC {claim}'s volume, tagged {tag}"
            )
            if volume.get("State") != "available":
                users = ", ".join(a.get("InstanceId", "?") for a in volume.get("Attachments") or []) or "?"
                self.kept.append(
                    Leftover(
                        VOLUME,
                        volume["VolumeId"],
                        leftover.where,
                        f"{leftover.reason}, but {volume.get('State')} ({users})",
                    )
                )
                continue
            found.append(leftover)
        return found

    def _find_security_groups(self) -> list[Leftover]:
        groups = self._pages("ec2", "describe_security_groups", "SecurityGroups", Filters=self._vpc_filter())
        found = []
        for group, tags, tag in self._mine(groups, "Tags"):
            if group.get("GroupName") == "default":
                continue
            if tags.get(LBC_CLUSTER_TAG) == self.cluster_name:
                reason = f"made by the AWS Load Balancer Controller, tagged {tag}"
            elif group.get("GroupName", "").startswith(CLASSIC_ELB_GROUP_PREFIX):
                reason = f"made by the Kubernetes service controller for a load balancer, tagged {tag}"
            else:
                continue  # the cluster's own groups go with the cluster (Pulumi's or EKS's)
            found.append(
                Leftover(SECURITY_GROUP, group["GroupId"], self._where(), f"{reason} ({group.get('GroupName')})")
            )
        return found

    def _find_repository(self) -> list[Leftover]:
        """The stack's image repository, when it is still there and tagged for this cluster."""
        if not self.repository:
            return []
        gone = _AWS_GONE[REPOSITORY]
        reply = self._request("ecr", "describe_repositories", gone=gone, repositoryNames=[self.repository])
        if reply is GONE or not reply.get("repositories"):
            return []
        arn = reply["repositories"][0]["repositoryArn"]
        listed = self._request("ecr", "list_tags_for_resource", gone=gone, resourceArn=arn)
        if listed is GONE:
            return []
        owner = _aws_tags(listed.get("tags")).get(AWS_CLUSTER_TAG)
        if owner != self.cluster_name:
            self.kept.append(
                Leftover(
                    REPOSITORY,
                    self.repository,
                    self.region,
                    f"it carries {AWS_CLUSTER_TAG}={owner!r}, not {self.cluster_name!r}: not this stack's to delete",
                )
            )
            return []
        return [
            Leftover(
                REPOSITORY,
                self.repository,
                self.region,
                f"the training image's repository, tagged {AWS_CLUSTER_TAG}={self.cluster_name}: deleted with its "
                "images (ECR refuses to delete a repository holding images otherwise)",
            )
        ]

    def _find_bucket(self) -> list[Leftover]:
        bucket = self.checkpoint_bucket
        if not bucket:
            return []
        if self.keep_checkpoints:
            self.kept.append(Leftover(BUCKET, bucket, self.region, "the checkpoint bucket: kept with the checkpoints"))
            return []
        # An untagged bucket answers NoSuchTagSet: it is kept below, as one of another stack's.
        untagged: dict[str, Any] = {"NoSuchTagSet": {"TagSet": []}}
        reply = self._request("s3", "get_bucket_tagging", gone=("NoSuchBucket",), instead=untagged, Bucket=bucket)
        if reply is GONE:
            return []
        tags = _aws_tags(reply.get("TagSet"))
        if tags.get(AWS_CLUSTER_TAG) != self.cluster_name:
            self.kept.append(
                Leftover(
                    BUCKET,
                    bucket,
                    self.region,
                    f"it carries {AWS_CLUSTER_TAG}={tags.get(AWS_CLUSTER_TAG)!r}, not {self.cluster_name!r}: not this "
                    "stack's to delete",
                )
            )
            return []
        return [
            Leftover(
                BUCKET, bucket, self.region, f"the checkpoint bucket, tagged {AWS_CLUSTER_TAG}={self.cluster_name}"
            )
        ]

    def _delete_bucket(self, bucket: str) -> bool:
        """Delete every object version and delete marker (the bucket is versioned), then the bucket."""
        versions = self._pages("s3", "list_object_versions", None, gone=("NoSuchBucket",), Bucket=bucket)
        if versions is GONE:
            return True
        keys = [{"Key": v["Key"], "VersionId": v["VersionId"]} for v in versions]
        for chunk in _chunks(keys, 1000):  # DeleteObjects takes at most 1000 keys
            reply = self._request("s3", "delete_objects", Bucket=bucket, Delete={"Objects": list(chunk), "Quiet": True})
            errors = reply.get("Errors") or []
            if errors:
                first = errors[0]
                raise TeardownError(
                    f"aws s3 delete_objects on {bucket} failed for {len(errors)} object(s), e.g. {first.get('Key')}: "
                    f"{first.get('Code')} {first.get('Message', '')}".rstrip()
                )
        return self._request("s3", "delete_bucket", gone=("NoSuchBucket",), Bucket=bucket) is GONE

    # ------------------------------------------------------------------ the requests
    def _vpc_filter(self) -> list[dict[str, Any]]:
        return [{"Name": "vpc-id", "Values": [self.vpc_id]}]

    @staticmethod
    def _volume_filter() -> list[dict[str, Any]]:
        return [{"Name": "tag-key", "Values": [EBS_PVC_NAME_TAG]}]

    def _delete_call(self, item: Leftover) -> ApiCall:
        if item.kind not in _DELETIONS:
            raise TeardownError(f"the aws sweep deletes {', '.join(self.ORDER)}, not {item.kind}")
        api, operation, key = _DELETIONS[item.kind]
        # ECR refuses to delete a repository holding images without force.
        forced = {"force": True} if item.kind == REPOSITORY else {}
        return ApiCall(api, operation, {key: item.id, **forced})

    def _pages(self, service: str, operation: str, key: str | None, *, gone: Sequence[str] = (), **params: Any) -> Any:
        """Every item of a paginated listing under `key` (None: S3's versions and delete markers)."""

        def collect(client: Any) -> list[Any]:
            out: list[Any] = []
            for page in client.get_paginator(operation).paginate(**params):
                if key is None:
                    out += [*page.get("Versions", []), *page.get("DeleteMarkers", [])]
                else:
                    out += page.get(key, [])
            return out

        return self._guarded(service, operation, collect, gone=gone, params=params)

    def _request(
        self,
        service: str,
        operation: str,
        *,
        gone: Sequence[str] = (),
        busy: Sequence[str] = (),
        instead: Mapping[str, Any] | None = None,
        **params: Any,
    ) -> Any:
        return self._guarded(
            service,
            operation,
            lambda c: getattr(c, operation)(**params),
            gone=gone,
            busy=busy,
            instead=instead,
            params=params,
        )

    def _guarded(
        self,
        service: str,
        operation: str,
        request: Callable[[Any], Any],
        *,
        gone: Sequence[str] = (),
        busy: Sequence[str] = (),
        instead: Mapping[str, Any] | None = None,
        params: Mapping[str, Any],
    ) -> Any:
        """One request; GONE for the `gone` error codes, a `Refused` for the `busy` ones (the
        resource is still in use), the answer `instead` gives for its codes, and every other
        failure a TeardownError naming the request and what to do."""
        answer = self._aws.send(
            service,
            operation,
            request,
            named=str(ApiCall(f"aws {service}", operation, params)),
            expected={*gone, *busy, *(instead or {})},
        )
        if not isinstance(answer, Refused):
            return answer
        if answer.code in gone:
            return GONE
        if answer.code in busy:
            return answer  # still in use: the caller may look again
        return (instead or {})[answer.code]
