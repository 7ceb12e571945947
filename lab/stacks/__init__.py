"""A deployed stack, through the Pulumi Automation API: `up`, `preview` and `destroy` after
the offline checks (automation.py), and the stack's outputs as a typed record (outputs.py)."""
