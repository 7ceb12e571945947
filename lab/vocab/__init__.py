"""The project's vocabulary, at the bottom of every layer: standard library only.

errors.py          LabError and Refused, the one base of operational errors and their exit codes
problems.py        Problem(key, value, expected) and InvalidInput, the one input error
names.py           the project's name, its component type tokens, clouds, Kubernetes name rules,
                   image references (repository, tag, digest)
placeholders.py    `<what>`: a value a dry run cannot know where it runs
quantity.py        Kubernetes resource quantities (requests and limits), read and written
command_flags.py   the flags every command spells alike (-o, -y, -n) and the exit statuses
layout.py          where the checkout and its charts are
versions.py        pinned versions of what the platform installs
job.py             JobSpec: a job's launch parameters, the LAB_* / PET_* contract
job_flags.py       the command-line flags of a JobSpec, shared by `drill` and `submit`
per_step.py        PerStepSettings: the per-step mode's (TorchFT) timeouts and ports
events.py          the events of a job and a drill: names, fields, the JSON-lines format
script_findings.py the names of the drill's findings on a script of one's own (`--accept`)
drill_findings.py  the names of the drill's own findings, which fail it whatever the script
pools.py           pool labels, taints, tolerations, PoolPlacement
platform_facts.py  PlatformFacts: what a job needs to know about its platform
aws_tags.py, azure_tags.py   the tags the stacks and the clouds' controllers put on resources
"""
