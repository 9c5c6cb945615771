"""Remote runs: the far-side agent and the controller's orchestration.

agent.py        `python -m proctor.targets.remote.agent CMD` run on the far host (JSON in/out)
orchestrate.py  sync -> verify -> start -> follow -> fetch -> release, and the completion report
"""
