"""What runs inside the training image, and only that: the standard library, torch, TorchFT,
python-etcd and the kubernetes client, beside the vocabulary (lab.vocab).

  launch.py          the agent command on every target: torchrun with fractional-second
                     rendezvous settings, a rendezvous that rides out its server restarting
  agent_exits.py     how that agent exits: the codes the training operator retries
  agent_hooks.py     what it changes in torch's agent: its monitor, its stop, its exit barrier
  worker_failures.py a worker's own crash or a peer's consequence; crash loops
  rendezvous_backends.py   the c10d and etcd-v2 handlers built, reconnected, restored
  rendezvous_handler.py    the rendezvous handler that rides out its server, sees a lost peer
  container_ledger.py      a pod's containers killed on their node, counted
  torch_seam.py      every write into torch's (and multiprocessing's) internals, named
  warm.py, warm_server.py   workers forked from a server that imported torch once
  preload.py         what it imports for them (and the local target's node forker)
  train.py           the demo elastic training script (DDP, torch.optim); train_settings.py its flags
  train_per_step.py  its per-step fault-tolerant mode (TorchFT); heal_state.py what a heal copies
  per_step_torchft.py TorchFT's servers, transport and gloo group as that mode uses them, and its timeouts
  trainer.py         what both modes share: start, resume, saves, notices
  checkpointer.py    the checkpoints as a trainer uses them, whatever their kind
  checkpoint.py      whole checkpoints that survive a kill at any moment
  sharded_checkpoint.py   sharded, asynchronous checkpoints that reshard (torch DCP)
  object_store.py    where sharded checkpoints live: a directory, or an object store (S3, Blob)
  node_memory.py     the agent's memory that keeps its workers' shards across their restarts
  memory_tier.py     a sharded checkpoint loaded from the nodes' memory, storage only for the rest
  optimizer_state.py a fresh optimizer's state to load into, without torch's zero-gradient step
  snapshot.py        the training state a checkpoint holds, one type for both modes
  checkpoint_pacer.py, job_history.py   the derived checkpoint interval: when to save next,
                     from what the job has lived through
  workload.py        what the demo trains (--model): the model, its data, its checkpoint kind;
                     gpt.py the real-size GPT and its token data
  spot_notice.py     SIGTERM while training: a notice, or the agent stopping its workers;
                     pod_deadline.py, when a cluster's worker pod goes (its deletion time)
  round_store.py     the rendezvous store, with waits that end when their round is gone
  round_logs.py      worker logs kept per rendezvous round (`--logs-specs lab-rounds`)
  script_watch.py    what the drill sees of a script that reports nothing itself;
                     report_step.py, the one line such a script may add;
                     elastic_batches.py, the job's batch policy for such a script
  thread_dumps.py    every thread's Python stack written when the drill asks (a thread dump)
  process_title.py   process titles `ps` and `top` tell apart
  events.py          structured events of the training script, for the drill
  store.py           the standalone c10d store a job's rendezvous may run from the image
  notice/            the AKS spot-notice handler (a DaemonSet on the GPU spot pool)
"""
