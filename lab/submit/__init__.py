"""A job for a stack's platform, rendered offline from charts/elastic-pytorchjob and checked
(schemas, the PyTorchJob CRD, guardrails, sizing) before lab.ops creates it."""
