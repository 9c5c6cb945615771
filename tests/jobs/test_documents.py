"""The documents a job's run leaves, read through their models (proctor.jobs.documents).

The law: every document a writer produces (real benches against the fake server, a real
sweep and SLO search through the CLI, the GSM8K and offline workloads on real processes, the
server sweep's summary writer) loads as its model and dumps back exactly as written. Then: a
damaged document is a ConfigError that says where, and the committed JSON Schemas are the
models' own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from proctor.errors import ConfigError, InternalError, ProctorError
from proctor.jobs.documents import (
    BenchDocument,
    EvalDocument,
    GridSummary,
    OfflineDocument,
    SloSearchResult,
    SweepSummary,
    load_document,
    schema_texts,
    write_checked,
)
from proctor.jobs.eval import EvalJob
from proctor.record.recorder import Recorder
from proctor.server_sweep import summarize_grid
from proctor.workloads.gsm8k import run_gsm8k
from proctor.workloads.offline import run_offline
from tests.fixtures.fake_openai_server import FakeServer
from tests.helpers import proctor

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
DATASETS = REPO / "tests" / "data" / "datasets"
TRACES = REPO / "tests" / "data" / "traces"
SMALL = ["--isl", "8", "--osl", "4", "--prompt-multiplier", "2"]


def as_text(data: object) -> str:
    return json.dumps(data, sort_keys=True)


def reads_back(path: Path, model: type) -> object:
    """The document at `path` loads as `model` and dumps back exactly as written."""
    written = json.loads(path.read_text())
    doc = load_document(path)
    assert isinstance(doc, model), (path, type(doc))
    assert as_text(doc.dump()) == as_text(written)  # as text: true is not 1
    assert as_text(load_document(written).dump()) == as_text(written)  # from parsed content
    return doc


def loadgen(base_url: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "proctor.workloads.loadgen", "--base-url", base_url]
    argv += ["--output-dir", str(out), "--concurrency", "2", "--no-progress", *SMALL, *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("server", "extra", "code"),
    [
        ({}, (), 0),
        ({}, ("--repeat", "2", "--request-rate", "50", "--save-detailed"), 0),
        ({}, ("--dataset", f"multi-turn:{DATASETS / 'conversations.jsonl'}"), 0),
        ({}, ("--dataset", f"sharegpt:{DATASETS / 'sharegpt.json'}", "--workers", "2"), 0),
        ({}, ("--percentiles", "50,90,99.9", "--goodput", "ttft:1000"), 0),
        ({}, ("--dataset", "shared-prefix", "--prefix-groups", "2", "--repeat", "2"), 0),
        ({}, ("--dataset", f"trace:{TRACES / 'burstgpt_head.csv'}", "--trace-speed", "1000"), 0),
        ({"mode": "http500", "fault_every": 3}, (), 3),
        ({"mode": "http500", "fault_every": 1}, (), 3),
        ({"metrics": False}, ("--server-metrics", "0"), 0),
    ],
    ids=[
        "plain",
        "repeats-rate",
        "multi-turn",
        "sharegpt-workers",
        "percentiles",
        "shared-prefix-repeats",
        "trace",
        "some-fail",
        "all-fail",
        "no-metrics",
    ],
)
def test_every_bench_document_reads_back_as_written(
    tmp_path: Path, server: dict[str, object], extra: tuple[str, ...], code: int
) -> None:
    with FakeServer(itl=0.001, **server) as srv:  # type: ignore[arg-type]
        done = loadgen(srv.base_url, tmp_path, *extra)
    assert done.returncode == code, done.stderr[-2000:]
    doc = reads_back(tmp_path / "metrics.json", BenchDocument)
    assert isinstance(doc, BenchDocument) and doc.validity is not None
    assert doc.verdict is not None and doc.verdict.ok is (code == 0)


def test_a_supervised_sweep_and_an_slo_search_leave_documents_that_read_back(
    isolated_runs: Path,
) -> None:
    with FakeServer(itl=0.001) as srv:
        sweep = proctor(
            "sweep", "--base-url", srv.base_url, "--concurrency", "1,2", *SMALL, "--json"
        )
        assert sweep.returncode == 0, sweep.stderr[-2000:]
        slo = proctor(
            "sweep",
            "--slo",
            "p99_ttft_ms<=100000",
            "--search",
            "concurrency",
            "--lo",
            "1",
            "--hi",
            "2",
            "--base-url",
            srv.base_url,
            *SMALL,
            "--json",
        )
        assert slo.returncode == 0, slo.stderr[-2000:]
    summary_id = json.loads(sweep.stdout)["sweep"]
    summary = reads_back(isolated_runs / summary_id / "summary.json", SweepSummary)
    assert isinstance(summary, SweepSummary) and [p.concurrency for p in summary.points] == [1, 2]
    for point in summary.points:
        # The point's bench, as the run wrapper left it (its validity gets the "gpu" check).
        bench = reads_back(isolated_runs / str(point.run_id) / "metrics.json", BenchDocument)
        assert isinstance(bench, BenchDocument) and bench.metrics.numbers()
        assert point.figure("output_throughput") == bench.metrics.get("output_throughput")
    results = list(isolated_runs.glob("*/result.json"))
    assert len(results) == 1
    search = reads_back(results[0], SloSearchResult)
    assert isinstance(search, SloSearchResult) and search.answer == 2 and search.probes


@pytest.mark.parametrize("lm_eval", ["exits-3", "missing"])
def test_gsm8k_documents_read_back_when_lm_eval_fails_or_is_missing(
    tmp_path: Path, lm_eval: str
) -> None:
    # lm-eval here is a real process that fails, or a path with nothing there: the document is
    # written "running", then "failed" (the scored one is test_gsm8k.py's real lm-eval run).
    fake = tmp_path / "lm_eval"
    if lm_eval == "exits-3":
        fake.write_text("#!/bin/sh\nexit 3\n")
        fake.chmod(0o755)
    job = EvalJob(base_url="http://127.0.0.1:9", model="m", lm_eval=str(fake))
    with pytest.raises(ProctorError):
        run_gsm8k(job, tmp_path / "out", echo=False)
    doc = reads_back(tmp_path / "out" / "metrics.json", EvalDocument)
    assert isinstance(doc, EvalDocument) and doc.status == "failed" and doc.error
    assert doc.lm_eval_exit_code == (3 if lm_eval == "exits-3" else None)


@pytest.mark.parametrize(
    ("command", "status"),
    [
        (
            [sys.executable, "-c", "print('Throughput: 3.00 requests/s, 300.00 output tokens/s')"],
            "ok",
        ),
        ([sys.executable, "-c", "exit(2)"], "failed"),
        (["/nonexistent/offline-command"], "not-found"),
    ],
)
def test_offline_documents_read_back(tmp_path: Path, command: list[str], status: str) -> None:
    run_offline(command, tmp_path, engine="vllm", echo=False)
    doc = reads_back(tmp_path / "metrics.json", OfflineDocument)
    assert isinstance(doc, OfflineDocument) and doc.status == status


def test_a_server_sweep_summary_reads_back(tmp_path: Path) -> None:
    recorder = Recorder.create(tmp_path)
    recorder.start({"name": "g", "kind": "server-sweep", "outcome": "running", "points": []})
    rows = [
        {
            "server": {"max_num_seqs": n},
            "bench": {"concurrency": 4},
            "flow_run": f"flow-{n}",
            "bench_run": f"bench-{n}",
            "exit_code": 0,
            "metrics": {"output_throughput": 100.0 * n, "p99_tpot_ms": 5.0 * n},
            "tok_s_per_user": 25.0 * n,
            "tok_s_per_gpu": 100.0 * n,
        }
        for n in (1, 2)
    ]
    summarize_grid(recorder, rows, "g")
    doc = reads_back(recorder.run.path / "summary.json", GridSummary)
    assert isinstance(doc, GridSummary) and doc.rows[1].metrics.get("output_throughput") == 200.0


# -- what does not fit -------------------------------------------------------------------------
def test_a_writer_whose_document_does_not_fit_keeps_it_and_fails_loudly(tmp_path: Path) -> None:
    written: list[str] = []
    with pytest.raises(InternalError, match=r"verdict\.ok"):
        write_checked(
            {"schema": "proctor.bench.metrics", "verdict": {"ok": "maybe"}},
            BenchDocument,
            written.append,
        )
    assert json.loads(written[0])["verdict"] == {"ok": "maybe"}  # the evidence is kept


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("not json {", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"metrics": {}}', 'no "schema"'),
        ('{"schema": "proctor.other"}', "unknown schema 'proctor.other'"),
        ('{"schema": "proctor.bench.metrics", "schema_version": 9}', "newer than this proctor"),
        (
            '{"schema": "proctor.bench.metrics", "validity": "VALID"}',
            "damaged BenchDocument: validity",
        ),
        ('{"schema": "proctor.bench.metrics", "metrics": [1]}', "damaged BenchDocument: metrics"),
        ('{"schema": "proctor.gsm8k-metrics/1", "status": "done"}', "damaged EvalDocument: status"),
    ],
)
def test_a_damaged_document_is_a_config_error_that_says_where(
    tmp_path: Path, text: str, says: str
) -> None:
    path = tmp_path / "metrics.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_document(path)
    assert says in caught.value.message and str(path) in caught.value.message


def test_a_figure_that_is_no_number_reads_as_none_and_the_rest_stands() -> None:
    doc = load_document(
        {
            "schema": "proctor.bench.metrics",
            "metrics": {"completed": 3, "duration": "long", "failed": True},
        }
    )
    assert isinstance(doc, BenchDocument)
    assert doc.metrics.numbers() == {"completed": 3.0}
    assert doc.metrics.raw("duration") == "long" and doc.metrics.get("failed") is None


def test_documents_of_another_proctor_keep_the_sections_this_one_does_not_know() -> None:
    written = {"schema": "proctor.bench.metrics", "schema_version": 1, "future": {"x": [1]}}
    assert load_document(written).dump() == written


# -- the committed JSON Schemas ---------------------------------------------------------------
def test_committed_schemas_are_the_models_own() -> None:
    """Fails when a document model changes without `python -m proctor.jobs.documents --write`
    (and, for a form an older reader would misread, a new version)."""
    committed = {p.name: p.read_text() for p in (REPO / "docs" / "schemas").glob("*.json")}
    assert committed == schema_texts()
