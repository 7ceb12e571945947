"""The Kubernetes side: chart values from a JobSpec, Helm rendering, offline validation
(Kubernetes schemas, the PyTorchJob CRD) and the guardrails on what would be applied.

  job_values.py           JobSpec + PlatformFacts -> values of charts/elastic-pytorchjob
  helm.py                 render our charts offline with the Helm library
  schemas.py              strict validation: Kubernetes schemas by version, the PyTorchJob CRD
  objects.py              finding workloads, jobs and PriorityClasses among rendered objects
  placement.py            where a pod may run: required node labels, tolerated taints
  platform_guardrails.py  the guardrails on the platform's and jobs' objects
  job.py                  a job rendered for a platform and checked (sizing, schemas, guardrails)
"""
