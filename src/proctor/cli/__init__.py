"""proctor.cli."""
