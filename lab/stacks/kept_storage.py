"""Checkpoint storage that outlives its stack, taken back by the next `up`.

`pulumi destroy` leaves the checkpoint storage (retainOnDelete: an AKS stack's resource group,
storage account and container; an EKS stack's bucket), and the clouds refuse to create it again:
azure-native stops at the resource group that exists, and an EKS stack would make a new bucket
beside the old one. So `elastic-lab destroy` (and `teardown`) read the ids of what the destroy
keeps from the stack's state first and write them to the stack's config as `adoptCheckpoints`
(role -> cloud id); the next `elastic-lab up` imports them under the same parent, so their URNs
are those they had, and removes the key once the update succeeded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from lab.vocab.checkpoint_location import KEPT_ROLES
from lab.vocab.names import PROJECT

ADOPT_KEY = f"{PROJECT}:adoptCheckpoints"


def kept_ids(deployment: Mapping[str, Any]) -> dict[str, str]:
    """role -> id of each checkpoint resource of an exported stack state (`pulumi stack
    export`'s `deployment`) that a destroy leaves in the cloud."""
    out: dict[str, str] = {}
    for resource in deployment.get("resources") or []:
        role = KEPT_ROLES.get(str(resource.get("type")))
        if role and resource.get("retainOnDelete") and resource.get("id"):
            out[role] = str(resource["id"])
    return out


def remember_before_destroy(stack: Any) -> dict[str, str]:
    """The ids a destroy of `stack` (an Automation API Stack) will keep, read from its state."""
    return kept_ids(stack.export_stack().deployment or {})


def write_for_the_next_up(stack: Any, ids: Mapping[str, str]) -> None:
    """Put `ids` in the stack's config for the next `up` (nothing when none were kept)."""
    from pulumi import automation

    if ids:
        stack.set_config(ADOPT_KEY, automation.ConfigValue(value=json.dumps(dict(sorted(ids.items())))))


def forget_after_up(stack: Any) -> bool:
    """Remove `adoptCheckpoints` once an update took the storage back; True when it was set."""
    config = stack.get_all_config()
    if ADOPT_KEY not in config:
        return False
    stack.remove_config(ADOPT_KEY)
    return True
