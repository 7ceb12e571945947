"""The dynamic rendezvous's timings of an elastic job (torchrun's c10d and etcd-v2 handlers),
in seconds, with their checks; a JobSpec carries them (lab.vocab.job)."""

from __future__ import annotations

from dataclasses import dataclass

from lab.vocab.problems import InvalidInput, Problem, Problems, seconds_problems


@dataclass(frozen=True)
class RendezvousTimeouts:
    """Dynamic-rendezvous timings in seconds.

    Defaults are ours, tuned for fast recovery: fractions of a second need our launcher
    (`python -m lab.runtime.launch`, torchrun plus a handler that reads fractional seconds);
    `torch_defaults()` gives torchrun's own whole-second settings.

    join_s is how long an agent waits for min_nodes to join. On a cluster that wait includes
    GPU spot nodes being provisioned (the pool scales from zero, a replacement for an evicted
    node is requested, the GPU driver is installed: minutes, longer when spot capacity is
    short), so the default is 15 minutes. When it runs out the agent exits with a retryable
    code and leaves the rendezvous open (lab.runtime.launch), and its restarted pod waits again.
    server_outage_s is how long training goes on while the rendezvous server (etcd, the c10d
    store) is unreachable, e.g. restarting on an upgrade, before the agent exits to be retried;
    a rendezvous or an agent's start that meets the server down waits for it as long.
    """

    join_s: float = 900  # how long an agent waits for min_nodes before exiting to be retried
    # Extra wait for stragglers once min_nodes have joined. A round of the survivors of an
    # eviction never reaches max_nodes, so each recovery waited this out in full: 0.2 s, not
    # 0.5, took ~0.3 s off every elastic recovery (benchmarks/fault_tolerance.py). The launcher
    # now ends it as soon as every node an agent expects (its round's members still there, the
    # nodes that waited to join) has joined; it is waited out when one of them does not come.
    last_call_s: float = 0.2
    close_s: float = 10  # wait for the round to close after it completed
    keep_alive_interval_s: float = 0.5  # heartbeat period of each agent
    keep_alive_max_attempt: int = 3  # missed heartbeats before a node is declared dead
    # How often an agent reads the rendezvous state afresh: while training (nodes waiting to
    # join, participants lost) and while waiting for a round to form. torch serves every read
    # within a second of the last one from its cache, so a node that joined was seen up to 1 s
    # late and an agent that rejoins after a restart could find the round's last call over and
    # be left out of it (a second restart for everyone); the launcher caches this long instead.
    poll_interval_s: float = 0.1
    server_outage_s: float = 60  # training goes on this long while the rendezvous server is unreachable
    # etcd-v2 only: how long etcd keeps the rendezvous state once no agent writes it (every write,
    # each heartbeat included, starts it again). torch's default is 2 hours
    # (etcd_rendezvous_backend._DEFAULT_TTL): a wipeout longer than that (the whole pool gone and
    # capacity back after hours, as spot traces show) lost the state, and the job's next round
    # started again at 0, whose keys from the job's first round are still in the store (EtcdStore
    # writes them without a TTL): agents read a stale master address and ranks. 30 days keeps it
    # for any wait the job survives otherwise.
    state_ttl_s: float = 30 * 86400

    @classmethod
    def torch_defaults(cls) -> RendezvousTimeouts:
        return cls(
            join_s=600,
            last_call_s=30,
            close_s=30,
            keep_alive_interval_s=5,
            keep_alive_max_attempt=3,
            poll_interval_s=1,
            server_outage_s=60,
            state_ttl_s=7200,
        )

    def problems(self, prefix: str = "rdzv_timeouts.") -> list[Problem]:
        """Every invalid setting, keys under `prefix`."""
        if not_seconds := seconds_problems(self, prefix):
            return not_seconds
        out = Problems()
        if not isinstance(self.keep_alive_max_attempt, int) or self.keep_alive_max_attempt < 3:
            out.add(
                prefix + "keep_alive_max_attempt",
                self.keep_alive_max_attempt,
                "a whole number >= 3 (with fewer, agents declare themselves dead right after joining)",
            )
        window = self.keep_alive_interval_s * self.keep_alive_max_attempt
        if window < 1.5:
            out.add(
                prefix + "keep_alive_interval_s",
                self.keep_alive_interval_s,
                f"keep_alive_interval_s x keep_alive_max_attempt >= 1.5 s (now {window:g} s): a shorter "
                "window declares live agents dead",
            )
        if self.keep_alive_interval_s < 0.25 or self.poll_interval_s < 0.05:
            out.add(
                prefix + "keep_alive_interval_s",
                self.keep_alive_interval_s,
                ">= 0.25 s (and poll_interval_s >= 0.05 s): faster heartbeats overload the store",
            )
        if self.poll_interval_s >= self.last_call_s:
            out.add(
                prefix + "poll_interval_s",
                self.poll_interval_s,
                f"< last_call_s ({self.last_call_s:g}): an agent that reads the state less often than the "
                "last call lasts can miss the round it rejoins",
            )
        return out.items

    def validate(self) -> None:
        if problems := self.problems():
            raise InvalidInput(problems)

    def conf(self) -> dict[str, str]:
        """The `--rdzv-conf` keys torch's dynamic rendezvous (and lab.runtime.launch) read."""
        return {
            "join_timeout": f"{self.join_s:g}",
            "last_call_timeout": f"{self.last_call_s:g}",
            "close_timeout": f"{self.close_s:g}",
            "keep_alive_interval": f"{self.keep_alive_interval_s:g}",
            "keep_alive_max_attempt": str(self.keep_alive_max_attempt),
            "poll_interval": f"{self.poll_interval_s:g}",
            "server_outage": f"{self.server_outage_s:g}",
            "state_ttl": f"{self.state_ttl_s:.0f}",  # etcd takes whole seconds
        }
