"""Issue 20: a run whose record.json cannot be read is listed as unknown, with a warning that
names it, never dropped from `runs list` without a word; `runs reindex` names it too. An
`exit_code` file of 0 still gives the exit status, never the outcome ok."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import only_run, proctor

BROKEN: dict[str, tuple[bytes | None, str]] = {
    # directory name: (what record.json holds, what the warning says)
    "20260101-000001-aaaaa1": (b"[]", "record.json is an array, not a JSON object"),
    "20260101-000002-aaaaa2": (b"null", "record.json is null, not a JSON object"),
    "20260101-000003-aaaaa3": (b'{"run_id": ', "record.json is not JSON"),
    "20260101-000004-aaaaa4": (b'\xff\xfe{"run_id": "x"}', "record.json is not UTF-8"),
    "20260101-000005-aaaaa5": (None, "more than one JSON document (written twice?)"),
}


@pytest.fixture
def broken_runs(isolated_runs: Path) -> Path:
    """One good run, and a copy of it (exit_code 0) for each kind of unreadable record."""
    proctor("run", "--name", "good", "--", "true", check=True)
    good = only_run(isolated_runs)
    text = (good / "record.json").read_bytes()
    for name, (body, _) in BROKEN.items():
        shutil.copytree(good, isolated_runs / name)
        (isolated_runs / name / "record.json").write_bytes(text + text if body is None else body)
        assert (isolated_runs / name / "exit_code").read_text().split() == ["0"]
    return good


def _check_listing(runs: Path, good: Path) -> None:
    listed = proctor("runs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["id"]: row for row in json.loads(listed.stdout)}
    assert set(rows) == {good.name, *BROKEN}
    assert rows[good.name]["outcome"] == "ok" and rows[good.name]["problem"] is None
    warnings = listed.stderr.splitlines()
    for name, (_, why) in BROKEN.items():
        row = rows[name]
        assert row["outcome"] == "unknown" and row["exit_code"] == 0, row
        assert why in row["problem"]
        assert row["dir"] == str(runs / name)
        said = [line for line in warnings if name in line]
        assert len(said) == 1 and "listed as unknown" in said[0] and why in said[0], warnings
    table = proctor("runs", "list", "--outcome", "unknown")
    assert table.returncode == 0 and all(name in table.stdout for name in BROKEN)
    assert good.name not in table.stdout


def test_unreadable_records_are_listed_as_unknown_by_name(
    isolated_runs: Path, broken_runs: Path
) -> None:
    # The store the good run wrote has no row for them: the listing indexes them.
    _check_listing(isolated_runs, broken_runs)
    # Without a store, from the run directories.
    for path in isolated_runs.glob("proctor.sqlite*"):
        path.unlink()
    _check_listing(isolated_runs, broken_runs)


def test_reindex_names_them_and_indexes_them_as_unknown(
    isolated_runs: Path, broken_runs: Path
) -> None:
    result = proctor("runs", "reindex")
    assert result.returncode == 0, result.stderr
    assert "indexed 6 runs" in result.stdout and "5 of them unknown" in result.stdout
    for name, (_, why) in BROKEN.items():
        line = next(line for line in result.stderr.splitlines() if name in line)
        assert why in line and "indexed as unknown" in line
    answer = json.loads(proctor("runs", "reindex", "--json", check=True).stdout)
    assert sorted(Path(u["dir"]).name for u in answer["unknown"]) == sorted(BROKEN)
    assert answer["skipped"] == []
    _check_listing(isolated_runs, broken_runs)


def test_runs_show_of_an_unreadable_record_is_unknown_not_ok(
    isolated_runs: Path, broken_runs: Path
) -> None:
    """`runs show` agrees with `runs list`: exit_code 0 beside a record that cannot be read
    is not a success (before: ok)."""
    for name, (_, why) in BROKEN.items():
        shown = proctor("runs", "show", name, "--json")
        assert shown.returncode == 0, shown.stderr
        view = json.loads(shown.stdout)
        assert view["outcome"] == "unknown" and why in view["problem"], view
        assert view["exit"]["code"] == 0
    good = proctor("runs", "show", broken_runs.name, "--json")
    assert json.loads(good.stdout)["outcome"] == "ok"
