"""`proctor runs list` filters: a filter it cannot read is a usage error (64), never an empty or
a full listing that looks like an answer; --since compares instants, not the text of times
written with different UTC offsets (a run fetched from a far host keeps that host's offset)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.helpers import proctor


def _two_runs(tmp_path: Path) -> tuple[dict[str, str], list[Path]]:
    runs = tmp_path / "runs"
    env = {"PROCTOR_RUNS_DIR": str(runs)}
    for name in ("first", "second"):
        assert (
            proctor("run", "--gpu-sample", "0", "--name", name, "--", "true", env=env).returncode
            == 0
        )
    dirs = sorted(p for p in runs.iterdir() if p.is_dir() and not p.name.startswith("."))
    return env, dirs


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--since", "banana"), "invalid --since 'banana'"),
        (("--since", "-5m"), "invalid --since '-5m'"),
        (("--since", "2026-13-45"), "invalid --since '2026-13-45'"),
        (("--outcome", "banana"), "unknown --outcome 'banana'"),
        (("--limit", "-1"), "invalid --limit -1"),
    ],
)
def test_a_filter_it_cannot_read_is_refused(
    tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    env, _ = _two_runs(tmp_path)
    res = proctor("runs", "list", *args, env=env)
    assert res.returncode == 64, res.stdout + res.stderr
    assert says in res.stderr and res.stdout == ""


def test_since_compares_instants_across_utc_offsets(tmp_path: Path) -> None:
    env, (first, second) = _two_runs(tmp_path)
    # The first run's record as a far host 9 h west of UTC writes it: the same instant.
    path = first / "record.json"
    record = json.loads(path.read_text())
    created = datetime.fromisoformat(record["created_at"])
    record["created_at"] = created.astimezone(timezone(timedelta(hours=-9))).isoformat()
    path.write_text(json.dumps(record))
    assert proctor("runs", "reindex", env=env).returncode == 0
    res = proctor("runs", "list", "--since", "1h", "--json", env=env)
    assert res.returncode == 0, res.stderr
    assert {row["id"] for row in json.loads(res.stdout)} == {first.name, second.name}
    later = (created + timedelta(hours=1)).astimezone(timezone.utc).isoformat()
    res = proctor("runs", "list", "--since", later, "--json", env=env)
    assert res.returncode == 0 and json.loads(res.stdout) == []
