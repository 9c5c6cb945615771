"""One merge for every setting: flag > environment > proctor.toml > default, with its origin."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proctor.spec.merge import Settings
from tests.helpers import proctor


def test_each_layer_wins_over_the_ones_below_it() -> None:
    env = {"PROCTOR_X": "from-env"}
    names = {"x": "PROCTOR_X"}
    table = {"x": "from-toml"}
    full = Settings({"x": "from-flag"}, table, "config:p.toml", env, names)
    assert full.pick("x", "d").as_dict() == {"value": "from-flag", "origin": "flag"}
    no_flag = Settings({"x": None}, table, "config:p.toml", env, names)
    assert no_flag.pick("x", "d").as_dict() == {"value": "from-env", "origin": "env:PROCTOR_X"}
    no_env = Settings({}, table, "config:p.toml", {}, names)
    assert no_env.pick("x", "d").as_dict() == {"value": "from-toml", "origin": "config:p.toml"}
    nothing = Settings({"x": ""}, {"x": None}, "config:p.toml", {"PROCTOR_X": ""}, names)
    assert nothing.pick("x", "d").as_dict() == {"value": "d", "origin": "default"}


def test_parse_applies_to_given_values_and_a_table_key_may_differ() -> None:
    settings = Settings({}, {"remote_python": "7"}, "config", {}, {})
    assert settings.pick("python", key="remote_python", parse=int).value == 7
    assert settings.pick("other", 3, parse=str).value == 3  # defaults are used as they are


def _plan(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, object]:
    result = proctor("plan", "--json", *args, "--", "true", cwd=tmp_path, env=env, check=True)
    options = json.loads(result.stdout)["options"]
    return {k: (v["value"], v["origin"]) for k, v in options.items()}


@pytest.mark.parametrize("layer", ["flag", "env", "toml", "default"])
def test_proctor_plan_shows_the_same_precedence(tmp_path: Path, layer: str) -> None:
    (tmp_path / "proctor.toml").write_text('[run]\nruns_dir = "toml-runs"\ntimeout = "5m"\n')
    args = ["--runs-dir", "flag-runs"] if layer == "flag" else []
    env = {"PROCTOR_RUNS_DIR": "env-runs" if layer in ("flag", "env") else ""}
    if layer == "default":
        (tmp_path / "proctor.toml").write_text("[run]\n")
    options = _plan(tmp_path, *args, env=env)
    value, origin = options["runs_dir"]
    expected = {
        "flag": ("flag-runs", "flag"),
        "env": ("env-runs", "env:PROCTOR_RUNS_DIR"),
        "toml": ("toml-runs", "config:"),
        "default": ("logs", "default"),
    }[layer]
    assert Path(str(value)).name == expected[0]
    assert str(origin).startswith(expected[1])
    timeout = options["timeout_s"]
    assert timeout == ((None, "default") if layer == "default" else (300.0, timeout[1]))
