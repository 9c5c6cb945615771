"""`proctor sweep --dataset`: every point sends the dataset and records it in its metrics.json,
with the same checks and refusals as `proctor bench --dataset`, before any point starts."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.fixtures.fake_openai_server import FakeServer
from tests.helpers import proctor

pytestmark = pytest.mark.timeout(180)

DATA = Path(__file__).resolve().parents[1] / "data" / "datasets"
TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


def sweep(cwd: Path, url: str, *extra: str) -> tuple[int, str, str]:
    r = proctor(
        "sweep",
        "--base-url",
        url,
        "--concurrency",
        "1,2",
        "--osl",
        "4",
        "--num-prompts",
        "4",
        "--json",
        *extra,
        cwd=cwd,
    )
    return r.returncode, r.stdout, r.stderr


def test_every_point_sends_the_jsonl_file_and_records_it(isolated_runs: Path) -> None:
    work = Path.cwd()
    prompts = work / "p.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"prompt": f"hello number {i}", "output_len": 3}) + "\n" for i in range(12)
        )
    )
    with FakeServer() as srv:
        # A relative path: every point (a run of its own) reads this same file.
        code, out, err = sweep(work, srv.base_url, "--dataset", "jsonl:p.jsonl")
    assert code == 0, err
    summary = json.loads(out)
    assert [p["concurrency"] for p in summary["points"]] == [1, 2]
    sha = hashlib.sha256(prompts.read_bytes()).hexdigest()
    for point in summary["points"]:
        doc = json.loads((isolated_runs / point["run_id"] / "metrics.json").read_text())
        assert doc["dataset"]["kind"] == "jsonl", doc["dataset"]
        assert doc["dataset"]["sha256"] == sha and doc["dataset"]["path"] == str(prompts)
        assert doc["metrics"]["completed"] == 4


def test_multi_turn_sweep_records_turns(isolated_runs: Path) -> None:
    with FakeServer() as srv:
        code, out, err = sweep(
            Path.cwd(), srv.base_url, "--dataset", f"multi-turn:{DATA / 'conversations.jsonl'}"
        )
    assert code == 0, err
    for point in json.loads(out)["points"]:
        doc = json.loads((isolated_runs / point["run_id"] / "metrics.json").read_text())
        assert doc["dataset"]["kind"] == "multi-turn" and doc["dataset"]["per_turn"]


def test_every_point_replays_the_trace_at_its_speed(isolated_runs: Path) -> None:
    with FakeServer() as srv:
        code, out, err = sweep(
            Path.cwd(),
            srv.base_url,
            "--dataset",
            f"trace:{TRACES / 'burstgpt_head.csv'}",
            "--trace-speed",
            "500",
        )
    assert code == 0, err
    for point in json.loads(out)["points"]:
        doc = json.loads((isolated_runs / point["run_id"] / "metrics.json").read_text())
        info = doc["dataset"]
        assert info["kind"] == "trace" and info["format"] == "burstgpt" and info["speed"] == 500
        assert info["replayed"] == 3 and doc["schedule"]["target_rate"] is not None


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            [
                "--dataset",
                "multi-turn:{data}/conversations.jsonl",
                "--workers",
                "2",
                "--concurrency",
                "2,4",
            ],
            "takes neither --workers nor a finite --request-rate",
        ),
        (["--dataset", "jsonl:missing.jsonl"], "cannot read dataset missing.jsonl"),
        (["--dataset", "jsonl:bad.jsonl"], "bad.jsonl:2: prompt must be a non-empty string"),
        (["--dataset", "parquet:x"], "must be one of: random | jsonl:PATH"),
        (["--dataset", "shared-prefix:x"], "dataset shared-prefix takes no file"),
        (["--dataset", "trace:unsorted.jsonl"], "unsorted.jsonl:2: timestamp 4 is before"),
        (["--dataset", "trace:{traces}/burstgpt_head.csv", "--request-rate", "2"], "a trace"),
        (["--trace-speed", "2"], "--trace-speed applies to --dataset trace:PATH only"),
    ],
)
def test_bad_dataset_is_refused_before_any_point(
    isolated_runs: Path, args: list[str], said: str
) -> None:
    work = Path.cwd()
    (work / "bad.jsonl").write_text('{"prompt": "ok"}\n{"prompt": ""}\n')
    (work / "unsorted.jsonl").write_text(
        '{"timestamp": 5, "input_length": 3, "output_length": 2}\n'
        '{"timestamp": 4, "input_length": 3, "output_length": 2}\n'
    )
    args = [a.replace("{data}", str(DATA)).replace("{traces}", str(TRACES)) for a in args]
    # Nothing listens on this port: a refusal must come before any point tries it.
    code, _, err = sweep(work, "http://127.0.0.1:9", *args)
    assert code == 64, err
    assert said in err
    assert not isolated_runs.exists() or not [
        p for p in isolated_runs.iterdir() if not p.name.startswith(".")
    ]
