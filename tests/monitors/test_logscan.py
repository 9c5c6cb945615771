from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from proctor.errors import ConfigError
from proctor.monitors.logscan import LogFollower, LogScanner

FAULTS = ["proc died unexpectedly", r"Memory access fault by GPU", "MEMORY_VIOLATION"]


def write(path: Path, text: str, mode: str = "a") -> None:
    with path.open(mode) as fh:
        fh.write(text)


def test_reads_only_new_bytes_and_reports_file_and_line(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    write(log, "starting\nloading weights\n")
    scanner = LogScanner(FAULTS)
    scanner.add(log)
    assert scanner.poll() == []
    first = scanner.bytes_read()
    write(log, "ok\nWorker proc died unexpectedly (exitcode=9)\n")
    found = scanner.poll()
    assert [(m.line_no, m.pattern) for m in found] == [(4, "proc died unexpectedly")]
    assert found[0].path == str(log)
    assert found[0].line == "Worker proc died unexpectedly (exitcode=9)"
    assert scanner.bytes_read() - first == len("ok\nWorker proc died unexpectedly (exitcode=9)\n")
    assert scanner.poll() == []  # nothing new: nothing reported twice


def test_partial_last_line_is_completed_on_the_next_poll(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("")
    scanner = LogScanner(FAULTS)
    scanner.add(log)
    write(log, "Memory access fa")
    assert scanner.poll() == []
    write(log, "ult by GPU node-2\nnext")
    found = scanner.poll()
    assert len(found) == 1 and found[0].line == "Memory access fault by GPU node-2"
    assert scanner.tail(log) == ["Memory access fault by GPU node-2", "next"]


def test_truncation_restarts_at_zero(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    write(log, "x" * 1000 + "\n")
    scanner = LogScanner(FAULTS)
    scanner.add(log)
    scanner.poll()
    write(log, "MEMORY_VIOLATION\n", mode="w")  # shorter than the old offset
    found = scanner.poll()
    assert [m.line for m in found] == ["MEMORY_VIOLATION"]
    assert scanner.state(log).truncations == 1


def test_rotation_drains_old_file_then_follows_new(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    write(log, "line1\n")
    scanner = LogScanner(FAULTS)
    scanner.add(log)
    scanner.poll()
    write(log, "proc died unexpectedly in old\n")  # written just before rotation
    os.rename(log, tmp_path / "a.log.1")
    write(log, "MEMORY_VIOLATION in new\n")
    found = scanner.poll()
    assert sorted(m.line for m in found) == [
        "MEMORY_VIOLATION in new",
        "proc died unexpectedly in old",
    ]
    assert scanner.state(log).rotations == 1


def test_from_end_ignores_stale_fault_in_reused_log(tmp_path: Path) -> None:
    log = tmp_path / "reused.log"
    write(log, "old run: proc died unexpectedly\n")
    scanner = LogScanner(FAULTS)
    scanner.add(log, from_end=True)
    assert scanner.poll() == []
    write(log, "new run fine\n")
    assert scanner.poll() == []
    fresh = LogScanner(FAULTS)
    fresh.add(log)
    assert len(fresh.poll()) == 1  # without from_end the stale line is found: the flag matters


def test_missing_file_is_picked_up_when_it_appears(tmp_path: Path) -> None:
    log = tmp_path / "later.log"
    scanner = LogScanner(FAULTS)
    scanner.add(log)
    assert scanner.poll() == []
    write(log, "MEMORY_VIOLATION\n")
    assert len(scanner.poll()) == 1


def test_markers_counted_and_line_with_two_patterns_reported_once(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    scanner = LogScanner(FAULTS, marker_patterns=["Engine Core: output send"])
    scanner.add(log)
    write(log, "Engine Core: output send 3\nEngine Core: output send 1\nother\n")
    write(log, "MEMORY_VIOLATION and Memory access fault by GPU\n")
    found = scanner.poll()
    assert len(found) == 1
    assert scanner.marker_count() == 2


def test_tail_is_bounded(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    write(log, "".join(f"line {i}\n" for i in range(10_000)))
    scanner = LogScanner([], tail_lines=20)
    scanner.add(log)
    scanner.poll()
    assert scanner.tail(log, lines=5) == [f"line {i}" for i in range(9995, 10_000)]
    assert len(scanner.state(log).tail) == 20


def test_invalid_pattern_is_config_error() -> None:
    with pytest.raises(ConfigError, match="invalid log pattern"):
        LogScanner(["(unclosed"])


def test_follower_sees_fault_within_a_second(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("")
    scanner = LogScanner(FAULTS)
    scanner.add(log)
    with LogFollower(scanner, interval_s=0.1) as follower:
        time.sleep(0.3)
        written = time.monotonic()
        threading.Timer(0, lambda: write(log, "proc died unexpectedly\n")).start()
        assert follower.fault_event.wait(2.0)
        latency = time.monotonic() - written
        matches = follower.take_matches()
    assert [m.pattern for m in matches] == ["proc died unexpectedly"]
    assert latency < 1.0
