"""proctor.targets.runpod."""
