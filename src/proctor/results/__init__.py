"""proctor.results."""
