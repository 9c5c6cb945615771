#!/usr/bin/env python3
"""proctor's on-pod budget watchdog: stops this pod through the Runpod API when the budget is spent.

Runs on the pod (stdlib only, Python >= 3.8), started detached by the controller:

    RUNPOD_POD_ID=... RUNPOD_API_KEY=<pod-scoped key> \\
        python3 watchdog.py --deadline EPOCH [--max-cost X --cost-per-hr Y --started-at EPOCH]

Runpod injects RUNPOD_POD_ID and a pod-scoped RUNPOD_API_KEY into every pod, so the key never
travels on a command line. The backend does not enforce time limits itself, so without this a
lost controller leaves the pod billing. PROCTOR_RUNPOD_API_URL overrides the API (tests).
Exit status: 0 pod stopped; 2 bad arguments or environment; 3 the stop could not be made.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from typing import Any

DEFAULT_API = "https://rest.runpod.io/v1"


def log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    sys.stderr.write(f"{stamp} proctor-watchdog: {message}\n")
    sys.stderr.flush()


def stop_time(args: argparse.Namespace) -> tuple[float, str]:
    """The epoch second the budget is spent, and which limit spends it."""
    ends: list[tuple[float, str]] = []
    if args.deadline is not None:
        ends.append((args.deadline, "time budget"))
    if args.max_cost is not None:
        hours = args.max_cost / args.cost_per_hr
        ends.append((args.started_at + hours * 3600.0, f"cost budget {args.max_cost:.2f}"))
    return min(ends)


def call(api: str, key: str, method: str, path: str, timeout: float = 20.0) -> tuple[int, Any]:
    request = urllib.request.Request(
        api.rstrip("/") + path,
        method=method,
        headers={"Authorization": "Bearer " + key, "Accept": "application/json"},
        data=b"" if method == "POST" else None,
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
            return response.status, json.loads(body) if body else None
    except urllib.error.HTTPError as error:
        return error.code, None


def write_state(path: str | None, state: dict[str, Any]) -> None:
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(state, handle)
        handle.write("\n")
    os.replace(tmp, path)  # atomic: a reader never sees half a file


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="watchdog.py", description=__doc__.split("\n")[1])
    parser.add_argument("--deadline", type=float, help="epoch seconds: stop the pod then")
    parser.add_argument("--max-cost", type=float, help="credits this pod may spend")
    parser.add_argument("--cost-per-hr", type=float, help="the pod's costPerHr")
    parser.add_argument("--started-at", type=float, help="epoch seconds the cost counts from")
    parser.add_argument("--poll", type=float, default=5.0, help="seconds between clock checks")
    parser.add_argument("--retry", type=float, default=10.0, help="seconds between stop attempts")
    parser.add_argument("--attempts", type=int, default=30, help="stop attempts before giving up")
    parser.add_argument("--state-file", help="write what the watchdog did here (JSON)")
    args = parser.parse_args(argv)
    if args.deadline is None and args.max_cost is None:
        parser.error("give --deadline or --max-cost")
    if args.max_cost is not None and not (args.cost_per_hr and args.cost_per_hr > 0):
        parser.error("--max-cost needs a positive --cost-per-hr")
    if args.started_at is None:
        args.started_at = time.time()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    pod_id = os.environ.get("RUNPOD_POD_ID", "")
    key = os.environ.get("RUNPOD_API_KEY", "")
    api = os.environ.get("PROCTOR_RUNPOD_API_URL") or DEFAULT_API
    if not pod_id or not key or "/" in pod_id:
        log("RUNPOD_POD_ID and RUNPOD_API_KEY must be set (Runpod sets both in a pod)")
        return 2
    at, reason = stop_time(args)
    log(
        f"pod {pod_id}: will stop at {time.strftime('%Y-%m-%dT%H:%M:%S%z', time.localtime(at))}"
        f" ({reason})"
    )
    write_state(
        args.state_file, {"pod_id": pod_id, "stop_at": at, "reason": reason, "state": "waiting"}
    )
    # Sleep in short steps against the wall clock, so suspend or clock steps cannot stretch it.
    while True:
        left = at - time.time()
        if left <= 0:
            break
        time.sleep(min(args.poll, left))
    log(f"pod {pod_id}: {reason} spent; stopping it through the API")
    for attempt in range(1, args.attempts + 1):
        try:
            status, _ = call(api, key, "POST", f"/pods/{pod_id}/stop")
        except (OSError, ValueError) as error:
            status = 0
            log(f"stop attempt {attempt}: {type(error).__name__}")
        if 200 <= status < 300:
            write_state(
                args.state_file,
                {
                    "pod_id": pod_id,
                    "stop_at": at,
                    "reason": reason,
                    "state": "stopped",
                    "stopped_at": time.time(),
                },
            )
            log(f"pod {pod_id}: stop accepted")
            return 0
        if status in (401, 403):
            log(f"stop refused ({status}): the pod-scoped key may not stop this pod")
            break
        if status:
            log(f"stop attempt {attempt}: HTTP {status}")
        time.sleep(args.retry)
    write_state(
        args.state_file, {"pod_id": pod_id, "stop_at": at, "reason": reason, "state": "stop failed"}
    )
    return 3


if __name__ == "__main__":
    # Stdlib only: the pod has no proctor to import. An unexpected error is a bug: its traceback
    # goes to this watchdog's own log, and the exit status is 70, as in proctor's table.
    try:
        sys.exit(main())
    except Exception:
        import traceback

        traceback.print_exc()
        log("internal error (a bug in proctor's watchdog, exit 70)")
        sys.exit(70)
