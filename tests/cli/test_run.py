"""`proctor run` end to end: real processes, real files, real exit statuses."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import psutil
import pytest

from proctor.record.schema import json_schema
from tests.helpers import REPO, only_run, proctor, proctor_popen


def test_exit_status_passes_through(isolated_runs: Path) -> None:
    result = proctor("run", "--", "bash", "-c", "exit 3")
    assert result.returncode == 3
    run = only_run(isolated_runs)
    assert (run / "exit_code").read_text() == "3\n"
    record = json.loads((run / "record.json").read_text())
    assert record["outcome"] == "failed"
    assert record["exit"] == {"code": 3, "signal": None, "decided_by": "command"}


@pytest.mark.parametrize(
    ("sig", "name"), [(signal.SIGKILL, "SIGKILL"), (signal.SIGTERM, "SIGTERM")]
)
def test_signal_death_is_recorded_as_such(isolated_runs: Path, sig: int, name: str) -> None:
    result = proctor("run", "--", "bash", "-c", f"kill -{int(sig)} $$")
    assert result.returncode == 128 + sig
    run = only_run(isolated_runs)
    assert (run / "exit_code").read_text() == f"{128 + sig} {name}\n"


def test_success_and_record_validates_against_schema(isolated_runs: Path) -> None:
    result = proctor("run", "--name", "hello", "--env", "RUST_LOG=debug", "--", "echo", "hi")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hi\n"
    run = only_run(isolated_runs)
    assert (run / "hello.log").read_text() == "hi\n"
    record = json.loads((run / "record.json").read_text())
    committed = json.loads((REPO / "src/proctor/record/record.schema.json").read_text())
    assert committed == json_schema(), "regenerate: python -m proctor.record.schema"
    jsonschema.validate(record, committed)
    assert record["outcome"] == "ok"
    assert record["env_overrides"] == {"RUST_LOG": "debug"}
    assert record["options"]["env.RUST_LOG"]["origin"] == "flag"
    assert record["options"]["runs_dir"]["origin"] == "env:PROCTOR_RUNS_DIR"
    for stamp in ("created_at", "started_at", "ended_at"):
        assert record[stamp][-6] in "+-" and record[stamp][-3] == ":", record[stamp]
    assert record["process"]["pid"] > 0 and record["wrapper"]["pid"] > 0
    assert record["host"]["cpu_count"] >= 1
    assert record["gpu"]["present"] in (True, False)
    if not record["gpu"]["present"]:
        assert record["gpu"].get("reason")


def test_stdout_and_stderr_interleave_in_order(isolated_runs: Path) -> None:
    script = (
        "import sys\n"
        "for i in range(200):\n"
        "    (sys.stdout if i % 2 == 0 else sys.stderr).write(f'line {i}\\n')\n"
        "    (sys.stdout if i % 2 == 0 else sys.stderr).flush()\n"
    )
    result = proctor("run", "--name", "interleave", "--", sys.executable, "-c", script)
    assert result.returncode == 0
    log = (only_run(isolated_runs) / "interleave.log").read_text().splitlines()
    assert log == [f"line {i}" for i in range(200)]


def test_name_is_derived_from_the_command(isolated_runs: Path) -> None:
    proctor("run", "--", "true", "--release", check=True)
    assert (only_run(isolated_runs) / "true-release.log").exists()


def _wait_until_go(go: Path) -> str:
    """A shell loop that ends once `go` exists: a job that outlasts a test's look at it however
    slow the machine is (a fixed sleep races the CLI's start-ups)."""
    return f"until [ -e {go} ]; do sleep 0.05; done"


@pytest.fixture
def go(tmp_path: Path) -> Iterator[Path]:
    """The go file of `_wait_until_go`; made at teardown too, so a failed test leaves no job
    waiting."""
    path = tmp_path / "go"
    yield path
    path.touch()


def _wait_for(predicate, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_exit_code_survives_sigkill_of_the_controller(isolated_runs: Path, go: Path) -> None:
    controller = proctor_popen("run", "--", "bash", "-c", f"{_wait_until_go(go)}; exit 7")
    _wait_for(lambda: isolated_runs.exists() and any(isolated_runs.glob("*/wrapper.pid")))
    controller.send_signal(signal.SIGKILL)
    controller.wait(timeout=30)
    run = only_run(isolated_runs)
    assert not (run / "exit_code").exists()
    go.touch()
    waited = proctor("runs", "wait", run.name, "--timeout", "30s")
    assert waited.returncode == 7, waited.stderr
    assert (run / "exit_code").read_text() == "7\n"


def test_detached_run_and_runs_commands(isolated_runs: Path, go: Path) -> None:
    started = proctor(
        "run",
        "--detach",
        "--json",
        "--",
        "bash",
        "-c",
        f"echo started; {_wait_until_go(go)}; exit 5",
    )
    assert started.returncode == 0, started.stderr
    info = json.loads(started.stdout)
    run_id = info["run_id"]
    listed = json.loads(proctor("runs", "list", "--json", check=True).stdout)
    assert [r["id"] for r in listed] == [run_id]
    assert listed[0]["outcome"] in ("running", "starting")
    go.touch()
    assert proctor("runs", "wait", run_id).returncode == 5
    logs = proctor("runs", "logs", run_id)
    assert logs.stdout == "started\n"
    shown = json.loads(proctor("runs", "show", run_id, "--json", check=True).stdout)
    assert shown["outcome"] == "failed" and shown["exit"]["code"] == 5
    assert proctor("runs", "verify", run_id).returncode == 0


def _tree_script(tmp: Path) -> str:
    """A child ignoring SIGTERM, and a grandchild that left the process group (setsid)."""
    pids = tmp / "pids"
    return (
        f"trap '' TERM; "
        f"(trap '' TERM; sleep 300) & echo $! >> {pids}; "
        f"setsid sleep 300 & echo $! >> {pids}; "
        f"echo $$ >> {pids}; sleep 300"
    )


def test_timeout_leaves_no_process_of_the_tree_alive(isolated_runs: Path, tmp_path: Path) -> None:
    # 3 s: time for bash to set its traps and start the tree on a loaded machine (the limit is
    # sent on time, from the command's start).
    result = proctor(
        "run", "--timeout", "3s", "--grace", "1s", "--", "bash", "-c", _tree_script(tmp_path)
    )
    assert result.returncode == 4, result.stderr
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert len(pids) == 3
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    record = json.loads((only_run(isolated_runs) / "record.json").read_text())
    assert record["outcome"] == "timeout"
    assert record["exit"]["decided_by"] == "proctor"
    assert record["exit"]["command"]["signal"] == "SIGKILL"  # it ignored SIGTERM
    assert (only_run(isolated_runs) / "exit_code").read_text() == "4 timeout 137 SIGKILL\n"


def test_runs_stop_stops_the_whole_tree(isolated_runs: Path, tmp_path: Path) -> None:
    started = proctor("run", "-d", "--grace", "1s", "--", "bash", "-c", _tree_script(tmp_path))
    run_id = started.stdout.strip()
    _wait_for(
        lambda: (tmp_path / "pids").exists() and len((tmp_path / "pids").read_text().split()) == 3
    )
    stopped = proctor("runs", "stop", run_id, "--json")
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout)["outcome"] == "stopped"
    for pid in map(int, (tmp_path / "pids").read_text().split()):
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    again = proctor("runs", "stop", run_id, "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["stop_sent"] is False


def test_runs_stop_after_sigkill_of_the_wrapper_stops_what_it_started(
    isolated_runs: Path, tmp_path: Path
) -> None:
    started = proctor(
        "run", "-d", "--json", "--grace", "1s", "--", "bash", "-c", _tree_script(tmp_path)
    )
    run = isolated_runs / json.loads(started.stdout)["run_id"]
    _wait_for(
        lambda: (tmp_path / "pids").exists() and len((tmp_path / "pids").read_text().split()) == 3
    )
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    wrapper = json.loads((run / "wrapper.pid").read_text())["pid"]
    os.kill(wrapper, signal.SIGKILL)
    _wait_for(
        lambda: (
            not psutil.pid_exists(wrapper)
            or psutil.Process(wrapper).status() == psutil.STATUS_ZOMBIE
        )
    )
    assert all(psutil.pid_exists(pid) for pid in pids)  # orphans now
    stopped = proctor("runs", "stop", run.name, "--json")
    assert stopped.returncode == 0, stopped.stderr
    view = json.loads(stopped.stdout)
    assert view["stop_sent"] is False and view["outcome"] == "unknown"
    assert set(pids) <= set(view["orphans"]["found"])
    assert set(pids) <= set(view["orphans"]["terminated"]) | set(view["orphans"]["killed"])
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    record = json.loads((run / "record.json").read_text())
    assert record["outcome"] == "unknown" and "wrapper died" in record["error"]
    assert not (run / "exit_code").exists()  # nobody waited for it: the status is unknown
    assert proctor("runs", "verify", run.name).returncode == 0
    # Said in words, and idempotent: a second stop finds nothing and says so.
    again = proctor("runs", "stop", run.name)
    assert again.returncode == 0 and "no process of it is alive" in again.stderr


def test_ctrl_c_stops_the_run_and_exits_130(isolated_runs: Path) -> None:
    controller = proctor_popen("run", "--", "sleep", "300")
    _wait_for(lambda: isolated_runs.exists() and any(isolated_runs.glob("*/wrapper.pid")))
    run = only_run(isolated_runs)
    _wait_for(lambda: json.loads((run / "record.json").read_text()).get("process") is not None)
    controller.send_signal(signal.SIGINT)
    assert controller.wait(timeout=30) == 130, controller.communicate()[1]
    record = json.loads((run / "record.json").read_text())
    assert record["outcome"] == "stopped"
    assert (run / "exit_code").read_text() == "130 stopped 143 SIGTERM\n"


def test_ctrl_c_in_the_start_window_still_stops_the_run(isolated_runs: Path) -> None:
    """A Ctrl-C the moment the wrapper exists (before the controller could have installed
    its handler without the signal block) stops the run: nothing is left going."""
    controller = proctor_popen("run", "--", "sleep", "300")
    _wait_for(lambda: isolated_runs.exists() and any(isolated_runs.glob("*/wrapper.pid")), 30)
    controller.send_signal(signal.SIGINT)
    assert controller.wait(timeout=30) == 130, controller.communicate()[1]
    run = only_run(isolated_runs)
    _wait_for(lambda: (run / "exit_code").exists(), 30)
    wrapper = json.loads((run / "wrapper.pid").read_text())
    _wait_for(
        lambda: (
            not psutil.pid_exists(wrapper["pid"])
            or psutil.Process(wrapper["pid"]).status() == psutil.STATUS_ZOMBIE
        ),
        30,
    )
    record = json.loads((run / "record.json").read_text())
    assert record["outcome"] == "stopped", record
    assert not psutil.pid_exists(record["process"]["pid"])


def test_key_attaches_instead_of_starting_a_copy(
    isolated_runs: Path, tmp_path: Path, go: Path
) -> None:
    marker = tmp_path / "starts"
    cmd = ["bash", "-c", f"echo x >> {marker}; {_wait_until_go(go)}; exit 9"]
    try:
        first = proctor("run", "-d", "--key", "bench-a", "--json", "--", *cmd)
        second = proctor("run", "-d", "--key", "bench-a", "--json", "--", *cmd)
        one, two = json.loads(first.stdout), json.loads(second.stdout)
        assert one["run_id"] == two["run_id"] and two["attached"] is True
        attached = proctor_popen("run", "--key", "bench-a", "--", *cmd)
        assert attached.stderr is not None
        said = attached.stderr.readline()
        assert "attaching to" in said, said
    finally:
        go.touch()  # the run ends once the foreground one is attached (or the test failed)
    _, err = attached.communicate(timeout=60)
    assert attached.returncode == 9, err
    assert marker.read_text() == "x\n"
    # Once it has ended, the key is free again.
    third = json.loads(proctor("run", "-d", "--key", "bench-a", "--json", "--", "true").stdout)
    assert third["run_id"] != one["run_id"] and third["attached"] is False


CANARY = "canary-7f3a9c2e-do-not-leak"


def test_secret_never_appears_in_run_files_or_output(isolated_runs: Path) -> None:
    env = {"PROCTOR_TEST_API_KEY": CANARY}
    outputs = [
        proctor("run", "--env", f"HF_TOKEN={CANARY}", "--", "true", f"--api-key={CANARY}", env=env),
        proctor("run", "--dry-run", "--json", "--env", f"HF_TOKEN={CANARY}", "--", "true", env=env),
        proctor("plan", "--env", f"MY_SECRET={CANARY}", "--", "echo", CANARY, env=env),
        proctor("runs", "list", "--json", env=env),
        proctor("runs", "show", "last", "--json", env=env),
    ]
    for result in outputs:
        assert CANARY not in result.stdout + result.stderr
    assert outputs[0].returncode == 0, outputs[0].stderr
    files = [p for p in isolated_runs.rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert CANARY.encode() not in path.read_bytes(), path
    record = json.loads((only_run(isolated_runs) / "record.json").read_text())
    assert record["env_overrides"]["HF_TOKEN"] == "***"


def test_dry_run_prints_origins_and_runs_nothing(isolated_runs: Path, tmp_path: Path) -> None:
    (tmp_path / "work" / "proctor.toml").write_text(
        '[run]\ngrace = "3s"\nenv = { RUST_LOG = "debug" }\n'
    )
    result = proctor("run", "--dry-run", "--json", "--timeout", "2m", "--", "true")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    options = plan["options"]
    assert options["timeout_s"] == {"value": 120.0, "origin": "flag"}
    assert options["grace_s"]["value"] == 3.0 and options["grace_s"]["origin"].startswith("config:")
    assert options["env.RUST_LOG"]["value"] == "debug"
    assert options["gpu_sample_s"] == {"value": 3.0, "origin": "default"}
    assert options["runs_dir"]["origin"] == "env:PROCTOR_RUNS_DIR"
    assert not isolated_runs.exists()


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["run"], 64, "no command"),
        (["run", "--bogus", "--", "true"], 64, "No such option"),
        (["run", "--timeout", "5x", "--", "true"], 64, "invalid --timeout"),
        (["run", "--env", "NOEQUALS", "--", "true"], 64, "NAME=VALUE"),
        (["run", "--runs-dir", "/proc/proctor-nope", "--", "true"], 64, "--runs-dir"),
        (["run", "--", "no-such-program-xyz"], 69, "not found"),
        (["run", "--", "./missing.sh"], 69, "not found"),
    ],
)
def test_bad_input_is_one_clear_line(
    isolated_runs: Path, args: list[str], code: int, words: str
) -> None:
    result = proctor(*args)
    assert result.returncode == code, (result.stdout, result.stderr)
    assert words in result.stderr
    assert "Traceback" not in result.stderr
    runs = [p for p in isolated_runs.iterdir() if p.is_dir()] if isolated_runs.exists() else []
    assert not [r for r in runs if not r.name.startswith(".")]


def test_invalid_config_names_the_field(isolated_runs: Path, tmp_path: Path) -> None:
    (tmp_path / "work" / "proctor.toml").write_text("[run]\ngpu_sample = -1\n")
    result = proctor("run", "--", "true")
    assert result.returncode == 64
    assert "run.gpu_sample" in result.stderr


def test_missing_exit_code_reads_as_unknown(isolated_runs: Path) -> None:
    run_id = proctor("run", "-d", "--", "sleep", "60").stdout.strip()
    run = isolated_runs / run_id
    _wait_for(lambda: json.loads((run / "record.json").read_text()).get("wrapper") is not None)
    wrapper = json.loads((run / "wrapper.pid").read_text())["pid"]
    child = json.loads((run / "record.json").read_text())["process"]["pid"]
    os.kill(wrapper, signal.SIGKILL)
    os.kill(child, signal.SIGKILL)
    _wait_for(
        lambda: not psutil.pid_exists(wrapper) or psutil.Process(wrapper).status() == "zombie"
    )
    waited = proctor("runs", "wait", run_id)
    assert waited.returncode == 6
    assert "unknown" in waited.stderr
    listed = json.loads(proctor("runs", "list", "--json").stdout)
    assert listed[0]["outcome"] == "unknown"


def test_reindex_rebuilds_the_same_rows(isolated_runs: Path) -> None:
    from proctor.store.db import Store

    proctor("run", "--", "true", check=True)
    proctor("run", "--", "bash", "-c", "exit 2")
    (only_dirs := [p for p in isolated_runs.iterdir() if p.is_dir() and not p.name.startswith(".")])
    assert len(only_dirs) == 2
    with Store(isolated_runs / "proctor.sqlite") as store:
        before = list(store.all_rows())
    assert proctor("runs", "reindex", "--json", check=True).stdout
    with Store(isolated_runs / "proctor.sqlite") as store:
        after = list(store.all_rows())
    assert before == after and len(before) == 2
    (isolated_runs / "proctor.sqlite").unlink()
    proctor("runs", "reindex", check=True)
    with Store(isolated_runs / "proctor.sqlite") as store:
        assert list(store.all_rows()) == before


def test_manifest_detects_one_changed_byte(isolated_runs: Path) -> None:
    proctor("run", "--name", "m", "--", "echo", "payload", check=True)
    run = only_run(isolated_runs)
    assert proctor("runs", "verify", run.name).returncode == 0
    log = run / "m.log"
    data = bytearray(log.read_bytes())
    data[0] ^= 0x01
    log.write_bytes(bytes(data))
    result = proctor("runs", "verify", run.name, "--json")
    assert result.returncode == 2
    assert json.loads(result.stdout)["changed"] == ["m.log"]


def test_a_180kb_command_line_runs(isolated_runs: Path) -> None:
    words = [f"word{i:05d}-" + "x" * 20 for i in range(7000)]  # ~185 KB in all
    assert sum(len(w) + 1 for w in words) > 180_000
    script = "import sys; print(len(sys.argv) - 1, sum(map(len, sys.argv[1:])))"
    result = proctor("run", "--", sys.executable, "-c", script, *words)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == [str(len(words)), str(sum(map(len, words)))]
    assert "Traceback" not in result.stderr


def test_json_in_the_foreground_keeps_stdout_json_only(isolated_runs: Path) -> None:
    result = proctor("run", "--json", "--", "sh", "-c", "echo out-line; echo err-line >&2; exit 3")
    assert result.returncode == 3
    doc = json.loads(result.stdout)  # the whole of stdout is one JSON document
    assert doc["exit"]["code"] == 3 and doc["state"] == "finished"
    # The command's output is not lost: in the run's log, and copied to stderr.
    assert "out-line" in result.stderr and "err-line" in result.stderr
    log = Path(doc["log"]).read_text()
    assert "out-line" in log and "err-line" in log


def test_verify_never_reads_outside_the_run_directory(isolated_runs: Path, tmp_path: Path) -> None:
    """A tampered manifest that names `../..` paths or an absolute path is a mismatch (2), and
    the file it names is not read as if it were the run's."""
    assert proctor("run", "--gpu-sample", "0", "--", "true").returncode == 0
    run = only_run(isolated_runs)
    secret = tmp_path / "outside.txt"
    secret.write_text("not the run's\n")
    import hashlib

    digest = hashlib.sha256(secret.read_bytes()).hexdigest()
    manifest = run / "manifest.sha256"
    rel = os.path.relpath(secret, run)
    manifest.write_text(manifest.read_text() + f"{digest}  {rel}\n{digest}  {secret}\n")
    r = proctor("runs", "verify", run.name, "--json")
    assert r.returncode == 2, r.stdout + r.stderr
    view = json.loads(r.stdout)
    assert view["verified"] is False and sorted(view["outside"]) == sorted([rel, str(secret)])
