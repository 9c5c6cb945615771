"""Files a command reads, shipped with it to a far target: the far side must read these bytes,
not whatever has that path there.

    bench|sweep --dataset KIND:PATH    the dataset file (jsonl, sharegpt, multi-turn, trace)
    eval gsm8k --data DIR              the splits it reads (train.jsonl, test.jsonl)
    a flow job's workloads             their bench/sweep `dataset`, eval `data` (a flow file's
    a server grid job's bench          entries, or [sweep] bench, as the job holds them)

Before any machine is acquired, each file is read here (a missing one is a usage error, 64),
checked against the size cap and hashed. Once the far workspace is known, each is stored there
content-addressed, `<ws>/proctor/data/<sha256>/<name>` (a folder's files under
`<ws>/proctor/data/<digest>/<folder>/`, the digest of their sha256sum text), by the agent, which
writes a file only if its bytes hash to the same sha256 (or, without an agent, through FILES and
read back); the submission then names the far copies in its job's own fields (`job_shipment`;
the commands still sent as a CommandRequest, serve, drain and inspect, read no local file).
The reader says which bytes it read: bench's metrics.json `dataset.sha256`, the eval's
`data.sha256`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

from proctor.errors import FaultDetected, UsageError
from proctor.jobs.bench import BenchJob
from proctor.jobs.eval import EvalJob
from proctor.jobs.flow import FlowJob
from proctor.jobs.grid import ServerGridJob
from proctor.jobs.submission import AnyJob
from proctor.jobs.sweep import SweepJob
from proctor.source.manifest import digest_of
from proctor.spec.datasets import FILE_DATASETS, split_dataset
from proctor.targets.base import AGENT, FILES, Target, capable
from proctor.targets.remote.requests import CommandRequest, SubmitRequest

# Request parameters that may name a local file (the dataset kinds that are files:
# spec.datasets.FILE_DATASETS).
DATASET_PARAM = "dataset"
# `eval gsm8k --data DIR`: the files it reads there (workloads/gsm8k.py, write_offline_task).
DATA_PARAM = "data"
GSM8K_SPLITS = ("train.jsonl", "test.jsonl")
MAX_BYTES = 512 * 1024 * 1024  # all the files of one command, each sent through the agent's stdin


@dataclass(frozen=True)
class LocalFile:
    """One local file, read and hashed; stored far away as `<ws>/proctor/data/<folder>/<name>`."""

    path: Path
    sha256: str
    size: int
    folder: str  # the file's own sha256, or the digest of the folder it is part of
    name: str  # its name under that folder: `p.jsonl`, or `gsm8k/test.jsonl`

    def far_path(self, workspace: str) -> str:
        return f"{workspace}/proctor/data/{self.folder}/{self.name}"


@dataclass(frozen=True)
class Shipped:
    """A value naming local file(s) (a request parameter, or a place in a flow file) and how it
    names the far copies: `prefix` + the far file, or + the far folder holding `files`."""

    where: tuple[str | int, ...]  # (param,) or the keys down to the value in a document
    files: tuple[LocalFile, ...]
    prefix: str = ""  # "jsonl:" for a dataset
    folder: str | None = None  # the folder's name when the value names a folder

    @property
    def sha256(self) -> str:
        """The file's sha256, or the folder's digest."""
        return self.files[0].folder if self.folder else self.files[0].sha256

    def far_value(self, workspace: str) -> str:
        if self.folder:
            return f"{self.prefix}{workspace}/proctor/data/{self.sha256}/{self.folder}"
        return self.prefix + self.files[0].far_path(workspace)

    def label(self) -> str:
        return ".".join(str(w) for w in self.where)


@dataclass
class Shipment:
    """Everything a job reads locally: the values of its fields that name files."""

    params: list[Shipped] = field(default_factory=list)

    def values(self) -> list[Shipped]:
        return list(self.params)

    def files(self) -> list[LocalFile]:
        unique = {(f.folder, f.name): f for v in self.values() for f in v.files}
        return list(unique.values())

    def __bool__(self) -> bool:
        return bool(self.params)

    def check_size(self) -> None:
        total = sum(f.size for f in self.files())
        if total > MAX_BYTES:
            raise UsageError(
                f"the files this command reads are {total:,} bytes; at most "
                f"{MAX_BYTES:,} are shipped with a command",
                hint="put them on the target and run there",
            )


def read_file(text: str, what: str) -> LocalFile:
    """The local file `text` names (relative to the cwd, as a local run reads it), hashed."""
    local = Path(text).expanduser().resolve()
    sha, size = _hash(local, text, what)
    return LocalFile(local, sha, size, sha, local.name)


def read_folder(text: str, names: tuple[str, ...], what: str) -> list[LocalFile]:
    """The files `names` of the local folder `text` names, hashed, under one folder digest."""
    local = Path(text).expanduser().resolve()
    hashed = {n: _hash(local / n, f"{text}/{n}", what) for n in names}
    digest = digest_of({n: sha for n, (sha, _) in hashed.items()})
    return [
        LocalFile(local / n, sha, size, digest, f"{local.name}/{n}")
        for n, (sha, size) in hashed.items()
    ]


def _hash(path: Path, text: str, what: str) -> tuple[str, int]:
    """(sha256, size) of a local file, read in chunks; UsageError if it cannot be read."""
    digest, size = hashlib.sha256(), 0
    try:
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 22):
                digest.update(chunk)
                size += len(chunk)
                if size > MAX_BYTES:
                    raise UsageError(
                        f"{what} {text} is over {MAX_BYTES:,} bytes, the most "
                        "shipped with a command",
                        hint="put it on the target and run there",
                    )
    except OSError as e:
        raise UsageError(
            f"cannot read {what} {text}: {e.strerror}",
            hint="give an existing local path: it is shipped to the target",
        ) from e
    return digest.hexdigest(), size


def dataset_value(value: object, where: tuple[str | int, ...]) -> Shipped | None:
    """`KIND:PATH` of a file kind as a shipped value; None for what is not a file (random)."""
    if not isinstance(value, str):
        return None
    kind, path = split_dataset(value)
    if kind not in FILE_DATASETS or not path:
        return None  # not a file: the far side checks the spec as bench does
    return Shipped(where, (read_file(path, "dataset"),), prefix=f"{kind}:")


def gsm8k_data_value(value: object, where: tuple[str | int, ...]) -> Shipped | None:
    """`--data DIR` of eval gsm8k as a shipped folder of its splits."""
    if not isinstance(value, str) or not value:
        return None
    files = read_folder(value, GSM8K_SPLITS, "GSM8K data")
    return Shipped(where, tuple(files), folder=Path(value).expanduser().resolve().name)


def table_values(kind: str, options: object, where: tuple[str | int, ...]) -> list[Shipped]:
    """The options of a `kind` workload's table (at `where`) that name local files, read and
    hashed: bench and sweep `dataset` (a file kind), eval `data` (its GSM8K splits). A `cmd`
    line, an offline `model` and any other path are the far side's own (docs/workflow.md)."""
    if not isinstance(options, dict):
        return []
    found: list[Shipped | None] = []
    for key, value in options.items():
        name = str(key).replace("_", "-")
        if kind in ("bench", "sweep") and name == "dataset":
            found.append(dataset_value(value, (*where, key)))
        elif kind == "eval" and name == "data":
            found.append(gsm8k_data_value(value, (*where, key)))
    return [f for f in found if f is not None]


def job_shipment(job: AnyJob) -> Shipment:
    """What a typed job reads here, by the job's own fields (a bench's or a sweep's bench's
    --dataset file, an eval's --data splits): read and hashed; UsageError if one cannot be.
    Each value's `where` is its place in the job."""
    values: list[Shipped | None] = _job_values(job, ())
    if isinstance(job, ServerGridJob):
        # A server grid's bench options, every point's (its table as written).
        values += table_values("bench", job.bench, ("bench",))
    elif isinstance(job, FlowJob):
        # A flow's listed workloads, each its typed job (a path relative to the cwd, as a
        # local flow reads it).
        for i, workload in enumerate(job.workloads):
            values += _job_values(workload.job, ("workloads", i, "job"))
    shipment = Shipment([v for v in values if v is not None])
    shipment.check_size()
    return shipment


def _job_values(job: object, where: tuple[str | int, ...]) -> list[Shipped | None]:
    """The local files a bench's or a sweep's bench's --dataset, or an eval's --data, names."""
    if isinstance(job, BenchJob):
        return [dataset_value(job.dataset, (*where, DATASET_PARAM))]
    if isinstance(job, SweepJob):
        return [dataset_value(job.bench.dataset, (*where, "bench", DATASET_PARAM))]
    if isinstance(job, EvalJob):
        return [gsm8k_data_value(job.data, (*where, DATA_PARAM))]
    return []


@overload
def ship_files(
    target: Target, workspace: str, request: CommandRequest, shipment: Shipment
) -> CommandRequest: ...
@overload
def ship_files(
    target: Target, workspace: str, request: SubmitRequest, shipment: Shipment
) -> SubmitRequest: ...
def ship_files(
    target: Target, workspace: str, request: CommandRequest | SubmitRequest, shipment: Shipment
) -> CommandRequest | SubmitRequest:
    """Store the shipment in the far workspace (verified by sha256 there); `request` naming the
    far copies (a submission: its job's fields)."""
    if not shipment:
        return request
    for file in shipment.files():
        data = file.path.read_bytes()
        if hashlib.sha256(data).hexdigest() != file.sha256:
            raise UsageError(f"{file.path} changed while the command was starting")
        _put(target, file.far_path(workspace), file.sha256, data, file.path)
    if isinstance(request, SubmitRequest):
        submission = json.loads(request.submission)
        for value in shipment.params:
            _set(submission["job"], value.where, value.far_value(workspace))
        return SubmitRequest(submission=json.dumps(submission, sort_keys=True))
    # A CommandRequest (serve, drain, inspect) reads no local file: its shipment is empty.
    raise UsageError(f"{request.title()} takes no local files to a target")


def shipped_digests(shipment: Shipment) -> dict[str, str]:
    """For the far job's record: which bytes each value named (sha256 or folder digest)."""
    return {v.label(): v.sha256 for v in shipment.values()}


def _set(tables: dict[str, Any], where: tuple[str | int, ...], value: str) -> None:
    node: Any = tables
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value


def _put(target: Target, dest: str, sha256: str, data: bytes, local: Path | None) -> None:
    if _store(target, dest, sha256, data, local) != sha256:
        raise FaultDetected(f"the far copy {dest} is not the same bytes", hint="run again")


def _store(target: Target, dest: str, sha256: str, data: bytes, local: Path | None) -> str | None:
    """Write `data` at `dest` on the target; the sha256 of what is there now."""
    far = capable(target, AGENT)
    if far is not None:  # the agent checks the bytes before it writes them
        answer = far.agent(
            "store", {"dest": dest, "sha256": sha256, "data_b64": base64.b64encode(data).decode()}
        )
        return str(answer.get("sha256"))
    host = capable(target, FILES)
    if host is None:
        raise UsageError(
            f"a {target.kind} target cannot take the files this command reads",
            hint="put the files on the target and name their paths there",
        )
    if local is not None:
        host.put_file(local, dest)
    else:
        with tempfile.TemporaryDirectory(prefix="proctor-ship-") as tmp:
            made = Path(tmp) / Path(dest).name
            made.write_bytes(data)
            host.put_file(made, dest)
    digest, offset = hashlib.sha256(), 0
    while chunk := host.read_bytes(dest, offset, 1 << 22):
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()


__all__ = [
    "LocalFile",
    "Shipment",
    "Shipped",
    "dataset_value",
    "gsm8k_data_value",
    "job_shipment",
    "read_file",
    "read_folder",
    "ship_files",
    "shipped_digests",
    "table_values",
]
