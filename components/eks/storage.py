"""Checkpoint storage on EKS: an S3 bucket outside the cluster, mounted by the Mountpoint for
S3 CSI driver (an EKS add-on) with a Pod Identity role limited to that bucket, or written by
the jobs' own S3 clients with a Pod Identity role of their own, limited the same way.

The bucket is versioned (a checkpoint deleted or overwritten by mistake can be recovered),
encrypted (SSE-S3), closed to the public, and kept on `pulumi destroy` unless the stack says
otherwise. Its lifecycle expires what versioning keeps once it is NONCURRENT_DAYS old, and the
parts of multipart uploads never completed (a save a spot eviction cut short): S3 bills both
until they are deleted, and nothing else deletes them. Mountpoint cannot rename: jobs write each
checkpoint once (write-once mode).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import pulumi
import pulumi_aws as aws

from components.eks import iam
from components.eks.args import EksClusterArgs

# The Mountpoint driver's node service account (the add-on creates it).
S3_CSI_SERVICE_ACCOUNT = "s3-csi-driver-sa"
# How long a pruned or overwritten checkpoint stays recoverable. Jobs prune every save but the
# newest few, and each pruned save becomes a noncurrent version (1.36 GB at real size), billed
# until it expires: three days cover a weekend to notice a mistaken deletion, and bound what
# versioning costs to three days of saves instead of every save ever made.
NONCURRENT_DAYS = 3
# An upload not completed after this long is one whose writer is gone (S3's smallest value).
ABORT_UPLOADS_AFTER_DAYS = 1


def bucket_policy(bucket_arn: str) -> str:
    """What the driver may do: list the bucket; read, write and delete its objects (pruning
    old checkpoints); nothing on any other bucket."""
    return iam.policy(
        [
            {"Sid": "ListCheckpoints", "Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": bucket_arn},
            {
                "Sid": "ReadWriteCheckpoints",
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload", "s3:DeleteObject"],
                "Resource": f"{bucket_arn}/*",
            },
        ]
    )


def checkpoint_bucket(
    name: str, args: EksClusterArgs, *, tags: Mapping[str, str], parent: pulumi.Resource
) -> tuple[aws.s3.Bucket, list[pulumi.Resource]]:
    """The bucket and its settings (versioning, encryption, public access block, lifecycle)."""
    keep = args.keeps_checkpoints
    # A bucket a destroy kept is taken back (with its settings) under the same parent and name.
    adopted = args.adopt_checkpoints.get("bucket")
    named = adopted or args.checkpoint_bucket
    bucket = aws.s3.Bucket(
        name,
        bucket=named,
        # Unique across AWS when the stack names none: the cluster name and a random suffix.
        bucket_prefix=None if named else f"{args.cluster_name.lower()[:30]}-ckpt-",
        force_destroy=not keep,
        tags=dict(tags),
        opts=pulumi.ResourceOptions(parent=parent, retain_on_delete=keep, import_=adopted),
    )
    here = pulumi.ResourceOptions(parent=parent, retain_on_delete=keep, import_=adopted)
    settings: list[pulumi.Resource] = [
        aws.s3.BucketVersioning(
            f"{name}-versioning", bucket=bucket.id, versioning_configuration={"status": "Enabled"}, opts=here
        ),
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-encryption",
            bucket=bucket.id,
            rules=[{"apply_server_side_encryption_by_default": {"sse_algorithm": "AES256"}}],
            opts=here,
        ),
        aws.s3.BucketPublicAccessBlock(
            f"{name}-public-access",
            bucket=bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=here,
        ),
        aws.s3.BucketLifecycleConfiguration(
            f"{name}-lifecycle",
            bucket=bucket.id,
            rules=[checkpoint_lifecycle_rule()],
            # Kept with a kept bucket (its versions stay bounded while the stack is down), but
            # never imported with it: a bucket kept before the stack had a lifecycle has none to
            # import, and S3's PutBucketLifecycleConfiguration replaces the bucket's whole
            # configuration, so creating it over a kept one is the same as taking it back.
            opts=pulumi.ResourceOptions(parent=parent, retain_on_delete=keep),
        ),
    ]
    return bucket, settings


def checkpoint_lifecycle_rule() -> aws.s3.BucketLifecycleConfigurationRuleArgs:
    """Over the whole bucket (an empty filter): noncurrent versions expire after
    NONCURRENT_DAYS, incomplete multipart uploads are aborted after ABORT_UPLOADS_AFTER_DAYS, and
    a delete marker left with no version behind it is removed (S3 keeps it otherwise, and every
    listing of versions walks it)."""
    return aws.s3.BucketLifecycleConfigurationRuleArgs(
        id="expire-old-checkpoint-versions",
        status="Enabled",
        filter=aws.s3.BucketLifecycleConfigurationRuleFilterArgs(),
        noncurrent_version_expiration=aws.s3.BucketLifecycleConfigurationRuleNoncurrentVersionExpirationArgs(
            noncurrent_days=NONCURRENT_DAYS
        ),
        abort_incomplete_multipart_upload=aws.s3.BucketLifecycleConfigurationRuleAbortIncompleteMultipartUploadArgs(
            days_after_initiation=ABORT_UPLOADS_AFTER_DAYS
        ),
        expiration=aws.s3.BucketLifecycleConfigurationRuleExpirationArgs(expired_object_delete_marker=True),
    )


def training_role(
    name: str,
    bucket: aws.s3.Bucket,
    *,
    cluster: aws.eks.Cluster,
    namespace: str,
    service_account: str,
    tags: Mapping[str, str],
    parent: pulumi.Resource,
    depends_on: list[pulumi.Resource],
) -> tuple[aws.iam.Role, aws.eks.PodIdentityAssociation]:
    """The jobs' own Pod Identity role, limited to the checkpoint bucket, associated with
    their service account: jobs that write checkpoints with their own S3 clients (no
    Mountpoint volume) get its credentials through the Pod Identity agent."""
    return iam.pod_identity(
        name,
        association=f"{name}-identity",
        cluster=cluster,
        namespace=namespace,
        service_account=service_account,
        inline={"checkpoint-bucket": bucket.arn.apply(bucket_policy)},
        tags=tags,
        parent=parent,
        depends_on=depends_on,
    )


def driver_role(
    name: str, bucket: aws.s3.Bucket, *, tags: Mapping[str, str], parent: pulumi.Resource
) -> tuple[aws.iam.Role, list[pulumi.Resource]]:
    """The Pod Identity role of the Mountpoint driver, limited to the checkpoint bucket."""
    return iam.role(
        name,
        service=iam.POD_IDENTITY_SERVICE,
        inline={"checkpoint-bucket": bucket.arn.apply(bucket_policy)},
        tags=tags,
        parent=parent,
    )


def team_association(
    name: str, role: aws.iam.Role, *, cluster: aws.eks.Cluster, tags: Mapping[str, str], parent: pulumi.Resource
) -> Callable[[str, str, str, Sequence[pulumi.Resource]], pulumi.Resource]:
    """The jobs' role for one more service account (a team's): a Pod Identity association of
    its namespace and name with the same role, so the team's own S3 clients write checkpoints."""

    def trust(team: str, namespace: str, service_account: str, after: Sequence[pulumi.Resource]) -> pulumi.Resource:
        return aws.eks.PodIdentityAssociation(
            f"{name}-{team}-identity",
            cluster_name=cluster.name,
            namespace=namespace,
            service_account=service_account,
            role_arn=role.arn,
            tags=dict(tags),
            opts=pulumi.ResourceOptions(parent=parent, depends_on=list(after)),
        )

    return trust
