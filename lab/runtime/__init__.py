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
  train.py           the demo elastic training script (DDP, torch.optim)
  train_per_step.py  its per-step fault-tolerant mode (TorchFT); heal_state.py what a heal copies
  trainer.py         what both modes share: start, resume, saves, notices
  checkpointer.py    the checkpoints as a trainer uses them, whatever their kind
  checkpoint.py      checkpoints that survive a kill at any moment
  events.py          structured events of the training script, for the drill
  store.py           the standalone c10d store a job's rendezvous may run from the image
  notice/            the AKS spot-notice handler (a DaemonSet on the GPU spot pool)
"""
