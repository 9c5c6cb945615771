"""Typed jobs: one pydantic model per workload kind, the only place a workload's settings are
declared, and the typed documents a job's run leaves (metrics.json, summary.json).

A job is data: the CLI builds one from its options (generated from the model's fields), a flow
file's table validates into one, a sweep point is `job.model_copy(update=point)`, and the
supervised child, the far side and the library all run it with `python -m proctor.jobs run`
(`proctor.jobs.run`, which sits above the workloads it calls). How its run goes (name, key,
--detach, --server, ...) is a `Submission` (jobs/submission.py) around it, which
`proctor.jobs.submit.submit` runs here or on a target.
"""
