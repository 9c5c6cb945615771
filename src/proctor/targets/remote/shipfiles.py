"""Files a command reads, shipped with it to a far target (`bench|sweep --dataset jsonl:PATH
--target ...`): the far side must read these bytes, not whatever has that path there.

Before any machine is acquired, each file the request names is read here (a missing one is a
usage error, 64) and hashed. Once the far workspace is known, it is stored there
content-addressed, `<ws>/proctor/data/<sha256>/<name>`, by the agent, which writes it only if
its bytes hash to the same sha256; the request then names the far copy. The bench's
metrics.json `dataset.sha256` says which bytes it read.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from pathlib import Path

from proctor.errors import FaultDetected, UsageError
from proctor.targets.base import AGENT, FILES, Target, capable
from proctor.targets.remote.requests import CommandRequest

# Request parameters that may name a local file, and the dataset kinds that are files.
DATASET_PARAM = "dataset"
FILE_KINDS = ("jsonl", "sharegpt", "multi-turn")
MAX_BYTES = 512 * 1024 * 1024  # sent through the agent's stdin


@dataclass(frozen=True)
class LocalFile:
    param: str
    kind: str
    path: Path
    sha256: str
    size: int

    def far_path(self, workspace: str) -> str:
        return f"{workspace}/proctor/data/{self.sha256}/{self.path.name}"


def request_files(request: CommandRequest) -> list[LocalFile]:
    """The local files `request` names, read and hashed; UsageError if one cannot be read."""
    value = request.params.get(DATASET_PARAM)
    if not isinstance(value, str):
        return []
    kind, _, path = value.partition(":")
    kind = kind.strip().lower()
    if kind not in FILE_KINDS or not path:
        return []  # not a file: the far side checks the spec as bench does
    local = Path(path).expanduser().resolve()
    try:
        data = local.read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read dataset {path}: {e.strerror}",
                         hint="give an existing local file: --dataset KIND:PATH "
                              "(it is shipped to the target)") from e  # fmt: skip
    if len(data) > MAX_BYTES:
        raise UsageError(f"dataset {path} is {len(data):,} bytes; at most {MAX_BYTES:,} are "
                         "shipped with a command",
                         hint="put it on the target and run there")  # fmt: skip
    return [LocalFile(DATASET_PARAM, kind, local, hashlib.sha256(data).hexdigest(), len(data))]


def ship_files(target: Target, workspace: str, request: CommandRequest,
               files: list[LocalFile]) -> CommandRequest:  # fmt: skip
    """Store `files` in the far workspace (verified by sha256 there); `request` naming them."""
    if not files:
        return request
    params = dict(request.params)
    for file in files:
        data = file.path.read_bytes()
        if hashlib.sha256(data).hexdigest() != file.sha256:
            raise UsageError(f"dataset {file.path} changed while the command was starting")
        dest = file.far_path(workspace)
        if _store(target, file, data, dest) != file.sha256:
            raise FaultDetected(f"the far copy of {file.path} is not the same bytes",
                                hint="run again")  # fmt: skip
        params[file.param] = f"{file.kind}:{dest}"
    return request.model_copy(update={"params": params})


def _store(target: Target, file: LocalFile, data: bytes, dest: str) -> str | None:
    """Write `data` at `dest` on the target; the sha256 of what is there now."""
    far = capable(target, AGENT)
    if far is not None:  # the agent checks the bytes before it writes them
        answer = far.agent("store", {"dest": dest, "sha256": file.sha256,
                                     "data_b64": base64.b64encode(data).decode()})  # fmt: skip
        return str(answer.get("sha256"))
    host = capable(target, FILES)
    if host is None:
        raise UsageError(f"a {target.kind} target cannot take the files this command reads",
                         hint="put the dataset on the target and name its path there")  # fmt: skip
    host.put_file(file.path, dest)
    digest, offset = hashlib.sha256(), 0
    while chunk := host.read_bytes(dest, offset, 1 << 22):
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()


__all__ = ["LocalFile", "request_files", "ship_files"]
