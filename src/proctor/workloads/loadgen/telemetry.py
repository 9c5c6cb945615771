"""What the bench measures besides its requests: the server's /metrics and the GPUs.

BenchTelemetry runs beside one benchmark and writes into its output directory:
server_metrics.csv (monitors.server_metrics) and gpu.csv (monitors.gpu, with power). The
load generator tells it when the phases begin (`phase`, from the progress display) and when
the measured requests ended (`end`); from that it gives metrics.json "server" (reconciled
with the client) and "energy". Nothing here may fail the bench: a monitor that cannot start
leaves a note in its section.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import TracebackType
from typing import Any

from proctor.monitors.energy import energy_summary
from proctor.monitors.gpu import GpuSampler
from proctor.monitors.reconcile import reconcile
from proctor.monitors.server_metrics import ServerMetricsScraper
from proctor.workloads.loadgen.config import BenchConfig
from proctor.workloads.loadgen.metrics import BenchMetrics
from proctor.workloads.loadgen.records import RequestRecord

SERVER_CSV = "server_metrics.csv"
GPU_CSV = "gpu.csv"


class BenchTelemetry:
    def __init__(self, cfg: BenchConfig, out_dir: Path | None) -> None:
        self.cfg = cfg
        self.out_dir = out_dir
        self.scraper: ServerMetricsScraper | None = None
        self.sampler: GpuSampler | None = None
        self.load_began: float | None = None  # unix time of the first request phase
        self.window: list[float] = []  # [start, end] of the measured requests, unix time
        self.notes: list[str] = []
        self.wrapper_gpu = False  # the supervising wrapper writes gpu.csv here already

    def __enter__(self) -> BenchTelemetry:
        if self.out_dir is None:
            return self
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if self.cfg.server_metrics_s > 0:
            self.scraper = ServerMetricsScraper(
                self.cfg.base_url, self.out_dir / SERVER_CSV, interval_s=self.cfg.server_metrics_s
            )
            self.scraper.start()
        self.wrapper_gpu = wrapper_samples_gpu(self.out_dir)
        if self.cfg.gpu_sample_s > 0 and not self.wrapper_gpu:
            try:
                self.sampler = GpuSampler(self.out_dir / GPU_CSV, self.cfg.gpu_sample_s)
                self.sampler.start()  # its first sample is before any request: idle power
            except Exception as error:  # a broken GPU stack must not stop the bench
                self.notes.append(f"GPU sampling failed to start: {error!r}")
                self.sampler = None
        return self

    def metrics_gave_up(self) -> bool:
        """The scraper stopped reading the server's /metrics (no answer, 404, no series)."""
        return self.scraper is not None and self.scraper.note is not None

    def phase(self, name: str) -> None:
        """A request phase begins (warmup, benchmark)."""
        now = time.time()
        if self.load_began is None:
            self.load_began = now
        # With --repeat the measured phase begins once per repeat: the window is from the first.
        if name == "benchmark" and not self.window:
            if self.scraper is not None:
                self.scraper.mark("start", window=True)
            self.window = [time.time()]
            self._gpu_sample()  # a power reading at each end of the window, however short

    def _gpu_sample(self) -> None:
        if self.sampler is not None:
            self.sampler.sample_once()  # errors are kept in the sampler, never raised

    def end(self) -> None:
        """The measured requests are all done."""
        if self.window:
            self._gpu_sample()
            self.window.append(time.time())
        if self.scraper is not None:
            self.scraper.mark_settled("end", window=False)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.scraper is not None:
            self.scraper.stop()
        if self.sampler is not None:
            try:
                self.sampler.stop()
            except Exception as failure:
                self.notes.append(f"GPU sampling failed: {failure!r}")

    # -- metrics.json sections ---------------------------------------------------------------
    def sections(self, metrics: BenchMetrics, measured: list[RequestRecord]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.scraper is not None:
            server = self.scraper.summary("start", "end")
            if server.get("available") and "window" in server:
                failed_tokens = sum(r.expected_output_len for r in measured if not r.success)
                mean_ttft = metrics.stats_ms["ttft"].mean if "ttft" in metrics.stats_ms else None
                server["reconcile"] = reconcile(
                    server, metrics.total_output_tokens, mean_ttft, failed_tokens
                )
            out["server"] = server
        else:
            out["server"] = {
                "available": False,
                "note": "server metrics off (--server-metrics 0)"
                if self.out_dir is not None
                else "no output directory",
            }
        out["energy"] = self._energy(metrics)
        if self.sampler is not None:
            summary = self.sampler.summary()
            out["gpu_sampling"] = {k: summary[k] for k in ("interval_s", "samples", "errors")}
            out["gpu_sampling"]["inventory"] = summary["inventory"]
        if self.notes:
            out["telemetry_notes"] = self.notes
        return out

    def _energy(self, metrics: BenchMetrics) -> dict[str, Any]:
        unmeasured = self._why_no_energy()
        if unmeasured is not None:
            return unmeasured
        assert self.out_dir is not None
        start, end = self.window
        return energy_summary(
            self.out_dir / GPU_CSV,
            start,
            end,
            metrics.total_output_tokens,
            idle_before=self.load_began or start,
            idle_power_w=self.cfg.idle_power_w,
        )

    def _why_no_energy(self) -> dict[str, Any] | None:
        if self.out_dir is None:
            return {"available": False, "reason": "no output directory"}
        if len(self.window) < 2:
            return {"available": False, "reason": "the measured window did not complete"}
        if self.wrapper_gpu:
            return None  # the wrapper's gpu.csv, at its interval
        if self.sampler is None:
            return {
                "available": False,
                "reason": "GPU sampling off (--gpu-sample 0)"
                if self.cfg.gpu_sample_s <= 0
                else "GPU sampling failed to start",
            }
        inventory = self.sampler.inventory
        if inventory is None or not inventory.gpus:
            detail = (inventory.reason if inventory else None) or "no GPU"
            # The short reason is printed; the backends' refusals stay in metrics.json.
            return {"available": False, "reason": detail.split(":")[0], "detail": detail}
        return None


def wrapper_samples_gpu(out_dir: Path) -> bool:
    """True when `out_dir` is a supervised run whose wrapper samples the GPUs into its gpu.csv
    (plan.json says so): a second writer of that file would interleave its rows."""
    import json

    try:
        plan = json.loads((out_dir / "plan.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        isinstance(plan, dict)
        and bool(plan.get("gpu_present"))
        and float(plan.get("gpu_sample_s") or 0) > 0
    )


def summary_lines(doc: dict[str, Any]) -> list[str]:
    """Printed under the `Result:` line: the server's view, energy, the validity verdict."""
    from proctor.monitors.energy import format_energy
    from proctor.monitors.reconcile import format_server
    from proctor.results.validity import format_validity

    lines: list[str] = []
    if isinstance(doc.get("server"), dict):
        lines += format_server(doc["server"])
    if isinstance(doc.get("energy"), dict):
        lines.append(format_energy(doc["energy"]))
    if isinstance(doc.get("validity"), dict):
        lines += format_validity(doc["validity"])
    return lines
