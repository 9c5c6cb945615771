"""The store repairs itself: corrupt stores are listed around and rebuilt, bad records are
skipped by name, and read-only commands never create a store."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.helpers import proctor


def _make_runs(n: int = 2) -> None:
    for i in range(n):
        proctor("run", "--name", f"job{i}", "--", "true", check=True)


def _listed() -> list[str]:
    result = proctor("runs", "list", "--json")
    assert result.returncode == 0, result.stderr
    return sorted(row["name"] for row in json.loads(result.stdout))


def test_corrupt_store_is_listed_around_then_moved_aside_and_rebuilt(isolated_runs: Path) -> None:
    _make_runs()
    store = isolated_runs / "proctor.sqlite"
    for side in (store, Path(f"{store}-wal"), Path(f"{store}-shm")):
        side.unlink(missing_ok=True)
    garbage = b"\x00garbage, not SQLite\xff" * 200
    store.write_bytes(garbage)

    listed = proctor("runs", "list")
    assert listed.returncode == 0 and "Traceback" not in listed.stderr
    assert f"store {store} is corrupt" in listed.stderr and "runs reindex" in listed.stderr
    assert "job0" in listed.stdout and "job1" in listed.stdout
    assert store.read_bytes() == garbage  # listing changed nothing

    rebuilt = proctor("runs", "reindex", "--json")
    assert rebuilt.returncode == 0, rebuilt.stderr
    answer = json.loads(rebuilt.stdout)
    assert answer["indexed"] == 2
    kept = Path(answer["moved_aside"])
    assert kept.parent == isolated_runs and kept.name.startswith("proctor.sqlite.corrupt-")
    assert kept.read_bytes() == garbage
    assert _listed() == ["job0", "job1"]
    assert proctor("runs", "list").stderr == ""  # healthy again: no warning


def test_unusable_store_path_lists_with_a_warning_and_reindex_says_64(
    isolated_runs: Path, tmp_path: Path
) -> None:
    _make_runs(1)
    Path("proctor.toml").write_text('[store]\npath = "a-directory"\n', encoding="utf-8")
    Path("a-directory").mkdir()
    listed = proctor("runs", "list", "--json")
    assert listed.returncode == 0 and "cannot be used" in listed.stderr
    assert [r["name"] for r in json.loads(listed.stdout)] == ["job0"]
    result = proctor("runs", "reindex")
    assert result.returncode == 64, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "a-directory cannot be used" in lines[0]
    assert Path("a-directory").is_dir()  # never moved aside: it is not corrupt


def test_reindex_names_unknown_schema_versions_and_run_ids_that_are_not_plain_names(
    isolated_runs: Path,
) -> None:
    # Never indexed under what the record claims: listed as unknown under the directory's name.
    _make_runs(1)
    good = next(p for p in isolated_runs.iterdir() if p.is_dir())
    record = json.loads((good / "record.json").read_text())
    bad = {
        "future": {**record, "run_id": "20991231-000000-aaaaaa", "schema_version": 99},
        "escape": {**record, "run_id": "../../etc/passwd"},
        "slash": {**record, "run_id": "a/b"},
    }
    for name, body in bad.items():
        shutil.copytree(good, isolated_runs / name)
        (isolated_runs / name / "record.json").write_text(json.dumps(body))
    result = proctor("runs", "reindex")
    assert result.returncode == 0, result.stderr
    assert "indexed 4 runs" in result.stdout and "3 of them unknown" in result.stdout
    assert "future: unknown record schema version 99" in result.stderr
    assert "escape: run id '../../etc/passwd' is not a plain name" in result.stderr
    assert "slash: run id 'a/b' is not a plain name" in result.stderr
    listed = json.loads(proctor("runs", "list", "--json", check=True).stdout)
    outcomes = {row["id"]: row["outcome"] for row in listed}
    assert outcomes == {
        record["run_id"]: "ok",
        "future": "unknown",
        "escape": "unknown",
        "slash": "unknown",
    }
    assert all(row["dir"] == str(isolated_runs / row["id"]) for row in listed)


def test_read_only_commands_never_create_a_store(isolated_runs: Path) -> None:
    _make_runs(1)
    run_dir = next(p for p in isolated_runs.iterdir() if p.is_dir())
    for path in isolated_runs.glob("proctor.sqlite*"):
        path.unlink()
    assert _listed() == ["job0"]
    proctor("runs", "show", "last", check=True)
    proctor("runs", "verify", run_dir.name, check=True)
    proctor("report", run_dir.name, "-o", str(isolated_runs.parent / "r.html"), check=True)
    assert not list(isolated_runs.glob("proctor.sqlite*"))
    # An empty or missing runs directory is not created either.
    empty = isolated_runs.parent / "empty-runs"
    assert proctor("runs", "list", env={"PROCTOR_RUNS_DIR": str(empty)}).returncode == 0
    assert not empty.exists()
