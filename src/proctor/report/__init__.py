"""proctor.report."""
