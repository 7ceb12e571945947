"""The eviction drill: evict a node from a running job and measure that training goes on
(seconds to recover, steps lost, seconds for a new node to join).

  run.py            the drill on the local target (run_drill)
  drill_config.py   DrillConfig: the drill asked for, and its bad values
  replay.py         a window of a real spot trace replayed on the local target (fault 'trace')
  replay_goodput.py a replay's goodput against the capacity its window offered
  reclaim.py        borrowed nodes taken back by their owners' work (fault 'reclaim'), and the job through it
  report.py         the report (DrillReport): its figures, problems, text and JSON
  timeline.py       a drill's events in time order, and the questions asked of them
  analysis.py       the figures from the events (`measure`); per_step_report.py in per-step mode
  verdict.py        the verdict: what the run saw in, typed findings and pass or fail out
  findings.py       the findings on a script of one's own, from what its workers did (script_runs.py)
  agent_events.py   torch's own agent events, for scripts that emit none of ours
  diagnosis.py      why workers fail, in the script's terms (error files, a usage error's stderr)
  checkpoint_cost.py   what a job's saves cost, and the interval that cost calls for per band
  convergence.py    does a job trained through evictions end where it would have without them
  parity.py         is it the model the same job trains uninterrupted, step by step (its twin)
  batch_cost.py     what the batch policy cost at each world size
  ledger.py         the sample ledger: which samples each epoch trained into the model once, twice or never
  lighthouse_log.py why a per-step job's lighthouse left a live group out of a quorum, from its log
  thread_dumps.py   where a process that outlived the drill's time was, from its thread dump
  plot.py           the timeline plot (the command is lab/cli/drill.py)
"""
