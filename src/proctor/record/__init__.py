"""proctor.record."""
