"""Pulumi components of elastic-spot-lab.

  labels.py        cloud-neutral pool labels and taints (shared by clusters and the platform)
  config.py        typed, validated stack config (`elastic-spot-lab:<key>`)
  cluster_info.py  ClusterInfo: what a cluster hands to the platform
  program.py       composes the stack's components (the Pulumi program's body)
  aks/             the AKS cluster component
"""
