"""Kubernetes naming rules shared by the cluster components and the platform."""

import re

# RFC 1123 label: namespaces, service accounts, most object names.
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
