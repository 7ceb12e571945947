"""The EKS stack's VPC: private subnets for the nodes and public ones for load balancers and
one NAT gateway, over `availability_zone_count` zones.

Subnets carry the tags the AWS Load Balancer Controller and the in-tree service controller look
for (`kubernetes.io/role/elb` on public subnets, `kubernetes.io/role/internal-elb` on private).
One NAT gateway keeps the lab cheap; a zone outage cuts the nodes' egress (say so, not hide it).
S3 is reached through a gateway endpoint on the private route table instead: it costs nothing,
while the NAT bills each GB it carries ($0.045 in us-east-1), and the largest transfers are S3's
(ECR serves image layers from S3; the checkpoints live in the stack's bucket, in its region).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.eks.args import EksClusterArgs

# EC2's VpcEndpointType for S3 and DynamoDB's route-table endpoints (no hourly or per-GB charge).
GATEWAY_ENDPOINT = "Gateway"


@dataclass(frozen=True)
class Network:
    vpc_id: pulumi.Input[str]
    private_subnet_ids: list[pulumi.Input[str]]
    public_subnet_ids: list[pulumi.Input[str]]


def subnet_cidrs(vpc_cidr: str, zones: int) -> tuple[list[str], list[str]]:
    """(private, public) CIDRs: the VPC split into 16 blocks; private ones first."""
    blocks = list(ipaddress.ip_network(vpc_cidr).subnets(prefixlen_diff=4))
    return [str(b) for b in blocks[:zones]], [str(b) for b in blocks[zones : 2 * zones]]


def s3_service(region: str) -> str:
    """The VPC endpoint service name of S3 in `region`."""
    return f"com.amazonaws.{region}.s3"


def vpc(name: str, args: EksClusterArgs, *, tags: Mapping[str, str], parent: pulumi.Resource) -> Network:
    """The existing VPC of the config, or a new one."""
    if not args.creates_vpc:
        assert args.existing_vpc_id is not None
        return Network(args.existing_vpc_id, list(args.existing_private_subnet_ids), [])
    here = pulumi.ResourceOptions(parent=parent)
    zones = aws.get_availability_zones_output(state="available", opts=pulumi.InvokeOutputOptions(parent=parent)).names
    cluster_tag = {f"kubernetes.io/cluster/{args.cluster_name}": "shared"}
    net = aws.ec2.Vpc(
        f"{name}-vpc",
        cidr_block=args.vpc_cidr,
        enable_dns_hostnames=True,  # EKS nodes register by DNS name
        enable_dns_support=True,
        tags={**tags, "Name": f"{args.cluster_name}-vpc"},
        opts=here,
    )
    igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=net.id, tags=dict(tags), opts=here)
    public_rt = aws.ec2.RouteTable(f"{name}-public", vpc_id=net.id, tags=dict(tags), opts=here)
    aws.ec2.Route(
        f"{name}-public-default",
        route_table_id=public_rt.id,
        destination_cidr_block="0.0.0.0/0",
        gateway_id=igw.id,
        opts=here,
    )
    private_cidrs, public_cidrs = subnet_cidrs(args.vpc_cidr, args.availability_zone_count)
    private_ids: list[pulumi.Input[str]] = []
    public_ids: list[pulumi.Input[str]] = []
    public_subnets = []
    for i, cidr in enumerate(public_cidrs):
        subnet = aws.ec2.Subnet(
            f"{name}-public-{i}",
            vpc_id=net.id,
            cidr_block=cidr,
            availability_zone=zones[i],
            map_public_ip_on_launch=True,
            tags={**tags, **cluster_tag, "kubernetes.io/role/elb": "1", "Name": f"{args.cluster_name}-public-{i}"},
            opts=here,
        )
        aws.ec2.RouteTableAssociation(f"{name}-public-{i}", subnet_id=subnet.id, route_table_id=public_rt.id, opts=here)
        public_subnets.append(subnet)
        public_ids.append(subnet.id)
    eip = aws.ec2.Eip(f"{name}-nat", domain="vpc", tags=dict(tags), opts=here)
    nat = aws.ec2.NatGateway(
        f"{name}-nat",
        allocation_id=eip.id,
        subnet_id=public_subnets[0].id,
        connectivity_type="public",
        tags=dict(tags),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[igw]),
    )
    private_rt = aws.ec2.RouteTable(f"{name}-private", vpc_id=net.id, tags=dict(tags), opts=here)
    aws.ec2.Route(
        f"{name}-private-default",
        route_table_id=private_rt.id,
        destination_cidr_block="0.0.0.0/0",
        nat_gateway_id=nat.id,
        opts=here,
    )
    aws.ec2.VpcEndpoint(
        f"{name}-s3",
        vpc_id=net.id,
        service_name=s3_service(args.region),
        vpc_endpoint_type=GATEWAY_ENDPOINT,
        route_table_ids=[private_rt.id],
        tags=dict(tags),
        opts=here,
    )
    for i, cidr in enumerate(private_cidrs):
        subnet = aws.ec2.Subnet(
            f"{name}-private-{i}",
            vpc_id=net.id,
            cidr_block=cidr,
            availability_zone=zones[i],
            tags={
                **tags,
                **cluster_tag,
                "kubernetes.io/role/internal-elb": "1",
                "Name": f"{args.cluster_name}-private-{i}",
            },
            opts=here,
        )
        aws.ec2.RouteTableAssociation(
            f"{name}-private-{i}", subnet_id=subnet.id, route_table_id=private_rt.id, opts=here
        )
        private_ids.append(subnet.id)
    return Network(net.id, private_ids, public_ids)
