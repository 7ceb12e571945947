"""The eviction drill: evict a node from a running job and measure that training goes on
(seconds to recover, steps lost, seconds for a new node to join).

  run.py            the drill on the local target (DrillConfig, run_drill)
  report.py         its figures from the events (DrillReport); per_step_report.py in per-step mode
  agent_events.py   torch's own agent events, for scripts that emit none of ours
  diagnosis.py      why workers fail, in the script's terms (error files, a usage error's stderr)
  plot.py           the timeline plot (the command is lab/cli/drill.py)
"""
