"""The project's Pulumi program run offline under mocks, and what it declared, recorded: what
`elastic-lab plan` checks, `submit` renders a job against, `up` prechecks and the policy pack
runs on.

  harness.py          run_program(stack, overrides): the program under mocks -> Plan
  stack_files.py      stacks/Pulumi.<stack>.yaml as Pulumi hands its config to a program
  yaml_files.py       a YAML file read as a mapping, every failure said with the file
  mocks.py            mocks that answer as the clouds do (ids, identities, kubeconfigs)
  monitor.py, wire.py the recording resource monitor; Pulumi's wire format back to Python
  recording.py        Plan and RecordedResource: what the program declared
"""
