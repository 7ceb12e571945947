"""The project's vocabulary, at the bottom of every layer: standard library only.

problems.py        Problem(key, value, expected) and InvalidInput, the one input error
names.py           the project's name, its component type tokens, clouds, Kubernetes name rules
layout.py          where the checkout and its charts are
versions.py        pinned versions of what the platform installs
job.py             JobSpec: a job's launch parameters, the LAB_* / PET_* contract
pools.py           pool labels, taints, tolerations, PoolPlacement
platform_facts.py  PlatformFacts: what a job needs to know about its platform
"""
