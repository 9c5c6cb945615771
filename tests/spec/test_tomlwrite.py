"""A flow file written back (with its file paths naming the far copies) must read back as the
same table, whatever its strings hold: the far flow would otherwise run something else."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from proctor.errors import ConfigError
from proctor.flow import load_flow_file
from proctor.spec.tomlwrite import dump_toml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FLOW = """
[flow]
engine = "vllm"
model = "/models/x y"
port = 8000
ready_timeout = "15m"
extra = ["--max-model-len", "4096"]
"key with space" = 1.5e-5
when = 2026-12-03T14:00:00Z

[[flow.workload]]
name = "quote \\" back \\\\ slash, tab\\t, del \\u007f, é, 😀"
bench = { concurrency = 8, isl = 128, dataset = "jsonl:/far/p.jsonl", ignore_eos = false }

[[flow.workload]]
cmd = ["python", "c.py", "--x", "a'b"]
env = ["A=1"]

[flow.sweep]
server = { max_num_seqs = [64, 128], "odd-key.x" = [1] }
bench = {}
"""


def test_a_flow_file_reads_back_as_the_same_table(tmp_path: Path) -> None:
    original = tmp_path / "flow.toml"
    original.write_text(FLOW, encoding="utf-8")
    table = load_flow_file(original)
    written = tmp_path / "written.toml"
    written.write_text(dump_toml({"flow": table}), encoding="utf-8")
    assert load_flow_file(written) == table
    assert tomllib.loads(written.read_text(encoding="utf-8")) == {"flow": table}


def test_a_value_toml_cannot_hold_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"cannot write the table as TOML: .*NoneType"):
        dump_toml({"flow": {"model": None}})
