"""Operations on a live cluster, with the field's own clients (kubernetes, kubeflow-training,
azure-mgmt, boto3).

  kube.py            a connection to a cluster's API server (KubeApi), from the kubeconfig meant
  jobs.py            a job's submit, status, logs and delete
  eviction.py        what every eviction backend offers; aks_eviction.py (VMSS simulateEviction),
                     eks_eviction.py (AWS FIS), drain.py (a Kubernetes drain, any cluster)
  drill.py           the eviction drill on a cluster
  rebalance.py       a job's workers moved off its fallback GPU ranks, back to rank 1
  teardown/          what `pulumi destroy` cannot see, found and deleted
  cli.py, drill_cli.py, rebalance_cli.py, teardown_cli.py   their commands (`elastic-lab up|submit|...`)
"""
