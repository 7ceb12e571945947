"""A stack: its program run through the Pulumi Automation API, and a stack as a job sees it.

automation.py         `up`, `preview`, `destroy` after the offline checks (StackError)
prerequisite.py, prerequisites.py   what deploying needs here (`elastic-lab check`)
quota.py              the cloud's GPU quota against what the stack needs
outputs.py            a deployed stack's outputs, as a typed record (StackOutputs)
target.py             a stack as a job sees it, read once (StackTarget), and its cluster's connection
on_demand_notice.py   what a job is told when its workers can land on the on-demand GPU rank
image.py              `elastic-lab image`: build, push, pin the trainer image
kept_storage.py       the checkpoint storage a teardown keeps
rehearsal.py          dry runs from the offline plan where the deployed stack cannot be read
"""
