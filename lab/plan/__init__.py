"""`elastic-lab plan`: what the offline run of the stack's program (lab.program) declared,
checked and shown.

  findings.py         Finding, Check, CheckSuite: what a check is and reports
  check_list.py       CHECKS, the explicit list `elastic-lab plan` runs; run_checks
  arm.py              arm-conformance: azure-native inputs against Azure's own API models
  arm_models.py       its reading of the azure-mgmt models: fields, envelopes, subtypes
  aws_api.py          aws-api-conformance: pulumi_aws inputs against botocore's models
  aws_request.py      its request walk against a botocore operation's input shape
  aws_policy.py       its IAM JSON policy grammar
  aws_rules.py        its per-service rules and reshapes beyond the models
  aks_pools.py, aks_guardrails.py   the AKS guardrails
  eks_guardrails.py   the EKS guardrails
  guardrails.py       what both clouds' guardrails check: one-at-a-time changes, checkpoints kept
  capacity_checks.py  the GPU capacity ranks, sizes and quota
  registry_checks.py  the image registry and the trainer image
  secret_outputs.py   guardrail:no-plain-secrets
  platform_checks.py  the training platform: render, schemas, CRD, its guardrails
  policy_pack.py      the same checks as a Pulumi policy pack (policy/)
  quota_needs.py      the vCPUs each quota must leave free, from the plan
  cost.py, cost_checks.py, saving.py   hourly cost, its checks, what spot saves at a band
  trace_saving.py     goodput and what spot saves over a window of a real spot trace
  prices.yaml         the price table
  display.py          the text and JSON views (the command is lab/cli/plan.py)

    from lab.program.harness import run_program
    plan = run_program("aks-dev", {"gpuMaxNodes": 5})   # overrides: short or full keys; None unsets
    plan = run_program("aks-dev", program=fn)           # run `fn` instead of the project's program
    plan.one("azure-native:containerservice:AgentPool", "aks-gpu-spot").inputs["scaleSetPriority"]

A program error (e.g. lab.vocab.problems.InvalidInput) propagates, carrying the resources
recorded before it as `exc.recorded_resources`. `run_checks(plan, only=None)` returns one
CheckRun (name, applied, findings) per check; `elastic-lab plan` exits 1 on any error
finding, 2 on invalid config or an unknown `--check`.
"""
