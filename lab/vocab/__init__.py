"""The project's vocabulary, at the bottom of every layer: standard library only.

errors.py          LabError and Refused, the one base of operational errors and their exit codes
problems.py        Problem(key, value, expected) and InvalidInput, the one input error
names.py           the project's name, its component type tokens, clouds, Kubernetes name rules,
                   image references (repository, tag, digest)
placeholders.py    `<what>`: a value a dry run cannot know where it runs
quantity.py        Kubernetes resource quantities (requests and limits), read and written
command_flags.py   the flags every command spells alike (-o, -y, -n) and the exit statuses
layout.py          where the checkout and its charts are
versions.py        pinned versions of what the platform installs
job.py             JobSpec: a job's launch parameters, the LAB_* / PET_* contract
job_parts.py       a job with a burst as two PyTorchJobs: their names and the label of each part
job_flags.py       the command-line flags of a JobSpec, shared by `drill` and `submit`
rendezvous_timeouts.py   RendezvousTimeouts: an elastic job's rendezvous timings
batch_policy.py    the batch policy: how a step's samples are shared by the live ranks (BatchPlan)
per_step.py        PerStepSettings: the per-step mode's (TorchFT) timeouts and ports
events.py          the events of a job and a drill: names, fields, the JSON-lines format
script_findings.py the names of the drill's findings on a script of one's own (`--accept`)
drill_findings.py  the names of the drill's own findings, which fail it whatever the script
pools.py           pool labels, taints, tolerations, PoolPlacement
platform_facts.py  PlatformFacts: what a job needs to know about its platform
aws_tags.py, azure_tags.py   the tags the stacks and the clouds' controllers put on resources
azure_regions.py   Azure's region names, pinned
capacity.py        ranked GPU capacity: the pools a job's workers may run on, in the autoscaler's order
machine_shapes.py  what a VM size or instance type is made of (vCPUs, GPUs, memory), for the stacks' sizes
quota.py           the vCPU quota a stack needs, per quota and region
current_stack.py   the current stack: the one a command uses when given no --stack
models.py          the demo job's model sizes (--model, --parallel) and its drill's default steps
checkpoint_location.py   where a job's checkpoints live, as LAB_CHECKPOINT_DIR names it
checkpoint_interval.py   the checkpoint interval from a save's cost and the job's MTBF (Young, Daly)
replay_schedule.py ReplaySchedule: a window of a real spot trace as a job's slots lost and given back
spot_trace.py      SpotTrace: a real spot pool's capacity over time; windows of it (`A:B`)
trace_files.py     reading the three shapes of spot trace file, and the traces the project carries
trace_schedule.py  a window of a trace as a job's ReplaySchedule: the mapping rules, notices, compression
trace_stats.py     a window's capacity statistics: loss events, bursts, wipeouts, time to come back
trace_windows.py   the replay benchmark's named windows of real traces
spot_goodput.py    the share of a spot job's time that trains, per mode, at an eviction rate
trace_goodput.py   the share of a trace window's capacity bound a job trains, per mode; checked against a replay
thread_dumps.py    thread dumps on request: the signal, the file each process writes them to
"""
