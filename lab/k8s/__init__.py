"""Kubernetes side of the lab: chart values from a JobSpec, Helm rendering, offline
validation (Kubernetes schemas, the PyTorchJob CRD) and the platform's guardrails."""
