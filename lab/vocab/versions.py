"""Pinned versions of what the platform installs, and the Kubernetes version of a stack that
sets none. Use these constants, never a literal, so that what is installed and what the
offline checks validate against cannot drift apart."""

from __future__ import annotations

# The Kubernetes version an AKS cluster is created at when `elastic-spot-lab:kubernetesVersion`
# is unset; the offline checks validate against this version's schemas.
DEFAULT_KUBERNETES_VERSION = "1.35"
# The newest Kubernetes minor whose schemas the offline checks carry (kubernetes-validate's
# newest): a stack asking for a newer one is refused, as nothing it declares could be checked.
NEWEST_KUBERNETES_MINOR = 37

# Kubeflow training operator v1: the elastic PyTorchJob (master is Trainer v2, without it).
OPERATOR_VERSION = "v1.9.4"

# NVIDIA device plugin chart.
DEVICE_PLUGIN_VERSION = "0.20.0"
DEVICE_PLUGIN_REPO = "https://nvidia.github.io/k8s-device-plugin"
DEVICE_PLUGIN_CHART = "nvidia-device-plugin"

# etcd 3.5 serves the v2 API torch's etcd rendezvous speaks; 3.6 removed it.
ETCD_IMAGE = "quay.io/coreos/etcd"
ETCD_TAG = "v3.5.20"

# The project's image (Dockerfile): training jobs and the spot-notice handler run from it.
PROJECT_IMAGE = "ghcr.io/elastic-spot-lab/trainer"
PROJECT_IMAGE_TAG = "0.1.0"

# The trainer image's torch (Dockerfile) is PyPI's 2.13.0, a CUDA 13 build: it needs an NVIDIA
# driver >= 580 and has no kernels for GPUs before Turing (compute capability 7.5: T4, A10, A100,
# L4, H100 and later run it; V100, P100, M60, K80 do not).
TORCH_CUDA_BUILD = "torch 2.13.0 (a CUDA 13 build)"
MIN_GPU_ARCHITECTURE = "Turing (sm_75)"

# Cluster Autoscaler chart (EKS stack), per Kubernetes minor: (chart version, its appVersion). The
# image must be the chart's appVersion: from 1.33 the autoscaler waits for the cache sync of every
# informer it starts, and a chart older than its image lacks the RBAC rules for what the image
# watches (1.35: volumeattachments, resource.k8s.io), so it never scales (kubernetes/autoscaler
# #7663, #8678). Charts 9.54.0-9.59.0 carry appVersion 1.35.0. A minor not listed here has no
# chart we checked: the EKS stack refuses it while its autoscaler is on.
CLUSTER_AUTOSCALER_CHARTS = {"1.35": ("9.54.0", "1.35.0")}
CLUSTER_AUTOSCALER_REPO = "https://kubernetes.github.io/autoscaler"
# The Mountpoint S3 CSI driver's EKS add-on (EKS stack), at least this release: before 2.5.0 its
# per-volume Mountpoint pods lack the `cluster-autoscaler.kubernetes.io/daemonset-pod` annotation,
# and the autoscaler, taking them for singleton pods, never scales a GPU node down (the driver's
# CHANGELOG, 2.5.0). The stack installs the newest add-on release for its Kubernetes minor and
# refuses one older than this.
MOUNTPOINT_S3_CSI_ADDON = "aws-mountpoint-s3-csi-driver"
MOUNTPOINT_S3_CSI_MIN = (2, 5, 0)
# metrics-server's EKS add-on (EKS stack; AKS runs metrics-server itself): the resource metrics API
# (metrics.k8s.io) that an HPA on CPU reads (`submit --autoscale-cpu`). Upstream's 0.8 line is the
# one for Kubernetes 1.31 and newer (its compatibility matrix); the stack installs the newest
# add-on release for its Kubernetes minor and refuses one older than this.
METRICS_SERVER_ADDON = "metrics-server"
METRICS_SERVER_MIN = (0, 8, 0)


def add_on_release(version: object) -> tuple[int, int, int] | None:
    """(major, minor, patch) of an EKS add-on version such as `v2.7.0-eksbuild.1`; None when
    it is not one."""
    numbers = str(version or "").lstrip("v").split("-", 1)[0].split(".")
    if len(numbers) != 3 or not all(n.isdigit() for n in numbers):
        return None
    return int(numbers[0]), int(numbers[1]), int(numbers[2])


CLUSTER_AUTOSCALER_CHART = "cluster-autoscaler"
