"""Client against server: do both count the same tokens and see the same time to first token?

Tolerances (documented in docs/monitors.md):
- output tokens: the server's generation-token delta over the measured window against the
  client's output tokens, within TOKENS_REL (1 %) or TOKENS_ABS (8 tokens), whichever is
  larger. Failed requests are counted by the server and not by the client, so a run with
  failures is compared loosely (the failed requests' expected tokens are allowed on top).
- TTFT: the server's mean (its histogram's sum / count, exact) against the client's mean,
  within TTFT_REL (25 %) or TTFT_ABS_MS (50 ms), whichever is larger. The client's TTFT holds
  the HTTP, queueing in the API server and detokenisation the engine does not see, so the
  client is expected a little above the server, never far below it.
"""

from __future__ import annotations

from typing import Any

TOKENS_REL = 0.01
TOKENS_ABS = 8.0
TTFT_REL = 0.25
TTFT_ABS_MS = 50.0


def _check(server: float, client: float, rel: float, absolute: float, unit: str) -> dict[str, Any]:
    allowed = max(rel * abs(client), absolute)
    diff = server - client
    return {
        "server": server,
        "client": client,
        "diff": diff,
        "allowed": allowed,
        "ok": abs(diff) <= allowed,
        "unit": unit,
    }


def reconcile(
    server: dict[str, Any],
    client_output_tokens: int,
    client_mean_ttft_ms: float | None,
    failed_expected_tokens: int = 0,
) -> dict[str, Any]:
    """{"tokens": check, "ttft_mean_ms": check, "ok": bool, "lines": [...]} (checks the server
    cannot answer are left out)."""
    out: dict[str, Any] = {}
    lines: list[str] = []
    generated = server.get("generation_tokens")
    if isinstance(generated, (int, float)):
        check = _check(
            float(generated),
            float(client_output_tokens),
            TOKENS_REL,
            TOKENS_ABS + failed_expected_tokens,
            "tokens",
        )
        out["tokens"] = check
        if not check["ok"]:
            lines.append(
                f"server counted {generated:.0f} generated tokens, the client "
                f"{client_output_tokens} (allowed difference {check['allowed']:.0f})"
            )
    ttft = server.get("ttft_ms")
    if isinstance(ttft, dict) and client_mean_ttft_ms is not None:
        check = _check(float(ttft["mean"]), client_mean_ttft_ms, TTFT_REL, TTFT_ABS_MS, "ms")
        out["ttft_mean_ms"] = check
        if not check["ok"]:
            lines.append(
                f"server mean TTFT {ttft['mean']:.1f} ms, the client's "
                f"{client_mean_ttft_ms:.1f} ms (allowed difference "
                f"{check['allowed']:.1f} ms)"
            )
    out["ok"] = not lines
    out["disagreements"] = lines
    return out


def format_server(server: dict[str, Any]) -> list[str]:
    """The lines printed under the bench summary."""
    if not server.get("available") or "window" not in server:
        return [f"Server metrics: none ({server.get('note') or 'not scraped'})"]
    words = [f"Server metrics ({server.get('engine') or 'engine'}, {server['scrapes']} scrapes):"]
    gen = server.get("generation_tokens")
    if gen is not None:
        words.append(f"{gen:.0f} generated tokens")
    ttft = server.get("ttft_ms")
    if isinstance(ttft, dict):
        words.append(f"mean TTFT {ttft['mean']:.1f} ms")
    if server.get("running_max") is not None:
        words.append(f"max running {server['running_max']:.0f}")
    if server.get("waiting_max") is not None:
        words.append(f"max waiting {server['waiting_max']:.0f}")
    if server.get("kv_cache_usage_max") is not None:
        words.append(f"max KV cache {server['kv_cache_usage_max']:.1%}")
    cache = server.get("prefix_cache")
    if isinstance(cache, dict) and cache.get("hit_rate") is not None:
        words.append(f"prefix-cache hit rate {cache['hit_rate']:.1%}")
    lines = [" ".join(words[:1]) + " " + ", ".join(words[1:])]
    rec = server.get("reconcile") or {}
    lines += [f"Server/client disagree: {line}" for line in rec.get("disagreements", [])]
    return lines
