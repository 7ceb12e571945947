"""The per-step fault-tolerant mode's settings (TorchFT), defined once.

In `per-step` mode every node (pod) is a replica group of its own, and a "lighthouse" server
forms a quorum of the live groups at every step. `PerStepSettings` holds its timings; the
lighthouse's command line and the training script's environment are derived from them here,
for the local target and the cluster alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lab.vocab.problems import InvalidInput, Problem, Problems, seconds_problems

# Environment contract between a launcher and the per-step training script.
ENV_FAULT_TOLERANCE = "LAB_FAULT_TOLERANCE"
ENV_REPLICA_GROUP = "LAB_REPLICA_GROUP"  # the group's id (the node's / pod's name)
ENV_ADVERTISE = "LAB_FT_ADVERTISE"  # the address the group's servers listen on and advertise
ENV_MIN_REPLICAS = "LAB_FT_MIN_REPLICAS"
ENV_COLLECTIVE_TIMEOUT = "LAB_FT_COLLECTIVE_TIMEOUT_S"
ENV_QUORUM_TIMEOUT = "LAB_FT_QUORUM_TIMEOUT_S"
ENV_CONNECT_TIMEOUT = "LAB_FT_CONNECT_TIMEOUT_S"
ENV_HEAL_TIMEOUT = "LAB_FT_HEAL_TIMEOUT_S"
# The port of the group's weight server (peers that heal fetch from it); unset or 0: any free port.
ENV_CHECKPOINT_PORT = "LAB_FT_CHECKPOINT_PORT"
# TorchFT's own: where the lighthouse is, and how often a quorum request is retried when the
# lighthouse cannot be reached (0, its default, ends the job on a lighthouse restart).
ENV_LIGHTHOUSE = "TORCHFT_LIGHTHOUSE"
ENV_QUORUM_RETRIES = "TORCHFT_QUORUM_RETRIES"
# The port of the group's manager server (TorchFT's own; unset or 0: any free port).
ENV_MANAGER_PORT = "TORCHFT_MANAGER_PORT"

LIGHTHOUSE_PORT = 29510  # the lighthouse's own default
# On a cluster each group is a pod of its own: fixed ports it can declare.
MANAGER_PORT = 29511
CHECKPOINT_PORT = 29512


# The settings whose 0 means "derived while the job runs", and from what.
DERIVED_WHEN_0 = {
    "heal_timeout_s": "from the state's size",
    "collective_timeout_s": "from the measured collectives",
}


@dataclass(frozen=True)
class PerStepSettings:
    """Timings of the per-step mode, in seconds. Defaults are tuned for fast recovery; TorchFT's
    own (`torchft_defaults()`) take 5 s to drop a dead group and 60 s to fail a collective with
    a vanished one.

    heartbeat_timeout_s: the lighthouse drops a group whose heartbeats stop this long. A
      group's manager heartbeats every 0.1 s (TorchFT's interval), so the default, 0.2 s, drops
      a killed group within 0.1-0.2 s and a live one only when two heartbeats in a row come
      late: raise it where a group's CPUs are saturated, its process pauses (a large model's
      buffers freed and mapped: 2 s at gpt-100m on a CPU) or the lighthouse is far away (a
      group dropped by mistake sits a step out and heals from a peer).
    join_timeout_s: once enough groups asked for a quorum, how long the lighthouse waits for
      the other live ones before issuing it. A group that is gone stops heartbeating and is
      not waited for; this covers live groups only, so it must be longer than a step (heal
      included): with a shorter one, a quorum that once formed without a group (it joined,
      or healed, a moment late) is followed by quorums of whoever asks first, and the groups
      take turns sitting a step out and healing, for good.
    quorum_tick_s: how often the lighthouse re-checks a pending quorum (a dead group's
      heartbeats expire between two checks: the survivors' quorum waits for the next one).
    collective_timeout_s: a step's cross-group collective fails after this: how fast a
      vanished group (sockets left open) costs the survivors a step. 0 (the default) derives
      it while the job runs: 10 times the slowest of the last 32 steps' collectives, at least
      0.5 s (the heal's timeout until one was measured), so that a small model on a fast
      network loses a vanished group in about half a second and a large one, whose
      collective takes seconds over the network, is not failed by a fixed timeout.
    quorum_timeout_s: how long a group waits for a quorum of min_nodes groups (on a cluster
      that includes GPU nodes being provisioned: minutes), and how long training waits out a
      lighthouse that cannot be reached (it restarts on an upgrade, its pod moves).
    connect_timeout_s: connecting to the lighthouse and the peers' managers.
    lighthouse_retry_s: while the lighthouse cannot be reached, a group asks again this often.
      TorchFT spaces its retries quorum timeout / (retries + 1) apart, so this sets
      TORCHFT_QUORUM_RETRIES (its default, 0, ends the job at the lighthouse's first restart).
    heal_timeout_s: how long a group joining may take to copy the state from a live peer, and
      how long the peers' collective of that step waits for it; 0 (the default) derives it
      from the size of the state (lab.runtime.per_step_torchft.heal_timeout).
    """

    heartbeat_timeout_s: float = 0.2
    join_timeout_s: float = 10.0
    quorum_tick_s: float = 0.02
    collective_timeout_s: float = 0.0
    quorum_timeout_s: float = 900.0
    connect_timeout_s: float = 10.0
    lighthouse_retry_s: float = 1.0
    heal_timeout_s: float = 0.0

    @classmethod
    def torchft_defaults(cls) -> PerStepSettings:
        return cls(
            heartbeat_timeout_s=5,
            join_timeout_s=60,
            quorum_tick_s=0.1,
            collective_timeout_s=60,
            quorum_timeout_s=60,
            connect_timeout_s=60,
            lighthouse_retry_s=60,
            heal_timeout_s=60,
        )

    def problems(self, prefix: str = "per_step.") -> list[Problem]:
        if not_seconds := seconds_problems(self, prefix, DERIVED_WHEN_0):
            return not_seconds
        out = Problems()
        if 0 < self.collective_timeout_s < 0.5:
            out.add(
                prefix + "collective_timeout_s",
                self.collective_timeout_s,
                "0 (derived from the measured collectives) or >= 0.5 s: a step's collective must have time to complete",
            )
        if self.heartbeat_timeout_s < 0.2:
            out.add(
                prefix + "heartbeat_timeout_s",
                self.heartbeat_timeout_s,
                ">= 0.2 s: the groups heartbeat every 0.1 s, a shorter timeout drops live ones",
            )
        if not 0.1 <= self.lighthouse_retry_s <= self.quorum_timeout_s:
            out.add(
                prefix + "lighthouse_retry_s",
                self.lighthouse_retry_s,
                f"seconds in [0.1, quorum_timeout_s ({self.quorum_timeout_s:g})]: TorchFT waits at least 0.1 s",
            )
        if self.quorum_tick_s > self.join_timeout_s:
            out.add(prefix + "quorum_tick_s", self.quorum_tick_s, f"<= join_timeout_s ({self.join_timeout_s:g})")
        return out.items

    def validate(self) -> None:
        if problems := self.problems():
            raise InvalidInput(problems)

    @property
    def quorum_retries(self) -> int:
        """TORCHFT_QUORUM_RETRIES for retries `lighthouse_retry_s` apart."""
        return max(0, math.ceil(self.quorum_timeout_s / self.lighthouse_retry_s) - 1)

    def lighthouse_args(self, min_replicas: int, bind: str) -> list[str]:
        """The `torchft_lighthouse` flags (it takes milliseconds)."""
        return [
            f"--bind={bind}",
            f"--min_replicas={min_replicas}",
            f"--join_timeout_ms={round(self.join_timeout_s * 1000)}",
            f"--quorum_tick_ms={round(self.quorum_tick_s * 1000)}",
            f"--heartbeat_timeout_ms={round(self.heartbeat_timeout_s * 1000)}",
        ]

    def train_env(self, *, min_replicas: int, lighthouse: str) -> dict[str, str]:
        """What the per-step training script reads (lighthouse: its http://host:port)."""
        return {
            ENV_LIGHTHOUSE: lighthouse,
            ENV_QUORUM_RETRIES: str(self.quorum_retries),
            ENV_MIN_REPLICAS: str(min_replicas),
            ENV_COLLECTIVE_TIMEOUT: f"{self.collective_timeout_s:g}",
            ENV_QUORUM_TIMEOUT: f"{self.quorum_timeout_s:g}",
            ENV_CONNECT_TIMEOUT: f"{self.connect_timeout_s:g}",
            ENV_HEAL_TIMEOUT: f"{self.heal_timeout_s:g}",
        }
