"""The Kubernetes side: chart values from a JobSpec, Helm rendering, offline validation
(Kubernetes schemas, the PyTorchJob CRD) and the guardrails on what would be applied.

  job_values.py             JobSpec + PlatformFacts -> values of charts/elastic-pytorchjob
  helm.py                   render our charts offline with the Helm library
  schemas.py                strict validation: Kubernetes schemas by version, the PyTorchJob CRD
  objects.py                finding workloads, jobs and PriorityClasses among rendered objects
  placement.py              where a pod may run: required node labels, tolerated taints
  platform_guardrails.py    the guardrails on the platform's and jobs' objects: GUARDRAILS, run_guardrails
  guardrail.py              what a guardrail is: GuardrailContext, Violation, Guardrail
  placement_guardrails.py   where pods run and at which priority
  rendezvous_guardrails.py  the rendezvous wiring, etcd's image and privacy
  disruption_guardrails.py  drains and PodDisruptionBudgets
  worker_guardrails.py      the workers: preemptible, checkpoints writable, failures visible, HPA
  job.py                    a job rendered for a platform and checked (sizing, schemas, guardrails)
  operator_rules.py         the training operator's rule for ended worker pods, and what a budget would stop
"""
