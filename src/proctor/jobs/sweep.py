"""SweepJob: a bench job and the axis it is swept over, or an SLO search over one axis.

A point is `job.point(concurrency=c)` (the bench job with that value, validated again), so a
sweep takes every bench setting: its options are the bench's plus these (cli/bench.py).
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from proctor.jobs.bench import BenchJob, parse_rate
from proctor.jobs.options import NoOpt, Opt

SearchAxis = Literal["request-rate", "concurrency"]
#: The bench field each SLO search axis sets.
AXIS_FIELDS = {"request-rate": "request_rate", "concurrency": "concurrency"}


def parse_ints(text: str | list[int]) -> list[int]:
    """`4,8,16` -> [4, 8, 16]; a list is taken as it is."""
    if isinstance(text, list):
        return [int(x) for x in text]
    try:
        return [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError("write whole numbers, e.g. 4,8,16") from None


def parse_rates(text: str | list[float | str] | None) -> list[float] | None:
    """`1,2,inf` -> [1.0, 2.0, inf]; None or empty: no rate axis."""
    if text is None:
        return None
    items = text if isinstance(text, list) else str(text).split(",")
    rates = [parse_rate(x.strip() if isinstance(x, str) else x) for x in items if str(x).strip()]
    return rates or None


class SweepJob(BaseModel):
    """Benches of one bench job at several concurrencies, or the highest value of an axis that
    meets an SLO (bisection, `slo`)."""

    model_config = ConfigDict(extra="forbid")

    kind: Annotated[Literal["sweep"], NoOpt("the job's kind")] = "sweep"
    bench: Annotated[BenchJob, NoOpt("the bench options, every one of them")] = Field(
        default_factory=lambda: BenchJob()
    )
    concurrency: Annotated[
        list[int],
        Opt("--concurrency", cli_type=str, parse=parse_ints, cli_default="4,8,16,32,64,128"),
    ] = Field(
        default_factory=lambda: [4, 8, 16, 32, 64, 128],
        min_length=1,
        description="Comma-separated concurrency points (an SLO search over request rate caps "
        "requests in flight at the largest).",
    )
    request_rate: Annotated[
        list[float] | None, Opt("--request-rate", cli_type=str, parse=parse_rates)
    ] = Field(
        default=None,
        description="Requests/s: comma-separated, an axis of a server grid; one value for an "
        "SLO search over concurrency.",
    )
    name: Annotated[str, Opt("--name")] = Field(
        default="sweep", description="NAME of the sweep (its points are NAME-cN)."
    )
    runs_dir: Annotated[str | None, NoOpt("the command's --runs-dir")] = None
    slo: Annotated[str | None, Opt("--slo")] = Field(
        default=None,
        description='SLO search: conditions on bench metrics, e.g. "p99_ttft_ms<=500,p99_tpot_ms'
        '<=30".',
    )
    search: Annotated[SearchAxis, Opt("--search", cli_type=str)] = Field(
        default="request-rate", description="SLO search axis: request-rate or concurrency."
    )
    lo: Annotated[float | None, Opt("--lo")] = Field(
        default=None, description="SLO search: lowest value."
    )
    hi: Annotated[float | None, Opt("--hi")] = Field(
        default=None, description="SLO search: highest value."
    )
    max_probes: Annotated[int, Opt("--max-probes")] = Field(
        default=12, ge=2, description="SLO search: at most this many benches."
    )
    resolution: Annotated[float | None, Opt("--resolution")] = Field(
        default=None,
        description="SLO search: stop when the bracket is this narrow (default 1 for "
        "concurrency, 5% of --hi for rates).",
    )

    @field_validator("concurrency")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if min(v) < 1:
            raise ValueError("concurrency points must be positive integers, e.g. 4,8,16")
        return v

    @field_validator("request_rate")
    @classmethod
    def _rates(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and any(not r > 0 or math.isnan(r) for r in v):
            raise ValueError("request rates must be above 0 (inf: all at once)")
        return v

    def point(self, **axis: float) -> BenchJob:
        """The bench job of one point: this sweep's bench with the axis values set."""
        return self.bench.updated(**axis)
