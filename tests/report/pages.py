"""One real run of every kind a report is written for, in one runs directory, through the real
CLI: a command run, a bench (INVALID: fewer requests than its minimum, as most quick benches
are), the same bench held to a bar it meets (VALID), a second bench against a slower server
(for a comparison), a sweep (runs sharing a group), a flow with a bench workload against the
fake engine (no GPU), a server sweep, and the history of output_throughput over them all.

A stand-in `nvidia-smi` (first on PATH) gives the real GPU sampler two GPUs with memory, power
and utilisation; the flow runs with none, as on a CPU engine.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.fixtures.fake_openai_server import free_port
from tests.helpers import FAKE_ENGINE_TOML, proctor
from tests.report import runs

SMI = """#!{py}
import sys
args = " ".join(sys.argv[1:])
if "--query-gpu" in args:
    print("0, GPU-aaa, NVIDIA H200, 9000, 143771, 97, 570.1, 312.5, 1980, 61")
    print("1, GPU-bbb, NVIDIA H200, 4500, 143771, 40, 570.1, 180.0, 1980, 55")
elif "--query-compute-apps" in args:
    pass
else:
    sys.exit(2)
"""

BENCH = (
    "--isl",
    "8",
    "--osl",
    "8",
    "--concurrency",
    "4",
    "--num-prompts",
    "24",
    "--num-warmups",
    "2",
    "--tokenizer-mode",
    "approx",
    "--gpu-sample",
    "0.2",
    "--idle-power-w",
    "100",
    "--save-detailed",
)

KINDS = ("command", "bench", "compare", "sweep", "flow", "server-sweep", "history")


@dataclass
class Store:
    root: Path
    runs_dir: Path
    work: Path  # the working directory: its proctor.toml has the fake engine
    env: dict[str, str]
    ids: dict[str, str]


def make_store(root: Path) -> Store:
    tools = root / "tools"
    tools.mkdir(parents=True, exist_ok=True)
    (tools / "nvidia-smi").write_text(SMI.format(py=sys.executable))
    (tools / "nvidia-smi").chmod(0o755)
    work = root / "work"
    work.mkdir(exist_ok=True)
    (work / "proctor.toml").write_text(FAKE_ENGINE_TOML)
    runs_dir = root / "runs"
    env = {
        "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
        "PROCTOR_RUNS_DIR": str(runs_dir),
        "PROCTOR_STATE_DIR": str(root / "state"),
    }
    return Store(root, runs_dir, work, env, {})


def cli(store: Store, *args: str, timeout: float = 300) -> str:
    """`proctor ARGS --json` in the store (--json before any `--`); its JSON output."""
    cut = args.index("--") if "--" in args else len(args)
    r = proctor(*args[:cut], "--json", *args[cut:], env=store.env, cwd=store.work, timeout=timeout)
    assert r.returncode in (0, 1), (
        f"proctor {args}: {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    )
    return r.stdout


def make_runs(store: Store) -> Store:
    """A run of every kind; store.ids maps each kind (and the second bench) to a report ref."""
    ids = store.ids
    r = proctor(
        "run",
        "--name",
        "sleepy",
        "--gpu-sample",
        "0.2",
        "--",
        "sh",
        "-c",
        "sleep 1.5",
        env=store.env,
        cwd=store.work,
    )
    ids["command"] = runs.run_id_of(r)
    with runs.fake_server("--ttft", "0.01", "--itl", "0.003") as fast:
        ids["bench"] = json.loads(cli(store, "bench", "--base-url", fast, *BENCH))["run_id"]
        # The same bench held to a bar it meets: VALID (the history page draws both verdicts).
        valid = (*BENCH, "--min-requests", "8", "--min-window", "0")
        ids["bench-valid"] = json.loads(cli(store, "bench", "--base-url", fast, *valid))["run_id"]
        env = runs.Env(store.runs_dir, {**os.environ, **store.env}, store.root / "gpu-state")
        runs.sweep_runs(env, fast, "sweep-a", [1, 2, 4], 8)
        ids["sweep"] = "sweep-a"
    with runs.fake_server("--ttft", "0.04", "--itl", "0.006") as slow:
        ids["bench-slow"] = json.loads(cli(store, "bench", "--base-url", slow, *BENCH))["run_id"]
    ids["compare"] = ids["bench"]
    flow = store.work / "flow.toml"
    flow.write_text(f"""
[flow]
engine = "fake"
model = "m"
port = {free_port()}
poll = "1s"
gpu_sample = 0.2
extra = ["--ttft", "0.01", "--itl", "0.003"]

[[flow.workload]]
name = "bench-small"
bench = {{ isl = 8, osl = 8, concurrency = 2, num_prompts = 8, num_warmups = 0 }}
""")
    # The flow runs as on a CPU engine: no GPU at all (no nvidia-smi on its PATH).
    cpu = Store(
        store.root, store.runs_dir, store.work, {**store.env, "PATH": os.environ["PATH"]}, ids
    )
    ids["flow"] = json.loads(cli(cpu, "flow", "--file", str(flow)))["run_id"]
    summary = json.loads(
        cli(
            store,
            "sweep",
            "--engine",
            "fake",
            "--model",
            "m",
            "--port",
            str(free_port()),
            "--group",
            "mns",
            "--concurrency",
            "4",
            "--isl",
            "8",
            "--osl",
            "4",
            "--num-prompts",
            "8",
            "--poll",
            "1s",
            "--server-grid",
            "max-num-seqs=1,4",
            "--",
            "--ttft",
            "0.02",
            "--itl",
            "0.01",
        )
    )
    ids["server-sweep"] = summary["sweep"]
    return store


def report_args(store: Store, kind: str) -> list[str]:
    if kind == "history":
        return ["history", "--metric", "output_throughput", "--kind", "bench"]
    if kind == "compare":
        return ["--compare", store.ids["bench"], store.ids["bench-slow"]]
    return [store.ids[kind]]


def write_page(store: Store, kind: str, out: Path, *extra: str) -> dict[str, object]:
    """`proctor report` of `kind` into `out`; its --json answer."""
    r = proctor(
        "report",
        *report_args(store, kind),
        *extra,
        "-o",
        str(out),
        "--json",
        env=store.env,
        cwd=store.work,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    info: dict[str, object] = json.loads(r.stdout)
    return info
