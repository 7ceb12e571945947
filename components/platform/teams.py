"""The teams that share one training platform, read from the stack config and validated.

    elastic-spot-lab:platform:
      teams:
        vision:                     # the team's name, a DNS-1123 label (`submit --team vision`)
          namespace: team-vision    # [the team's name]; its own: not the platform's, default or kube-*
          gpus: 8                   # its share: GPUs its workers (preemptible) may request in all
          borrowedGpus: 16          # what its burst workers (borrowed) may hold besides; unset: no cap

Each team gets its namespace, the platform's service account and pod reader there, its quotas,
and a checkpoint claim of the platform's claim name on its own folder of the platform's storage
(`teams/<team>`). Its jobs rendezvous at the platform's etcd, whose NetworkPolicy admits them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from components.platform.mapping_keys import unknown_keys
from components.platform.quota import GpuQuota
from lab.vocab.names import DNS_LABEL
from lab.vocab.platform_facts import TeamFacts
from lab.vocab.problems import Problem, Problems

TEAM_KEYS = {"namespace", "gpus", "borrowedGpus"}


@dataclass(frozen=True)
class TeamSettings:
    """One team: its name, its namespace and its GPU quotas there."""

    name: str
    namespace: str
    quota: GpuQuota = field(default_factory=GpuQuota)

    @property
    def key(self) -> str:
        return f"platform.teams.{self.name}"

    def facts(self) -> TeamFacts:
        return TeamFacts(self.namespace, self.quota.gpus, self.quota.borrowed_gpus)


def team_problems(teams: tuple[TeamSettings, ...], platform_namespace: str, gpus_per_node: int) -> list[Problem]:
    """Names and namespaces that are no DNS labels, a namespace that is the platform's own, a
    system one or another team's, and quotas that could never admit a worker."""
    out = Problems()
    seen: dict[str, str] = {}
    for team in teams:
        if not isinstance(team.name, str) or not DNS_LABEL.match(team.name):
            out.add(team.key, team.name, "a team name that is a DNS-1123 label (lower-case letters, digits, '-')")
            continue
        ns = team.namespace
        if not isinstance(ns, str) or not DNS_LABEL.match(ns):
            out.add(f"{team.key}.namespace", ns, "a DNS-1123 label (lower-case letters, digits, '-')")
        elif ns == platform_namespace:
            out.add(
                f"{team.key}.namespace",
                ns,
                "a namespace of the team's own, not the platform's (platform.namespace): its quotas would cap "
                "the platform's own jobs",
            )
        elif ns.startswith("kube-") or ns == "default":
            out.add(f"{team.key}.namespace", ns, "a namespace of the team's own, not default or kube-*")
        elif ns in seen:
            out.add(f"{team.key}.namespace", ns, f"a namespace no other team has (team {seen[ns]!r} has it)")
        else:
            seen[ns] = team.name
        out.extend(team.quota.problems(gpus_per_node, team.key))
    return out.items


def read_teams(found: Problems, raw: Mapping[str, Any]) -> dict[str, Any]:
    """`teams`, as PlatformSettings' `teams` argument; what cannot be read goes to `found`."""
    if "teams" not in raw:
        return {}
    given = raw["teams"]
    if not isinstance(given, Mapping):
        found.add("platform.teams", given, "a mapping of team name -> {namespace, gpus, borrowedGpus}")
        return {}
    teams = []
    for name, team in given.items():
        if team is None:
            team = {}
        if not isinstance(team, Mapping):
            found.add(f"platform.teams.{name}", team, "a mapping with " + ", ".join(sorted(TEAM_KEYS)))
            continue
        found.extend(unknown_keys(f"platform.teams.{name}.", team, TEAM_KEYS))
        quota = GpuQuota(team.get("gpus"), team.get("borrowedGpus"))
        teams.append(TeamSettings(name, team.get("namespace", name), quota))
    return {"teams": tuple(teams)}
