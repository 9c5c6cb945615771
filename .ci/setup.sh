#!/usr/bin/env bash
# Set up everything proctor's tests need on a fresh Debian 12 machine (root, PyPI and Debian
# mirrors reachable): the project venv with dev and eval extras, the system packages for the
# real SSH hosts, Slurm cluster and headless browser, and the real engines (cached).
# Idempotent: a second run is fast.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
step() { printf '[setup] %s (+%ss)\n' "$*" "$(( $(date +%s) - t0 ))"; }

PY="${PROCTOR_PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    step "creating .venv"
    "$PY" -m venv .venv
fi
step "installing proctor[dev,eval] into .venv"
.venv/bin/python -m pip install -q -U pip 2>&1 | grep -v "is ignored" || true
.venv/bin/python -m pip install -q -e '.[dev,eval]' 2>&1 | grep -v -e "is ignored" -e "corresp(dist" -e '^ *!!$' || true
.venv/bin/python -c "import proctor, typer, pydantic, aiohttp, httpx, asyncssh" || { echo "[setup] proctor venv broken" >&2; exit 1; }
# The raw client's C read path is an optional extension: an install without a C compiler or
# Python's headers goes on without it. Its tests need it, so here it must build.
fastread() { .venv/bin/python -c "import proctor.workloads.loadgen._fastread" 2>/dev/null; }
if ! fastread && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    step "the C read path did not build: installing a C compiler and Python's headers"
    apt-get install -y -qq build-essential python3-dev >/dev/null || true
    .venv/bin/python -m pip install -q -e '.[dev,eval]' 2>&1 | grep -v "is ignored" || true
fi
fastread || { echo "[setup] the C read path (src/proctor/workloads/loadgen/_fastread.c) did not build: needs a C compiler and Python's headers" >&2; exit 1; }

if [ "$(id -u)" -eq 0 ]; then
    # Once per setup: package lists on a fresh machine may be missing or stale.
    if [ "${PROCTOR_SKIP_APT_UPDATE:-0}" != "1" ]; then
        step "apt-get update"
        apt-get update -qq || echo "[setup] apt-get update failed; trying with the lists we have" >&2
    fi
    for script in install-sshd.sh install-slurm.sh install-browser.sh; do
        if [ -f ".ci/$script" ]; then
            step "$script"
            sh ".ci/$script"
        fi
    done
fi
if [ -f .ci/setup-engines.sh ] && [ "${PROCTOR_SKIP_ENGINES:-0}" != "1" ]; then
    step "setup-engines.sh"
    bash .ci/setup-engines.sh
fi
step "done"
