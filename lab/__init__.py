"""Runtime of the elastic spot-training lab: job spec, training script, local target, drill."""
