"""proctor.workloads."""
