"""Names: the project's, its Pulumi type tokens, the clouds it knows, and Kubernetes' naming rules."""

from __future__ import annotations

import re

# The Pulumi project, the namespace of its stack config keys (`elastic-spot-lab:<key>`) and
# the prefix of its own labels.
PROJECT = "elastic-spot-lab"

# Type tokens of the project's components, as they appear in Pulumi state.
AKS_CLUSTER_TYPE = f"{PROJECT}:aks:Cluster"
BYO_CLUSTER_TYPE = f"{PROJECT}:byo:Cluster"
EKS_CLUSTER_TYPE = f"{PROJECT}:eks:Cluster"
PLATFORM_TYPE = f"{PROJECT}:platform:TrainingPlatform"

# Values of `elastic-spot-lab:cloud`: which cluster a stack builds. `byo` brings an existing
# cluster through its kubeconfig.
CLOUDS = ("aks", "eks", "byo")

# RFC 1123 label: namespaces, service accounts, most object names.
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# RFC 1035 label: names of Services and of what names them (jobs), starting with a letter.
DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# RFC 1123 subdomain: PriorityClasses, claims, StorageClasses, cluster domains.
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
# A qualified label key (optional DNS prefix, a name of at most 63 characters) and a label value.
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
# The rules above in words, for messages; the longest a label may be (RFC 1123, RFC 1035).
DNS_LABEL_MAX = 63
DNS_LABEL_RULE = "a DNS-1123 label: at most 63 lower-case letters, digits and '-', a letter or digit at each end"
DNS_1035_LABEL_RULE = (
    "a DNS-1035 label: at most 63 lower-case letters, digits and '-', starting with a letter, ending with a "
    "letter or digit"
)


def is_dns_label(value: object) -> bool:
    """An RFC 1123 label: what names a namespace."""
    return isinstance(value, str) and bool(DNS_LABEL.match(value))


def is_dns_1035_label(value: object) -> bool:
    """An RFC 1035 label of at most 63 characters: what names a PyTorchJob (the training operator's
    webhook checks its name with apimachinery's NameIsDNS1035Label)."""
    return isinstance(value, str) and len(value) <= DNS_LABEL_MAX and bool(DNS_1035_LABEL.match(value))


# A container image reference, as the distribution reference grammar (and so every container
# runtime) reads it: [registry[:port]/]path[:tag][@digest], the path lower-case. A first part
# with no '.', ':' or "localhost" is a path component, not a registry.
_IMAGE_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_IMAGE_REGISTRY = (
    rf"(?:(?:localhost|{_HOST_LABEL}(?:\.{_HOST_LABEL})+|\[[0-9a-fA-F:]+\])(?::\d+)?"  # a name with a dot, or an IP
    rf"|{_HOST_LABEL}:\d+)"  # any host with a port
)
IMAGE_REFERENCE = re.compile(
    rf"^(?:{_IMAGE_REGISTRY}/)?{_IMAGE_PATH_COMPONENT}(?:/{_IMAGE_PATH_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
)
