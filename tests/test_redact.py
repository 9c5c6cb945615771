"""The redaction layer: what it masks by name, by form and by value, what it leaves alone, and
the boundary with a command's own output."""

from __future__ import annotations

import io
import json
from pathlib import Path

from proctor.redact import MASK, MaskedStream, Redactor
from tests.helpers import only_run, proctor


def redactor(**env: str) -> Redactor:
    return Redactor.from_environment({}, ["MY_PRIVATE_VAR"], env)


def test_credentials_in_urls_lose_the_whole_user_part() -> None:
    r = redactor()
    assert r.text("http://alice:pw1234@h:8/x") == "http://***@h:8/x"
    assert (
        r.text("--repo=https://ghp_token99@github.com/o/r.git")
        == "--repo=https://***@github.com/o/r.git"
    )
    assert r.text("bash -c 'curl postgres://u:p4ss@db/x'") == "bash -c 'curl postgres://***@db/x'"
    assert (
        r.text("git@github.com:o/r.git and http://h/a@b")
        == "git@github.com:o/r.git and http://h/a@b"
    )
    # A user name is no secret: learning "root" would mask every path under root's home.
    r.learn_text("ssh://root@gpu-host:22")
    assert (
        r.text("ssh://root@gpu-host:22 /tmp/pytest-of-root")
        == "ssh://root@gpu-host:22 /tmp/pytest-of-root"
    )


def test_headers_and_named_words_are_masked_by_name() -> None:
    r = redactor()
    assert r.argv(["-H", "Authorization: Bearer abcd1234"]) == ["-H", "Authorization: Bearer ***"]
    assert r.argv(["--header", "X-Api-Key: k-123456"]) == ["--header", "X-Api-Key: ***"]
    assert r.text("Authorization=Basic dXNlcjpw") == "Authorization=Basic ***"
    assert r.text("Cookie: session=abcdef") == "Cookie: ***"
    assert (
        r.text("DB_PASSWORD=hunter22 MY_PRIVATE_VAR=mine") == "DB_PASSWORD=*** MY_PRIVATE_VAR=***"
    )
    assert r.argv(["--api-key", "sk-1", "--hf-token=hf_2"]) == ["--api-key", MASK, "--hf-token=***"]
    assert r.text("https://h/v1?api_key=qwerty&x=1") == "https://h/v1?api_key=***&x=1"


def test_ordinary_words_are_left_alone() -> None:
    r = redactor()
    plain = (
        "total_token_throughput=1234.5 max_tokens=16 --max-tokens 16 "
        "insecure_accept_host_key=true proctor: run 2026 ok tokenizer: gpt2"
    )
    assert r.text(plain) == plain
    assert r.argv(["--max-tokens", "16", "--tokenizer", "gpt2"]) == [
        "--max-tokens",
        "16",
        "--tokenizer",
        "gpt2",
    ]


def test_a_known_value_is_masked_wherever_it_appears() -> None:
    r = redactor(HF_TOKEN="hf_value_42", PATH="/usr/bin")
    r.learn_argv(["curl", "-H", "Authorization: Bearer tok-from-header", "http://u:urlpw99@h"])
    out = r.text("hub hf_value_42; again tok-from-header; pw urlpw99; /usr/bin stays")
    assert out == "hub ***; again ***; pw ***; /usr/bin stays"
    assert r.env({"MY_TOKEN": "x", "CUDA_VISIBLE_DEVICES": "0,1"}) == {
        "MY_TOKEN": MASK,
        "CUDA_VISIBLE_DEVICES": "0,1",
    }


def test_data_masks_every_string_and_keeps_the_shape() -> None:
    r = redactor(OPENAI_API_KEY="sk-live-0000")
    doc = {
        "base_url": "http://a:b1234@h",
        "n": 3,
        "ok": True,
        "argv": ["--key", "sk-live-0000"],
        "nested": {"error": "401 for Bearer sk-live-0000"},
    }
    assert r.data(doc) == {
        "base_url": "http://***@h",
        "n": 3,
        "ok": True,
        "argv": ["--key", MASK],
        "nested": {"error": "401 for Bearer ***"},
    }


def test_masked_stream_masks_text_but_not_the_raw_buffer() -> None:
    raw = io.BytesIO()
    inner = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)
    stream = MaskedStream(inner)
    stream.write("proctor: cannot reach http://u:pw5678@h\n")
    stream.buffer.write(b"command says http://u:pw5678@h\n")
    assert raw.getvalue() == b"proctor: cannot reach http://***@h\ncommand says http://u:pw5678@h\n"


def test_the_commands_own_output_is_its_own_and_proctors_words_are_masked(
    isolated_runs: Path,
) -> None:
    """The boundary written in docs/runs.md: the log is the command's, byte for byte."""
    result = proctor("run", "--", "sh", "-c", "echo DB_PASSWORD=printedByCmd77")
    assert result.returncode == 0, result.stderr
    run = only_run(isolated_runs)
    log = next(run.glob("*.log"))
    assert log.read_text() == "DB_PASSWORD=printedByCmd77\n"
    assert "DB_PASSWORD=printedByCmd77" in result.stdout  # relayed unchanged
    assert "printedByCmd77" not in result.stderr  # proctor's own lines
    record = json.loads((run / "record.json").read_text())
    assert record["argv"] == ["sh", "-c", "echo DB_PASSWORD=***"]
    assert (
        "printedByCmd77" not in log.name and "printedByCmd77" not in (run / "plan.json").read_text()
    )


def test_a_short_secret_inside_the_run_paths_does_not_break_the_run(
    isolated_runs: Path, tmp_path: Path
) -> None:
    """The working directory is .../work: a secret 'work' is masked in what is shown, never in
    the paths the wrapper uses."""
    result = proctor("run", "--env", "MY_TOKEN=work", "--", "sh", "-c", "pwd > here.txt")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "work" / "here.txt").read_text().strip() == str(tmp_path / "work")
    record = json.loads((only_run(isolated_runs) / "record.json").read_text())
    assert record["env_overrides"] == {"MY_TOKEN": MASK}


def test_an_attach_key_and_a_user_name_are_not_secrets(isolated_runs: Path) -> None:
    """`proctor run --key nightly --name nightly`: the key names the run, nothing is masked."""
    result = proctor(
        "run",
        "--key",
        "nightly",
        "--name",
        "nightly",
        "--target",
        "local",
        "--",
        "true",
        "ssh://root@gpu-host",
    )
    assert result.returncode == 0, result.stderr
    run = only_run(isolated_runs)
    record = json.loads((run / "record.json").read_text())
    assert record["name"] == "nightly" and record["key"] == "nightly"
    assert record["argv"] == ["true", "ssh://root@gpu-host"]
    assert (run / "nightly.log").exists()


def test_documents_mask_the_users_strings_never_proctors_own_fields() -> None:
    """A secret that is a common word or number: the record's keys, ids, kind, outcome, schema
    and times stay; the user's words are masked (issue 20)."""
    r = redactor(X_TOKEN="2026", DB_PASSWORD="failed", MY_TOKEN="python")
    run_id = "20261204-155500-1fe510"
    doc = {
        "schema": "proctor.run",
        "run_id": run_id,
        "kind": "command",
        "outcome": "failed",
        "created_at": "2026-12-04T15:55:00.000+00:00",
        "host": {"python": "3.11"},
        "dir": f"/runs/{run_id}",
        "log_path": f"/runs/{run_id}/x.log",
        "argv": ["echo", "2026", "failed", "python"],
        "error": "exit failed in 2026",
    }
    masked = r.data(doc)
    assert masked == {**doc, "argv": ["echo", MASK, MASK, MASK], "error": "exit *** in ***"}


def test_printed_lines_keep_proctors_words_and_mask_the_users() -> None:
    r = redactor(X_TOKEN="2026", DB_PASSWORD="failed", API_TOKEN="proctor")
    line = "proctor: run 20261204-155500-1fe510: failed, exit 1; log /runs/20261204-155500-1fe510/x.log"
    assert r.line(line) == line
    assert (
        r.line("20261204-155500-1fe510  bearer  ok  0") == "20261204-155500-1fe510  bearer  ok  0"
    )
    assert r.line("run.bogus_key: Extra inputs are not permitted") == (
        "run.bogus_key: Extra inputs are not permitted"
    )
    assert r.line("could not reach http://u:pw1234@h, year 2026") == (
        "could not reach http://***@h, year ***"
    )


def test_secret_forms_of_curl_mysql_and_dsns_are_masked_and_learned() -> None:
    r = redactor()
    argv = [
        "curl",
        "-HAuthorization:Bearer tokA1",
        "-HX-Api-Key:tokB2",
        '{"api_key": "tokC3"}',
        "-u",
        "admin:tokD4",
        "--db-pass",
        "tokE5",
        "GITHUB_PAT=tokF6",
        "user:tokG7@db.example.com",
    ]
    assert r.argv(argv) == [
        "curl",
        "-HAuthorization:Bearer ***",
        "-HX-Api-Key:***",
        '{"api_key": "***"}',
        "-u",
        "admin:***",
        "--db-pass",
        MASK,
        "GITHUB_PAT=***",
        "user:***@db.example.com",
    ]
    assert r.argv(["mysql", "-ptokH8", "-p", "tokI9", "db"]) == ["mysql", "-p***", "-p", MASK, "db"]
    r.learn_argv([*argv, "mysql", "-ptokH8"])
    assert r.text("tokA1 tokB2 tokC3 tokD4 tokE5 tokF6 tokG7 tokH8") == " ".join([MASK] * 8)
    # Not secrets: other commands' -p and -u, ssh and scp forms, times.
    for plain in (
        ["mkdir", "-p", "dir"],
        ["python", "-u", "x.py"],
        ["scp", "u@h:/p", "x"],
        ["git", "clone", "git@github.com:o/r.git"],
        ["echo", "10:30@noon"],
    ):
        assert r.argv(plain) == plain
