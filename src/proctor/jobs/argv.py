"""The one command line that runs a job: `python -m proctor.jobs run JOB` with the job as JSON.

Every supervised bench, sweep point and flow workload is started with it, so a run's recorded
argv is the whole typed job (never flags rebuilt from another command's options); the API key
is never in it (OPENAI_API_KEY reaches the child through the environment).
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from pydantic import BaseModel


def job_json(job: BaseModel) -> str:
    """The job as one compact JSON text, infinities as "inf" (JSON has none)."""
    return json.dumps(job_data(job), sort_keys=True, separators=(",", ":"))


def job_data(job: BaseModel) -> Any:
    """The job as JSON data, infinities as "inf": what a record holds, validated back as is."""
    return _finite(job.model_dump(mode="json"))


def _finite(value: Any) -> Any:
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def job_argv(job: BaseModel, python: str | None = None) -> list[str]:
    return [python or sys.executable, "-m", "proctor.jobs", "run", job_json(job)]
