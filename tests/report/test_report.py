"""Report contents without a browser: escaping, secrets, tolerant reading, the completion
checks on tampered and unknown runs, CLI exit codes, and the numbers behind the plots."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest

from proctor.record.rundir import RunDir
from proctor.report import build_report, load_run
from proctor.report.build import judge
from proctor.report.metrics import metrics_of_doc
from proctor.report.series import MAX_CDF_POINTS, cdf_points, percentile, read_gpu_csv
from proctor.results.baselines import CompareRow
from tests.report import runs


@pytest.fixture
def env(tmp_path: Path) -> runs.Env:
    return runs.make_env(tmp_path)


def _run(env: runs.Env, *argv: str, name: str = "cmd") -> str:
    r = runs.proctor(env, "run", "--name", name, "--gpu-sample", "0.2", *argv)
    return runs.run_id_of(r)


def test_text_is_escaped_and_secrets_stay_out(env: runs.Env) -> None:
    rid = _run(
        env,
        "-e",
        "HF_TOKEN=hf_s3cretvalue42",
        "--",
        "sh",
        "-c",
        "echo '<script>alert(1)</script>' \"$HF_TOKEN\"; exit 3",
    )
    html = build_report(env.runs_dir, [rid]).html
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "hf_s3cretvalue42" not in html
    assert 'class="badge failed">failed<' in html and "exit status 3" in html


def test_tampered_log_and_unknown_result_fail_their_checks(env: runs.Env) -> None:
    rid = _run(env, "--", "sh", "-c", "echo hello")
    run = RunDir(env.runs_dir / rid)
    statuses = {c.name: c.status for c in load_run(run).checks}
    assert statuses == {"result known": "ok", "logs verified": "ok", "machine state verified": "ok"}
    run.log_path().write_text("hello, edited\n")
    (run.path / "exit_code").unlink()
    view = load_run(run)
    checks = {c.name: c for c in view.checks}
    assert view.outcome == "unknown"
    assert checks["result known"].status == "fail"
    assert checks["logs verified"].status == "fail"
    assert "changed: cmd.log" in checks["logs verified"].detail
    assert "missing: exit_code" in checks["logs verified"].detail
    html = build_report(env.runs_dir, [rid]).html
    assert 'class="badge unknown">unknown<' in html and "unknown (no exit_code)" in html


def test_gpu_memory_not_released_fails_machine_check(env: runs.Env) -> None:
    # The stand-in GPU stays at 9000 MiB after the command: a leak the report must call out.
    rid = _run(
        env, "--", "sh", "-c", f'{runs.AFTER_FIRST_SAMPLE}; echo 9000 > "{env.state}"; sleep 0.6'
    )
    check = {c.name: c for c in load_run(RunDir(env.runs_dir / rid)).checks}
    assert check["machine state verified"].status == "fail"
    assert "GPU 0 holds 8488 MiB more than at start" in check["machine state verified"].detail


def test_memory_taken_at_once_and_kept_is_not_read_as_the_baseline(env: runs.Env) -> None:
    # The command's first act takes the memory: the wrapper's first sample (the baseline the
    # end is compared with) must be from before the command, or the leak reads as released.
    rid = _run(env, "--", "sh", "-c", f'echo 9000 > "{env.state}"; sleep 0.6')
    check = {c.name: c for c in load_run(RunDir(env.runs_dir / rid)).checks}
    assert check["machine state verified"].status == "fail", check["machine state verified"]
    assert "GPU 0 holds 8488 MiB more than at start" in check["machine state verified"].detail


def test_a_bare_run_directory_still_reports(tmp_path: Path) -> None:
    runs_dir = tmp_path / "runs"
    rid = "20260101-000000-abcdef"
    (runs_dir / rid).mkdir(parents=True)
    (runs_dir / rid / "record.json").write_text(json.dumps({"run_id": rid, "name": "x"}))
    (runs_dir / rid / "gpu.csv").write_text("time,index,memory_used_mib\nbad,row,here\n")
    (runs_dir / rid / "metrics.json").write_text("{not json")
    report = build_report(runs_dir, [rid])
    assert report.kind == "run" and "no GPU samples" in report.html
    assert "no metrics.json in this run" in report.html and report.figures == []


def _cli(env: runs.Env, *args: str) -> subprocess.CompletedProcess[str]:
    return runs.proctor(env, "report", *args)


def test_cli_errors_and_default_path(env: runs.Env) -> None:
    assert _cli(env).returncode == 64
    assert _cli(env, "nope").returncode == 64
    a = _run(env, "--", "true", name="a")
    b = _run(env, "--", "true", name="b")
    several = _cli(env, a, b)
    assert several.returncode == 64 and "--compare" in several.stderr
    assert _cli(env, "--compare", a).returncode == 64
    bad = env.runs_dir.parent / "bad.toml"
    bad.write_text("[metrics\n")
    assert _cli(env, a, "--baseline", str(bad)).returncode == 64
    ok = _cli(env, "--compare", a, b)
    assert ok.returncode == 0, ok.stderr
    path = Path(ok.stdout.strip())
    assert path == env.runs_dir / "reports" / f"compare-{a}-{b}.html" and path.is_file()
    # Reports live outside run directories, so the runs' manifests still verify.
    assert runs.proctor(env, "runs", "verify", a).returncode == 0


def test_runs_list_filters_and_json(env: runs.Env) -> None:
    ok = _run(env, "--", "true", name="alpha-ok")
    bad = _run(env, "--", "false", name="beta-bad")

    def listed(*args: str) -> list[str]:
        r = runs.proctor(env, "runs", "list", "--json", *args)
        assert r.returncode == 0, r.stderr
        return [row["id"] for row in json.loads(r.stdout)]

    assert listed() == [bad, ok]
    assert listed("--name", "alpha") == [ok]
    assert listed("--outcome", "failed") == [bad]
    assert listed("--outcome", "ok", "--name", "beta") == []
    assert listed("--since", "1h") == [bad, ok] and listed("--since", "2999-01-01") == []
    commit = json.loads((env.runs_dir / ok / "record.json").read_text())["source"].get("commit")
    if commit:
        assert listed("--commit", commit[:8]) == [bad, ok]
    assert listed("--commit", "ffffffffff") == []
    assert listed("--limit", "1") == [bad]


# -- the numbers behind the plots --------------------------------------------------------------
def test_cdf_thinning_keeps_shape_and_tail() -> None:
    values = [float(i) for i in range(20_000, 0, -1)]
    xs, ps = cdf_points(values)
    assert len(xs) <= MAX_CDF_POINTS and xs == sorted(xs)
    assert xs[0] == 1.0 and xs[-1] == 20_000.0 and ps[-1] == 1.0
    assert xs[-50:] == [float(v) for v in range(19_951, 20_001)]  # the tail exactly
    assert cdf_points([3.0, 1.0]) == ([1.0, 3.0], [0.5, 1.0]) and cdf_points([]) == ([], [])
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5


def test_gpu_csv_skips_bad_rows(tmp_path: Path) -> None:
    csv = tmp_path / "gpu.csv"
    csv.write_text(
        "time,index,uuid,name,memory_used_mib,memory_total_mib,utilization_pct,"
        "processes\n2026-01-01T00:00:00+00:00,0,u,H200,100.0,1000.0,1,\n"
        "garbage,0,u,H200,x,1000.0,1,\n2026-01-01T00:00:03+00:00,0,u,H200,700.0,"
        "1000.0,1,\n"
    )
    series = read_gpu_csv(csv)
    assert series.bad_rows == 1 and [t.used_mib for t in series.traces] == [[100.0, 700.0]]
    assert series.traces[0].peak_mib == 700.0 and series.traces[0].total_mib == 1000.0


def test_metrics_of_gsm8k_and_bench_documents() -> None:
    gsm = metrics_of_doc(
        {
            "kind": "gsm8k",
            "metrics": {
                "exact_match_flexible_extract": 0.8,
                "exact_match_flexible_extract_stderr": 0.2,
                "exact_match_strict_match": 0.4,
                "exact_match_strict_match_stderr": None,
                "n_samples": 5,
            },
        }
    )
    assert gsm["gsm8k_exact_match_flexible"].stderr == 0.2
    assert gsm["gsm8k_exact_match_strict"].stderr is None
    assert gsm["gsm8k_exact_match_flexible"].direction == "higher"
    bench = metrics_of_doc(
        {
            "schema": "proctor.bench.metrics",
            "metrics": {
                "completed": 100,
                "mean_ttft_ms": 50.0,
                "std_ttft_ms": 10.0,
                "p99_ttft_ms": 80.0,
            },
        }
    )
    assert math.isclose(bench["mean_ttft_ms"].stderr or 0, 1.0)
    assert bench["p99_ttft_ms"].stderr is None


@pytest.mark.parametrize(
    ("direction", "change", "verdict"),
    [
        ("lower", 0.09, "worse (within tolerance)"),
        ("lower", 0.11, "regression"),
        ("higher", -0.04, "worse (within tolerance)"),
        ("higher", -0.06, "regression"),
    ],
)
def test_judge_uses_default_tolerances(direction: str, change: float, verdict: str) -> None:
    row = CompareRow(
        metric="m",
        a=1.0,
        b=1.0 + change,
        change=change,
        delta=change,
        direction=direction,
        assessment="worse",
    )  # type: ignore[arg-type]
    assert judge(row).verdict == verdict and judge(row).regression == (verdict == "regression")


def test_report_package_has_no_network_urls() -> None:
    src = Path(__file__).resolve().parents[2] / "src" / "proctor" / "report"
    for path in src.glob("*.py"):
        if path.name == "browser.py":  # talks to its own Chromium on 127.0.0.1
            continue
        assert "http://" not in path.read_text() and "https://" not in path.read_text(), path


def _bench_dir(runs_dir: Path, rid: str, cost: dict | None) -> None:
    from proctor.results.cost import COST_FILE

    run = runs_dir / rid
    run.mkdir(parents=True)
    (run / "record.json").write_text(json.dumps({"run_id": rid, "name": "b", "kind": "bench"}))
    doc = {
        "schema": "proctor.bench.metrics",
        "metrics": {"duration": 36.0, "total_output_tokens": 20000, "completed": 10},
    }
    (run / "metrics.json").write_text(json.dumps(doc))
    if cost is not None:
        (run / COST_FILE).write_text(json.dumps(cost))


def test_bench_cost_section_priced_unpriced_and_local(tmp_path: Path) -> None:
    from proctor.results.cost import cost_of

    runs_dir = tmp_path / "runs"
    doc = {"metrics": {"duration": 36.0, "total_output_tokens": 20000}}
    _bench_dir(runs_dir, "20260101-000000-aaaaaa", cost_of(doc, 2.5, 50.0, source="API"))
    _bench_dir(runs_dir, "20260101-000000-bbbbbb", cost_of(doc, None, 50.0))
    _bench_dir(runs_dir, "20260101-000000-cccccc", None)
    priced = build_report(runs_dir, ["20260101-000000-aaaaaa"]).html
    assert "<h2>Cost</h2>" in priced and "USD per million output tokens" in priced
    assert "<td>1.2500</td>" in priced and "2.5000 (API)" in priced
    unpriced = build_report(runs_dir, ["20260101-000000-bbbbbb"]).html
    assert "cost: not measured (the machine&#x27;s price is unknown" in unpriced
    assert "USD per million output tokens" not in unpriced
    local = build_report(runs_dir, ["20260101-000000-cccccc"]).html
    assert "cost: not measured (the run was not on a priced machine)" in local


def test_a_bench_with_repeats_shows_mean_and_ci_beside_its_metrics(tmp_path: Path) -> None:
    """A real `proctor bench --repeat 3` against the fake server as a process; its report shows,
    in the metrics table, each metric's mean over the repeats ± the 95% CI half-width, with n."""
    import html as htmllib
    import re

    env = runs.make_env(tmp_path)
    run_id = runs.bench_with_repeats(env, 3)
    out = tmp_path / "bench.html"
    shown = runs.proctor(env, "report", run_id, "-o", str(out))
    assert shown.returncode == 0, shown.stderr
    page = htmllib.unescape(out.read_text(encoding="utf-8"))
    doc = json.loads((env.runs_dir / run_id / "metrics.json").read_text())
    assert doc["repeats"]["n"] == 3
    assert "mean ± 95% CI (3 repeats)" in page
    for key, name in (("output_throughput", "output_throughput"), ("mean_ttft_ms", "mean_ttft_ms")):
        stat = doc["repeats"]["stats"][key]
        cell = f"{stat['mean']:,.2f} ± {stat['ci95_half']:,.2f} (n=3)"
        # In the metric's own row of the metrics table.
        assert re.search(
            rf"<td>{name}</td><td[^>]*>[^<]*</td><td[^>]*>{re.escape(cell)}</td>", page
        ), (name, cell)


def test_a_bench_without_repeats_has_no_repeats_column(tmp_path: Path) -> None:
    runs_dir = tmp_path / "runs"
    _bench_dir(runs_dir, "20260101-000000-dddddd", None)
    page = build_report(runs_dir, ["20260101-000000-dddddd"]).html
    assert "95% CI" not in page and "<th>stderr</th>" in page
