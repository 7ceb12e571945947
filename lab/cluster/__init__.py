"""A live cluster, and nothing else: its API server, jobs and nodes, with the field's own
clients (kubernetes, kubeflow-training, azure-mgmt, boto3). It reads no stack and renders
nothing (a contract in pyproject.toml): what it needs of a stack comes in typed (a KubeApi,
rendered objects, a stack's outputs).

  kube.py            a connection to a cluster's API server (KubeApi), from the kubeconfig meant
  unreachable.py     why an API server gave no answer, in plain words
  jobs.py            a job's operations, in one place to import from (the modules below)
  pytorchjob.py      a PyTorchJob as the server holds it: labels, read, list, its pods, its range
  job_submit.py      a job's objects created and deleted together (the SDK's model, checked)
  job_quota.py       a job's core against its namespace's GPU quotas, before anything is created
  job_status.py      a job's status: conditions, worker pods, workers killed for memory
  job_scale.py       a job's Worker replicas set within its range (the scale subresource)
  job_logs.py        a job's logs: one pod's, a worker's, or all workers' as they come
  eviction.py        what every eviction backend offers (EvictionBackend, the node it evicts)
  aks_eviction.py    AKS: VMSS simulateEviction; azure_errors.py, Azure's errors in plain words
  eks_eviction.py    EKS: an AWS FIS experiment; aws_requests.py, AWS clients and errors in plain words
  drain.py           any cluster: a Kubernetes drain (cordon, Eviction API)
  disruption.py      the PodDisruptionBudget and priorities a drain meets
  drill.py           the eviction drill on a cluster
  replay.py          a spot trace window replayed on a cluster: each lost slot's node evicted at its time
  reclaim.py         a job's burst taken back by real preemption (the owners' work), then given back
  rebalance.py       a job's workers moved off its fallback GPU ranks, back to rank 1
  polling.py         a wait that looks again until something is there (a simulated clock in tests)
  teardown/          what `pulumi destroy` cannot see, found and deleted; a local run stopped
"""
