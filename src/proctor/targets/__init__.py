"""proctor.targets."""
