"""proctor.spec."""
