"""`elastic-lab plan`: the Pulumi program, run offline under mocks, recorded and checked.

  harness.py          run_program(stack, overrides): the project's program under mocks -> Plan
  stack_files.py      stacks/Pulumi.<stack>.yaml as Pulumi hands its config to a program
  mocks.py            mocks that answer like Azure (ids, identities, kubeconfigs)
  monitor.py, wire.py the recording resource monitor; Pulumi's wire format back to Python
  recording.py        Plan and RecordedResource: what the program declared
  findings.py         Finding, Check, CheckSuite: what a check is and reports
  check_list.py       CHECKS, the explicit list `elastic-lab plan` runs; run_checks
  arm.py              arm-conformance: azure-native inputs against Azure's own API models
  aks_pools.py, aks_guardrails.py   the AKS guardrails
  secret_outputs.py   guardrail:no-plain-secrets
  platform_checks.py  the training platform: render, schemas, CRD, its guardrails
  cost.py, display.py hourly cost estimate; the text and JSON views
  cli.py              the command line

    from lab.plan.harness import run_program
    plan = run_program("aks-dev", {"gpuMaxNodes": 5})   # overrides: short or full keys; None unsets
    plan = run_program("aks-dev", program=fn)           # run `fn` instead of the project's program
    plan.one("azure-native:containerservice:AgentPool", "aks-gpu-spot").inputs["scaleSetPriority"]

A program error (e.g. lab.vocab.problems.InvalidInput) propagates, carrying the resources
recorded before it as `exc.recorded_resources`. `run_checks(plan, only=None)` returns one
CheckRun (name, applied, findings) per check; `elastic-lab plan` exits 1 on any error
finding, 2 on invalid config or an unknown `--check`.
"""
