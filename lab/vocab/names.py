"""Names: the project's, its Pulumi type tokens, the clouds it knows, and Kubernetes' naming rules."""

from __future__ import annotations

import re
from dataclasses import dataclass

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
    rf"^(?P<repository>(?:{_IMAGE_REGISTRY}/)?{_IMAGE_PATH_COMPONENT}(?:/{_IMAGE_PATH_COMPONENT})*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(?:@(?P<digest>sha256:[a-f0-9]{64}))?$"
)
# The tag that names whatever was pushed last: never a pin.
LATEST_TAG = "latest"


@dataclass(frozen=True)
class ImageReference:
    """A container image reference in its three parts, as IMAGE_REFERENCE reads it: the
    repository (registry and path), the tag and the digest, each of the last two optional.

    A runtime given both pulls by the digest and ignores the tag (the distribution reference
    grammar's `name:tag@digest`), so `str()` gives back exactly what was parsed."""

    repository: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: object) -> ImageReference | None:
        """The parts of `text`; None when it is no image reference a runtime takes."""
        found = IMAGE_REFERENCE.match(text) if isinstance(text, str) else None
        if found is None:
            return None
        return cls(found["repository"], found["tag"], found["digest"])

    @property
    def pinned(self) -> bool:
        """Whether the reference names one image for good: by its digest (the content's hash),
        or by a tag other than `latest` (a registry with immutable tags, ECR here, keeps it so).
        `latest` is never a pin, even beside a digest: it says nothing of what was meant."""
        if self.tag == LATEST_TAG:
            return False
        return self.digest is not None or self.tag is not None

    def __str__(self) -> str:
        return self.repository + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


def image_repository(image: object) -> str | None:
    """The repository of an image reference, whatever its tag or digest (None: no reference)."""
    parts = ImageReference.parse(image)
    return parts.repository if parts is not None else None
