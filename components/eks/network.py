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
from typing import Any

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
    net = aws.ec2.Vpc(
        f"{name}-vpc",
        cidr_block=args.vpc_cidr,
        enable_dns_hostnames=True,  # EKS nodes register by DNS name
        enable_dns_support=True,
        tags={**tags, "Name": f"{args.cluster_name}-vpc"},
        opts=here,
    )
    igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=net.id, tags=dict(tags), opts=here)
    public_rt = _routed_table(f"{name}-public", net, tags, here, gateway_id=igw.id)
    private_cidrs, public_cidrs = subnet_cidrs(args.vpc_cidr, args.availability_zone_count)
    subnets = _Subnets(name, args.cluster_name, net, zones, tags, here)
    public_subnets = subnets.declare("public", public_cidrs, public_rt, "elb", map_public_ip_on_launch=True)
    eip = aws.ec2.Eip(f"{name}-nat", domain="vpc", tags=dict(tags), opts=here)
    nat = aws.ec2.NatGateway(
        f"{name}-nat",
        allocation_id=eip.id,
        subnet_id=public_subnets[0].id,
        connectivity_type="public",
        tags=dict(tags),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[igw]),
    )
    private_rt = _routed_table(f"{name}-private", net, tags, here, nat_gateway_id=nat.id)
    aws.ec2.VpcEndpoint(
        f"{name}-s3",
        vpc_id=net.id,
        service_name=s3_service(args.region),
        vpc_endpoint_type=GATEWAY_ENDPOINT,
        route_table_ids=[private_rt.id],
        tags=dict(tags),
        opts=here,
    )
    private_subnets = subnets.declare("private", private_cidrs, private_rt, "internal-elb")
    return Network(net.id, [s.id for s in private_subnets], [s.id for s in public_subnets])


def _routed_table(
    name: str, net: aws.ec2.Vpc, tags: Mapping[str, str], here: pulumi.ResourceOptions, **target: pulumi.Input[str]
) -> aws.ec2.RouteTable:
    """A route table whose default route (0.0.0.0/0) goes to `target` (a gateway, a NAT)."""
    table = aws.ec2.RouteTable(name, vpc_id=net.id, tags=dict(tags), opts=here)
    aws.ec2.Route(f"{name}-default", route_table_id=table.id, destination_cidr_block="0.0.0.0/0", **target, opts=here)
    return table


@dataclass(frozen=True)
class _Subnets:
    """Declares the VPC's subnets of one kind, one per zone, each associated with its route table."""

    name: str
    cluster_name: str
    net: aws.ec2.Vpc
    zones: pulumi.Output[list[str]]
    tags: Mapping[str, str]
    here: pulumi.ResourceOptions

    def declare(
        self, kind: str, cidrs: list[str], table: aws.ec2.RouteTable, elb_role: str, **extra: Any
    ) -> list[aws.ec2.Subnet]:
        """`kind` ("public", "private") subnets, tagged for the load balancers of `elb_role`
        (`kubernetes.io/role/<elb_role>`) and for the cluster."""
        subnets = []
        for i, cidr in enumerate(cidrs):
            subnet = aws.ec2.Subnet(
                f"{self.name}-{kind}-{i}",
                vpc_id=self.net.id,
                cidr_block=cidr,
                availability_zone=self.zones[i],
                **extra,
                tags={
                    **self.tags,
                    f"kubernetes.io/cluster/{self.cluster_name}": "shared",
                    f"kubernetes.io/role/{elb_role}": "1",
                    "Name": f"{self.cluster_name}-{kind}-{i}",
                },
                opts=self.here,
            )
            aws.ec2.RouteTableAssociation(
                f"{self.name}-{kind}-{i}", subnet_id=subnet.id, route_table_id=table.id, opts=self.here
            )
            subnets.append(subnet)
        return subnets
