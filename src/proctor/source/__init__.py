"""proctor.source."""
