"""proctor.workloads.loadgen."""
