"""A namespace's GPU quotas: ResourceQuotas on `requests.nvidia.com/gpu` scoped by
PriorityClass, as the stack config sets them for the platform's namespace (`platform.quota`)
and for each team's (`platform.teams.<team>`)."""

from __future__ import annotations

from dataclasses import dataclass

from lab.vocab.problems import Problem, Problems


@dataclass(frozen=True)
class GpuQuota:
    """A team's GPUs in its namespace, each a ResourceQuota on `requests.nvidia.com/gpu`
    scoped by PriorityClass: `gpus` at the workers' class (its share), `borrowed_gpus` at the
    borrowed class (what its bursts may hold on capacity other teams own). None: no quota."""

    gpus: int | None = None
    borrowed_gpus: int | None = None

    def problems(self, gpus_per_node: int, key: str = "platform.quota") -> list[Problem]:
        """What is wrong with the quotas, each named `<key>.gpus` or `<key>.borrowedGpus`."""
        out = Problems()
        for name, value in (("gpus", self.gpus), ("borrowedGpus", self.borrowed_gpus)):
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                out.add(f"{key}.{name}", value, "a whole number of GPUs >= 0")
            elif gpus_per_node == 0:
                out.add(f"{key}.{name}", value, "no GPU quota on a platform without GPUs (gpusPerNode 0)")
            elif 0 < value < gpus_per_node:
                out.add(
                    f"{key}.{name}",
                    value,
                    f"0 or at least gpusPerNode ({gpus_per_node}): a worker asks for a node's GPUs, so this quota "
                    "could never admit one",
                )
        return out.items
