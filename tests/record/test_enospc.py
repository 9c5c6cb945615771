"""Point 10 of issue 11: a full disk ends the record with a reason naming ENOSPC, exit 6.

A real small filesystem (tmpfs, mounted by root, as CI runs) holds the runs directory."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import proctor


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_command_that_fills_the_disk_ends_the_record_as_unknown_enospc(
    tiny_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROCTOR_RUNS_DIR", str(tiny_disk / "runs"))
    result = proctor("run", "--", "sh", "-c", "yes filler-line-of-the-log", timeout=60)
    assert result.returncode == 6, result.stderr[-2000:]
    assert "ENOSPC" in result.stderr and "Traceback" not in result.stderr
    [run] = [p for p in (tiny_disk / "runs").iterdir() if p.is_dir() and not p.name.startswith(".")]
    record = json.loads((run / "record.json").read_text())
    assert record["outcome"] == "unknown"
    assert "ENOSPC" in record["error"]
    assert [e["event"] for e in record["events"]][-1] == "enospc"
    assert record["exit"]["code"] is not None and record["ended_at"]  # what is known is kept
    assert not (run / "exit_code").exists()
    assert not (run / ".space-reserve").exists()
    shown = proctor("runs", "show", run.name, "--json")
    assert json.loads(shown.stdout)["outcome"] == "unknown"


def test_a_disk_already_full_is_one_line_and_exit_6(
    tiny_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = tiny_disk / "runs"
    runs.mkdir()
    with (tiny_disk / "filler").open("wb") as handle, pytest.raises(OSError):
        while True:
            handle.write(b"\0" * 65536)
            handle.flush()
            os.fsync(handle.fileno())
    monkeypatch.setenv("PROCTOR_RUNS_DIR", str(runs))
    result = proctor("run", "--", "true", timeout=60)
    assert result.returncode == 6, result.stderr[-2000:]
    assert "ENOSPC" in result.stderr and "Traceback" not in result.stderr
    # Issue 20: refused before anything ran, so no run directory is left behind.
    assert "so it was not started" in result.stderr
    assert [p.name for p in runs.iterdir() if not p.name.startswith(".")] == []
