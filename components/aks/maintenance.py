"""Planned maintenance: when AKS may upgrade the cluster and reimage its nodes.

Every upgrade drains and replaces nodes: on the CPU pool that restarts the etcd rendezvous
and the training operator, on the GPU pool it stops workers. Left without a window, the
auto-upgrade channels run whenever AKS schedules them (node images weekly). AKS reads two
maintenance configurations of fixed names, one per channel; each gets the same weekly
window here (`maintenanceWindow`, 4 to 24 hours, a start time in UTC).
"""

from __future__ import annotations

import pulumi
from pulumi_azure_native import containerservice

from components.aks.args import AksClusterArgs

# The configuration names AKS reads for each channel.
AUTO_UPGRADE_SCHEDULE = "aksManagedAutoUpgradeSchedule"
NODE_OS_UPGRADE_SCHEDULE = "aksManagedNodeOSUpgradeSchedule"


def scheduled_channels(args: AksClusterArgs) -> list[str]:
    """The maintenance configurations the cluster needs: one per channel that upgrades."""
    names = []
    if args.upgrade_channel != "none":
        names.append(AUTO_UPGRADE_SCHEDULE)
    if args.node_os_upgrade_channel not in ("None", "Unmanaged"):
        names.append(NODE_OS_UPGRADE_SCHEDULE)
    return names


def maintenance_windows(
    name: str,
    args: AksClusterArgs,
    *,
    resource_group: pulumi.Input[str],
    cluster: containerservice.ManagedCluster,
    parent: pulumi.Resource,
) -> list[containerservice.MaintenanceConfiguration]:
    """The weekly window for each upgrading channel of `cluster`."""
    window = containerservice.MaintenanceWindowArgs(
        schedule=containerservice.ScheduleArgs(
            weekly=containerservice.WeeklyScheduleArgs(day_of_week=args.maintenance_day, interval_weeks=1)
        ),
        start_time=args.maintenance_start_utc,
        utc_offset="+00:00",
        duration_hours=args.maintenance_hours,
    )
    return [
        containerservice.MaintenanceConfiguration(
            f"{name}-{config}",
            resource_group_name=resource_group,
            resource_name_=cluster.name,
            config_name=config,
            maintenance_window=window,
            opts=pulumi.ResourceOptions(parent=parent),
        )
        for config in scheduled_channels(args)
    ]
