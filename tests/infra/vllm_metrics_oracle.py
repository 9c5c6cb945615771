"""Run by the vLLM-for-CPU venv's python, not by proctor's: vLLM's own metric code
(vllm.benchmarks.serve.calculate_metrics) over the per-request records proctor measured.

    VLLM_PYTHON tests/infra/vllm_metrics_oracle.py IN.json OUT.json

IN.json: a list of scenarios {"dur_s", "percentiles", "goodput", "outputs": [{success,
latency, output_tokens, ttft, itl, prompt_len, start_time}]}. OUT.json: for each, vLLM's
BenchmarkMetrics as a dict (percentile lists as [p, value] pairs). vLLM prints its own notes
to stdout; the figures go only to OUT.json.
"""

from __future__ import annotations

import dataclasses
import json
import sys


def main(src: str, dst: str) -> int:
    from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput
    from vllm.benchmarks.serve import calculate_metrics

    out = []
    with open(src) as f:
        scenarios = json.load(f)
    for sc in scenarios:
        outputs = [
            RequestFuncOutput(
                success=o["success"],
                latency=o["latency"],
                output_tokens=o["output_tokens"],
                ttft=o["ttft"],
                itl=list(o["itl"]),
                prompt_len=o["prompt_len"],
                start_time=o["start_time"],
                error=o.get("error", ""),
            )
            for o in sc["outputs"]
        ]
        metrics, lens = calculate_metrics(
            input_requests=[],
            outputs=outputs,
            dur_s=sc["dur_s"],
            tokenizer=None,
            selected_percentiles=sc["percentiles"],
            goodput_config_dict=sc["goodput"],
        )
        doc = {
            k: (v.item() if hasattr(v, "item") else v)
            for k, v in dataclasses.asdict(metrics).items()
        }
        for k, v in list(doc.items()):
            if isinstance(v, list):
                doc[k] = [[float(p), float(x)] for p, x in v]
        doc["actual_output_lens"] = [int(n) for n in lens]
        out.append(doc)
    with open(dst, "w") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
