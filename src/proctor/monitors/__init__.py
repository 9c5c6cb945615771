"""proctor.monitors."""
