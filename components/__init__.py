"""Pulumi components of elastic-spot-lab. They import nothing of the project but `lab.vocab`.

aks/              the AKS cluster component
eks/              the EKS cluster component
byo/              an existing cluster, reached through its kubeconfig
cluster_info.py   ClusterInfo: what a cluster component hands the platform (the typed seam)
platform/         the training platform, on any cluster's ClusterInfo
capacity.py       the cluster autoscaler's priority expander over the GPU capacity ranks
charts.py         our Helm charts as the components hand them to Helm
field_problems.py what the clusters' args share: config keys, problems naming a field, checks
config.py         the stack config (`elastic-spot-lab:<key>`), every problem at once
program.py        the Pulumi program's body: config -> cluster -> platform -> exports
"""
