"""`proctor offline`: real supervised runs of a fake offline program (and of real vLLM, slow).

The fake prints tqdm-style progress (carriage returns), a throughput line, optionally a fault
line, and exits as told. Everything goes through the real CLI in a subprocess, so exit codes
are the ones a user sees.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from proctor.spec.profiles import load_profiles
from proctor.workloads.offline import (
    DEFAULT_THROUGHPUT_PATTERNS,
    OutputScanner,
    check_free_disk,
)

REPO = Path(__file__).resolve().parents[2]

# Mounts `offline` when the lead has not yet (then this is a no-op).
_CLI = (
    "import sys\n"
    "from proctor.cli import groups\n"
    "if not any('offline' in g[2] for g in groups.GROUPS):\n"
    "    groups.GROUPS.append(('offline', None, ('offline',)))\n"
    "from proctor.cli.main import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)

FAKE = f"""#!{sys.executable}
import os, sys, time
args = sys.argv[1:]
open(os.environ.get("FAKE_MARK", os.devnull), "w").write(" ".join(args))
print("argv:", " ".join(args), flush=True)
for i in range(3):
    sys.stdout.write(f"\\rProcessed prompts: {{i + 1}}/3"); sys.stdout.flush(); time.sleep(0.05)
print()
print("Throughput: 2.50 requests/s, 1234.50 total tokens/s, 617.25 output tokens/s", flush=True)
print("gen 77 tok/s", flush=True)
mode = os.environ.get("FAKE_MODE", "ok")
if mode == "fault":
    print("EngineCore encountered a fatal error", flush=True); sys.exit(1)
if mode == "atomfault":
    print("proc died unexpectedly (exitcode=-9)", flush=True); time.sleep(60)
if mode == "sleep":
    time.sleep(60)
sys.exit(int(os.environ.get("FAKE_RC", "0")))
"""


@pytest.fixture
def fake(tmp_path: Path) -> Path:
    path = tmp_path / "fake_offline"
    path.write_text(FAKE)
    path.chmod(0o755)
    return path


def proctor(
    args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PROCTOR_RUNS_DIR": str(cwd / "runs"), **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", _CLI, *args],
        cwd=cwd,
        env=full,
        text=True,
        capture_output=True,
        timeout=timeout,
    )


def only_run(cwd: Path) -> Path:
    runs = [p for p in (cwd / "runs").iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert len(runs) == 1, runs
    return runs[0]


def metrics_doc(run: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((run / "metrics.json").read_text())  # type: ignore[no-any-return]


def test_ok_run_parses_throughput_into_metrics_record_and_store(tmp_path: Path, fake: Path) -> None:
    r = proctor(
        ["offline", "--engine", "vllm", "--model", str(tmp_path), "--cmd", "--", str(fake)],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    run = only_run(tmp_path)
    doc = metrics_doc(run)
    assert doc["kind"] == "offline" and doc["status"] == "ok" and doc["exit_code"] == 0
    assert doc["metrics"] == {
        "request_throughput": 2.5,
        "total_token_throughput": 1234.5,
        "output_throughput": 617.25,
    }
    assert doc["units"]["output_throughput"] == "tok/s"
    assert doc["disk"] and all(d["ok"] for d in doc["disk"])
    record = json.loads((run / "record.json").read_text())
    assert record["kind"] == "offline" and record["outcome"] == "ok"
    assert record["offline"]["engine"] == "vllm" and record["offline"]["entry"] == "command"
    assert record["offline"]["min_free_disk_gib"] == 10  # vllm's profile default
    log = (run / record["log"]).read_text()
    assert record["log"].startswith("offline-vllm-") and "Processed prompts: 3/3" in log
    assert "offline ok (exit 0)" in r.stderr + log
    with sqlite3.connect(tmp_path / "runs" / "proctor.sqlite") as db:
        rows = dict(db.execute("SELECT name, value FROM metrics WHERE run_id = ?", (run.name,)))
    assert rows["output_throughput"] == 617.25 and rows["total_token_throughput"] == 1234.5


def test_fault_line_is_exit_2_and_figures_printed_before_are_kept(
    tmp_path: Path, fake: Path
) -> None:
    r = proctor(
        ["offline", "--engine", "vllm", "--cmd", "--", str(fake)], tmp_path, {"FAKE_MODE": "fault"}
    )
    assert r.returncode == 2, r.stderr
    doc = metrics_doc(only_run(tmp_path))
    assert doc["status"] == "fault" and doc["exit_code"] == 1
    assert doc["faults"] == ["EngineCore encountered a fatal error"]
    assert doc["metrics"]["output_throughput"] == 617.25


def test_failing_command_without_fault_is_exit_3(tmp_path: Path, fake: Path) -> None:
    r = proctor(
        ["offline", "--engine", "vllm", "--cmd", "--", str(fake)], tmp_path, {"FAKE_RC": "5"}
    )
    assert r.returncode == 3, r.stderr
    doc = metrics_doc(only_run(tmp_path))
    assert doc["status"] == "failed" and doc["exit_code"] == 5 and doc["faults"] == []


def test_disk_guard_refuses_before_the_command_starts(tmp_path: Path, fake: Path) -> None:
    mark = tmp_path / "started"
    r = proctor(
        [
            "offline",
            "--engine",
            "vllm",
            "--model",
            str(tmp_path),
            "--min-free-disk",
            "100000000",
            "--cmd",
            "--",
            str(fake),
        ],
        tmp_path,
        {"FAKE_MARK": str(mark)},
    )
    assert r.returncode == 69, r.stderr
    assert not mark.exists()
    run = only_run(tmp_path)
    doc = metrics_doc(run)
    assert doc["status"] == "refused" and doc["exit_code"] is None and doc["metrics"] == {}
    assert "GiB free on" in doc["error"] and "--min-free-disk" in r.stderr + doc["error"]
    assert doc["disk"][0]["need_gib"] == 100000000 and not doc["disk"][0]["ok"]


def test_atom_guard_defaults_to_50_gib(tmp_path: Path, fake: Path) -> None:
    r = proctor(
        ["offline", "--engine", "atom", "--model", str(tmp_path), "--cmd", "--", str(fake)],
        tmp_path,
    )
    run = only_run(tmp_path)
    doc = metrics_doc(run)
    assert json.loads((run / "record.json").read_text())["offline"]["min_free_disk_gib"] == 50
    enough = all(d["free_gib"] >= 50 for d in doc["disk"])
    assert (r.returncode, doc["status"]) == ((0, "ok") if enough else (69, "refused"))


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A real 8 MiB filesystem (tmpfs), so the guard meets a nearly full disk."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=False)


def test_guard_measures_the_disk_holding_the_model(small_fs: Path, tmp_path: Path) -> None:
    model = small_fs / "model"
    model.mkdir()
    checks = check_free_disk(str(model), 1.0, {"HF_HOME": str(tmp_path)})
    by_what = {c.what: c for c in checks}
    assert by_what["model"].path == str(model) and by_what["model"].free_gib <= 0.01
    assert not by_what["model"].ok
    # The cache is elsewhere (the test's temp dir), measured on its own filesystem.
    assert by_what["cache"].path.startswith(str(tmp_path)) and by_what["cache"].ok


def test_entry_point_from_a_user_profile(tmp_path: Path, fake: Path) -> None:
    (tmp_path / "proctor.toml").write_text(
        textwrap.dedent(f"""
        [engines.fakeeng]
        launchers = [{{ module = "fakeeng.server" }}]
        tp_arg = "--tp"
        runtime_fault_patterns = ["FAKE FAULT"]
        [engines.fakeeng.offline]
        launchers = [{{ command = ["{fake}"], model_arg = "--model" }}]
        default_args = ["--steps", "3"]
        min_free_disk_gib = 0
        [engines.fakeeng.offline.throughput_patterns]
        output_throughput = 'gen ([0-9]+) tok/s'
    """)
    )
    mark = tmp_path / "argv"
    r = proctor(
        ["offline", "--engine", "fakeeng", "--model", "/m/x", "--tp", "2", "--", "--extra", "1"],
        tmp_path,
        {"FAKE_MARK": str(mark)},
    )
    assert r.returncode == 0, r.stderr
    assert mark.read_text() == "--model /m/x --tp 2 --steps 3 --extra 1"
    run = only_run(tmp_path)
    doc = metrics_doc(run)
    assert doc["metrics"] == {"output_throughput": 77.0}  # the profile's pattern only
    assert doc["disk"] == []  # guard off
    record = json.loads((run / "record.json").read_text())
    assert record["offline"]["entry"] == "profile" and record["name"] == "offline-fakeeng-x"


def test_bad_input_is_refused_before_any_run_exists(tmp_path: Path, fake: Path) -> None:
    no_entry = proctor(["offline", "--engine", "transformers", "--model", "/m"], tmp_path)
    assert no_entry.returncode == 64 and "--cmd" in no_entry.stderr
    missing = proctor(["offline", "--engine", "vllm", "--cmd", "--", "/no/such/program"], tmp_path)
    assert missing.returncode == 69 and "not found" in missing.stderr
    unknown = proctor(["offline", "--engine", "nope", "--cmd", "--", str(fake)], tmp_path)
    assert unknown.returncode == 64 and "unknown engine profile" in unknown.stderr
    no_model = proctor(["offline", "--engine", "atom"], tmp_path)
    assert no_model.returncode == 64
    assert not (tmp_path / "runs").exists() or not any(
        p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")
    )


def test_timeout_stops_the_run_and_keeps_its_figures(tmp_path: Path, fake: Path) -> None:
    # The limit leaves the fake (a Python start-up, slow on a loaded machine) time to print
    # its figures before it sleeps; the limit is sent on time (the wrapper's deadline guard).
    t0 = time.monotonic()
    r = proctor(
        ["offline", "--engine", "vllm", "--timeout", "8s", "--cmd", "--", str(fake)],
        tmp_path,
        {"FAKE_MODE": "sleep"},
    )
    assert r.returncode == 4, r.stderr
    assert time.monotonic() - t0 < 50
    doc = metrics_doc(only_run(tmp_path))
    assert doc["status"] == "stopped" and doc["metrics"]["output_throughput"] == 617.25


def test_later_sigterms_do_not_cut_the_stop_short(tmp_path: Path, fake: Path) -> None:
    # At its time limit a supervised command gets SIGTERM twice, from the wrapper's deadline
    # guard and from its kill ladder. The second used to land after the handler was restored
    # and before the last save, so the stopped run's metrics.json said "running" (CI, stop
    # 31). Here SIGTERM comes back to back until the runner is gone.
    out = tmp_path / "out"
    script = (
        "import sys; from pathlib import Path; from proctor.workloads.offline import run_offline; "
        "run_offline([sys.argv[1]], Path(sys.argv[2]), engine='vllm', echo=False)"
    )
    env = {**os.environ, "FAKE_MODE": "sleep"}
    runner = subprocess.Popen(
        [sys.executable, "-c", script, str(fake), str(out)], env=env, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 60
        while "output_throughput" not in _figures(out / "metrics.json"):
            assert runner.poll() is None and time.monotonic() < deadline, "no figures printed"
            time.sleep(0.05)
        deadline = time.monotonic() + 30
        while runner.poll() is None and time.monotonic() < deadline:
            try:
                os.killpg(runner.pid, signal.SIGTERM)
            except ProcessLookupError:
                break
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(runner.pid, signal.SIGKILL)
        runner.wait()
    doc = json.loads((out / "metrics.json").read_text())
    assert doc["status"] == "stopped" and doc["metrics"]["output_throughput"] == 617.25


def _figures(path: Path) -> dict[str, float]:
    try:
        return json.loads(path.read_text())["metrics"]  # type: ignore[no-any-return]
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return {}


def test_drain_offline_uses_the_runs_engine_fault_patterns(tmp_path: Path, fake: Path) -> None:
    # "proc died unexpectedly" is an ATOM fault pattern, not a vLLM one (drain's default).
    r = proctor(
        [
            "offline",
            "--engine",
            "atom",
            "--min-free-disk",
            "0",
            "--detach",
            "--cmd",
            "--",
            str(fake),
        ],
        tmp_path,
        {"FAKE_MODE": "atomfault"},
    )
    assert r.returncode == 0, r.stderr
    run_id = r.stdout.strip().splitlines()[-1]
    try:
        d = proctor(["drain", "--offline", run_id, "--poll", "1s", "--max", "40s"], tmp_path)
        assert d.returncode == 2, d.stdout + d.stderr
        assert "proc died unexpectedly" in d.stdout + d.stderr
    finally:
        proctor(["runs", "stop", run_id], tmp_path)


def test_scanner_reads_split_lines_and_carriage_returns() -> None:
    s = OutputScanner(DEFAULT_THROUGHPUT_PATTERNS, ["fatal"])
    text = (
        b"50%| 2/4 [est. speed input: 10.00 toks/s, output: 20.00 toks/s]\r"
        b"100%| 4/4 [est. speed input: 12.34 toks/s, output: 45.60 toks/s]\n"
        b"Output token throughput (tok/s):   33.20\nPeak output token throughput (tok/s): 44.0\n"
        b"a fatal error\nlast line without newline: 9.5 output tokens/s"
    )
    for i in range(0, len(text), 7):  # arbitrary chunking
        s.feed(text[i : i + 7])
    assert s.metrics["input_throughput"] == 12.34
    assert s.metrics["output_throughput"] == 33.2  # the label, not the "Peak" line
    assert s.finish() and s.metrics["output_throughput"] == 9.5
    assert s.faults == ["a fatal error"]


def test_builtin_offline_profiles() -> None:
    engines = load_profiles().engines
    assert engines["atom"].offline.min_free_disk_gib == 50
    assert engines["atom"].offline.launchers[0].module == "atom.examples.simple_inference"
    assert engines["atom"].offline.tp_arg == "-tp"
    assert engines["sglang"].offline.launchers[0].module == "sglang.bench_offline_throughput"
    assert engines["transformers"].offline.launchers == []


# vLLM's engine core is a spawned process: the script needs the __main__ guard.
VLLM_SCRIPT = """
import sys
from vllm import LLM, SamplingParams

if __name__ == "__main__":
    llm = LLM(model=sys.argv[1], dtype="float32", max_model_len=512, enforce_eager=True)
    prompts = ["The capital of France is", "1, 2, 3,", "Hello, my name is", "The sky is"]
    outs = llm.generate(prompts, SamplingParams(max_tokens=16, temperature=0, ignore_eos=True))
    print("generated", sum(len(o.outputs[0].token_ids) for o in outs), "tokens", flush=True)
"""


@pytest.mark.slow
@pytest.mark.engine
def test_real_vllm_offline_run(tmp_path: Path) -> None:
    from tests.infra.engines import engine_info

    info = engine_info()
    script = tmp_path / "offline_vllm.py"
    script.write_text(VLLM_SCRIPT)
    r = proctor(
        [
            "offline",
            "--engine",
            "vllm",
            "--model",
            str(info.model_dir),
            "--min-free-disk",
            "1",
            "--env",
            "VLLM_CPU_KVCACHE_SPACE=1",
            "--env",
            "HF_HUB_OFFLINE=1",
            "--cmd",
            "--",
            str(info.vllm_python),
            str(script),
            str(info.model_dir),
        ],
        tmp_path,
        timeout=400,
    )
    run = only_run(tmp_path)
    log = (run / json.loads((run / "record.json").read_text())["log"]).read_text()
    assert r.returncode == 0, log[-3000:]
    assert "generated 64 tokens" in log
    doc = metrics_doc(run)
    # vLLM's own progress bar: "est. speed input: I toks/s, output: O toks/s".
    assert doc["metrics"]["output_throughput"] > 0 and doc["metrics"]["input_throughput"] > 0
    assert "est. speed" in doc["lines"]["output_throughput"]


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_a_disk_guard_that_is_no_number_is_refused(tmp_path: Path, fake: Path, value: str) -> None:
    # nan compared false with every free space: the guard was off while the record named it.
    r = proctor(
        [
            "offline",
            "--engine",
            "vllm",
            "--model",
            str(tmp_path),
            "--min-free-disk",
            value,
            "--cmd",
            "--",
            str(fake),
        ],
        tmp_path,
    )
    assert r.returncode == 64, r.stdout + r.stderr
    # nan and inf are refused by the option itself, as for every float option (issue 20).
    said = "GiB >= 0" if value == "-1" else f"--min-free-disk {value}: not a finite number"
    assert "--min-free-disk" in r.stderr and said in r.stderr
    assert not (tmp_path / "runs").exists() or not any(
        p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")
    )
