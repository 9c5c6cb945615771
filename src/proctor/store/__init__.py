"""proctor.store."""
