"""proctor.supervise."""
