"""ServerGridJob: a flow job swept over the server's own configuration, times bench points.

Each server point is `job.point(params)`: the base flow job with the point's server (its engine
flags, or `tp`) and one bench workload per bench point, validated again; every point is checked
when the grid job is built, so a bad axis value is exit 64 before the first server starts.

Server axes are engine flags (`max-num-seqs = [64, 128]`: `--max-num-seqs 64`; a boolean axis
`enable-chunked-prefill = [true, false]`: `--enable-chunked-prefill` and
`--no-enable-chunked-prefill`) and `tp` (the server's tensor parallelism). Bench options are
a flow bench table's; `concurrency` and `request_rate` may be lists, each value a bench point
(`client_cores` and `percentiles` are lists too, each bench point's whole).
"""

from __future__ import annotations

import itertools
from typing import Annotated, Any, Literal, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from proctor.errors import UsageError, validation_problem
from proctor.jobs.bench import BenchJob
from proctor.jobs.flow import FlowJob, FlowWorkload, parse_workload
from proctor.jobs.options import NoOpt
from proctor.jobs.serve import ServeJob

#: Bench options that may be lists, each value a point of the bench grid.
BENCH_AXES = ("concurrency", "request_rate")
#: Bench options whose one value is a list (--client-cores 2-5, --percentiles 50,99): every
#: bench point gets the whole list, never one point per item.
LIST_OPTIONS = frozenset(
    name
    for name, field in BenchJob.model_fields.items()
    if get_origin(field.annotation) is list and name not in BENCH_AXES
)
Scalar = bool | int | float | str
ALLOWED = (
    "tp takes a whole number >= 1; any other axis is an engine flag: a number, text or true/false"
)


def apply_point(base: ServeJob, params: dict[str, Any]) -> ServeJob:
    """The server of one point: `tp` sets tensor parallelism, others are engine flags; validated
    again (a bad `tp` is a UsageError naming the axis and value)."""
    extra = list(base.extra)
    tp: Any = base.tp
    for name, value in params.items():
        if name == "tp":
            tp = value
        elif value is True:
            extra.append(f"--{name}")
        elif value is False:
            extra.append(f"--no-{name}")
        else:
            extra += [f"--{name}", str(value)]
    try:
        return ServeJob.model_validate({**base.model_dump(), "extra": extra, "tp": tp})
    except ValidationError as e:
        raise UsageError(
            f"server axis tp={tp!r}: " + validation_problem(e, what="invalid value"), hint=ALLOWED
        ) from None


def bench_label(point: dict[str, Any]) -> str:
    parts = [f"c{point['concurrency']}"] if "concurrency" in point else []
    parts += [f"r{point['request_rate']}"] if "request_rate" in point else []
    return "bench-" + ("-".join(parts) or "default")


def bench_workload(point: dict[str, Any]) -> FlowWorkload:
    return parse_workload({"bench": point, "name": bench_label(point)}, "bench point")


class ServerGridJob(BaseModel):
    """A base flow job, its server axes (engine flag or `tp` -> values) and its bench options
    (`concurrency` and `request_rate` lists are bench axes); `group` names the sweep."""

    model_config = ConfigDict(extra="forbid")

    kind: Annotated[Literal["server-grid"], NoOpt("the job's kind")] = "server-grid"
    flow: Annotated[FlowJob, NoOpt("the flow options (FlowJob), every one of them")]
    server: Annotated[dict[str, list[Scalar]], NoOpt("--server-grid NAME=V1,V2, or [sweep] server")]
    bench: Annotated[dict[str, Any], NoOpt("the bench options, or [sweep] bench")] = Field(
        default_factory=dict
    )
    group: Annotated[str, NoOpt("--group, or the flow file's name")] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _axes(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        server = data.get("server")
        if not isinstance(server, dict) or not server:
            raise UsageError(
                "a server sweep needs server axes, e.g. server = { max_num_seqs = [64, 128] }"
            )
        axes: dict[str, list[Any]] = {}
        for name, values in server.items():
            values = values if isinstance(values, list) else [values]
            if not values:
                raise UsageError(f"server axis {name} has no values")
            for value in values:
                if not isinstance(value, Scalar):
                    raise UsageError(f"server axis {name}={value!r} is not allowed", hint=ALLOWED)
            axes[str(name).replace("_", "-")] = values
        bench = {str(k).replace("-", "_"): v for k, v in dict(data.get("bench") or {}).items()}
        for key, value in bench.items():
            if isinstance(value, list) and key not in BENCH_AXES and key not in LIST_OPTIONS:
                raise UsageError(
                    f"bench option {key} cannot be a list: only {', '.join(BENCH_AXES)} are axes"
                )
        return {**data, "server": axes, "bench": bench}

    @model_validator(mode="after")
    def _points(self) -> ServerGridJob:
        # Every point checked now: a bad value is exit 64 before any server starts.
        for point in self.bench_points():
            bench_workload(point)
        for params in self.server_points():
            apply_point(self.flow.server, params)
        return self

    def server_points(self) -> list[dict[str, Any]]:
        names = list(self.server)
        return [
            dict(zip(names, combo, strict=True))
            for combo in itertools.product(*(self.server[n] for n in names))
        ]

    def bench_points(self) -> list[dict[str, Any]]:
        axes = {k: v for k, v in self.bench.items() if k in BENCH_AXES and isinstance(v, list)}
        fixed = {k: v for k, v in self.bench.items() if k not in axes}
        names = list(axes)
        return [
            {**fixed, **dict(zip(names, combo, strict=True))}
            for combo in itertools.product(*(axes[n] for n in names))
        ]

    def point(self, params: dict[str, Any]) -> FlowJob:
        """The flow of one server point: its server, one bench per bench point, and (one bench
        failing leaves the server up for the next) going on after a failure."""
        update = {
            "server": apply_point(self.flow.server, params),
            "workloads": [bench_workload(p) for p in self.bench_points()],
            "continue_on_failure": True,
        }
        return FlowJob.model_validate(self.flow.model_copy(update=update).model_dump())


__all__ = ["BENCH_AXES", "ServerGridJob", "apply_point", "bench_label", "bench_workload"]
