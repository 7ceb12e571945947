"""Versions shared by the cluster components and the platform (imports nothing).

DEFAULT_KUBERNETES_VERSION is the Kubernetes version a stack gets when it does not set
`elastic-spot-lab:kubernetesVersion`: the AKS cluster is created at it, and the offline
checks should validate against its schemas. Use this constant (also importable as
`components.config.DEFAULT_KUBERNETES_VERSION`, or `StackConfig.kubernetes_version`),
never a literal, so the cluster and the checks cannot drift apart.
"""

DEFAULT_KUBERNETES_VERSION = "1.35"
