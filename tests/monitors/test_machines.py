"""Every ready/drain rule, fed scripted observations with a fake clock (no sleeping)."""

from __future__ import annotations

from proctor.monitors.drain import DrainConfig, DrainMachine, DrainObservation, DrainOutcome
from proctor.monitors.logscan import LogMatch
from proctor.monitors.progress import BenchCounts, ServerActivity, choose_signals, parse_metrics
from proctor.monitors.ready import ReadyGate, ReadyObservation, ReadyOutcome
from proctor.monitors.watch import ProcStatus

ALIVE = ProcStatus(alive=True)
FAULT = LogMatch("s.log", 3, 40, "proc died unexpectedly", "proc died", 0.0)


def test_ready_rules_in_order() -> None:
    gate = ReadyGate(timeout_s=10, started_at=0)
    assert gate.observe(ReadyObservation(now=1, process=ALIVE)) is None
    assert (
        gate.observe(ReadyObservation(now=2, process=ALIVE, endpoint_ok=True)) is ReadyOutcome.READY
    )

    gate = ReadyGate(10, 0)  # a fault beats a simultaneous exit and a simultaneous answer
    out = gate.observe(
        ReadyObservation(now=1, process=ProcStatus(False, 1), endpoint_ok=True, faults=[FAULT])
    )
    assert out is ReadyOutcome.FAULT and out.exit_code == 2

    gate = ReadyGate(10, 0)  # dead server with something else answering the port: exited
    out = gate.observe(ReadyObservation(now=1, process=ProcStatus(False, 1), endpoint_ok=True))
    assert out is ReadyOutcome.EXITED and out.exit_code == 3

    gate = ReadyGate(10, 0)
    assert gate.observe(ReadyObservation(now=9.9, process=ALIVE)) is None
    out = gate.observe(ReadyObservation(now=10, process=ALIVE))
    assert out is ReadyOutcome.TIMEOUT and out.exit_code == 5

    gate = ReadyGate(10, 0)  # no process known (server on a port): liveness not judged
    assert (
        gate.observe(ReadyObservation(now=1, process=None, endpoint_ok=True)) is ReadyOutcome.READY
    )


def cfg(**kw: float | bool) -> DrainConfig:
    base: dict[str, float | bool] = dict(max_s=1000, poll_s=10, stuck_polls=3, startup_max_s=100)
    base.update(kw)
    return DrainConfig(**base)  # type: ignore[arg-type]


def full(
    now: float, progress: float, clients: int, running: float | None = None
) -> DrainObservation:
    return DrainObservation(
        now=now,
        server=ALIVE,
        progress={"metric:x": progress},
        clients_alive=clients,
        running=running,
    )


def test_drained_after_clients_leave_and_server_idle() -> None:
    m = DrainMachine(cfg(), 0)
    assert m.observe(full(10, 1, 1)) is None
    assert m.observe(full(20, 2, 1)) is None
    assert m.observe(full(30, 3, 0)) is None  # still progressing: wait a poll
    assert m.observe(full(40, 3, 0)) is DrainOutcome.DRAINED


def test_running_metric_decides_drained() -> None:
    m = DrainMachine(cfg(), 0)
    m.observe(full(10, 1, 1, running=4))
    assert m.observe(full(20, 2, 0, running=2)) is None  # server still busy
    assert m.observe(full(30, 3, 0, running=0)) is DrainOutcome.DRAINED


def test_hang_after_stuck_polls_with_client_alive() -> None:
    m = DrainMachine(cfg(stuck_polls=3), 0)
    m.observe(full(10, 5, 1))
    assert m.observe(full(20, 5, 1)) is None
    assert m.observe(full(30, 5, 1)) is None
    out = m.observe(full(40, 5, 1))
    assert out is DrainOutcome.HANG and out.exit_code == 1


def test_progress_resets_stuck_counter() -> None:
    m = DrainMachine(cfg(stuck_polls=2), 0)
    m.observe(full(10, 5, 1))
    m.observe(full(20, 5, 1))
    assert m.stuck == 1
    m.observe(full(30, 6, 1))
    assert m.stuck == 0
    assert m.observe(full(40, 6, 1)) is None


def test_server_death_is_failure_not_drained() -> None:
    m = DrainMachine(cfg(), 0)
    m.observe(full(10, 1, 1))
    out = m.observe(DrainObservation(now=11, server=ProcStatus(False, -9)))
    assert out is DrainOutcome.SERVER_DIED and out.exit_code == 3
    assert m.exit_status == -9


def test_fault_on_fast_tick_beats_death() -> None:
    m = DrainMachine(cfg(), 0)
    out = m.observe(DrainObservation(now=0.2, server=ProcStatus(False, 1), faults=[FAULT]))
    assert out is DrainOutcome.FAULT and out.exit_code == 2


def test_no_client_within_startup_max() -> None:
    m = DrainMachine(cfg(startup_max_s=30), 0)
    assert m.observe(full(10, 0, 0)) is None
    assert m.observe(full(20, 0, 0)) is None
    out = m.observe(full(30, 0, 0))
    assert out is DrainOutcome.NO_CLIENT and out.exit_code == 4


def test_clients_proctor_started_count_as_seen_even_if_already_gone() -> None:
    m = DrainMachine(cfg(), 0)
    obs = DrainObservation(
        now=10, server=ALIVE, progress={"metric:m": 1}, clients_alive=0, clients_known=1
    )
    assert m.observe(obs) is None  # the engine progressed this poll
    obs = DrainObservation(
        now=20, server=ALIVE, progress={"metric:m": 1}, clients_alive=0, clients_known=1
    )
    assert m.observe(obs) is DrainOutcome.DRAINED


def test_time_limit() -> None:
    m = DrainMachine(cfg(max_s=30, stuck_polls=100), 0)
    m.observe(full(10, 1, 1))
    m.observe(full(20, 2, 1))
    out = m.observe(full(30, 3, 1))
    assert out is DrainOutcome.TIMEOUT and out.exit_code == 4


def test_offline_reports_job_status_and_quiet_poll_is_not_drained() -> None:
    m = DrainMachine(cfg(offline=True, stuck_polls=10), 0)
    q = DrainObservation(now=10, offline=ALIVE, progress={"log": 0}, clients_alive=0)
    assert m.observe(q) is None  # ATOM's defect: a quiet poll while the job runs said drained
    q = DrainObservation(now=20, offline=ALIVE, progress={"log": 0}, clients_alive=0)
    assert m.observe(q) is None
    assert m.observe(DrainObservation(now=21, offline=ProcStatus(False, 0))) is DrainOutcome.DRAINED

    m = DrainMachine(cfg(offline=True), 0)
    out = m.observe(DrainObservation(now=5, offline=ProcStatus(False, 7)))
    assert out is DrainOutcome.OFFLINE_FAILED and out.exit_code == 3 and m.exit_status == 7


def test_offline_silence_is_a_hang() -> None:
    m = DrainMachine(cfg(offline=True, stuck_polls=2), 0)
    m.observe(DrainObservation(now=10, offline=ALIVE, progress={"log": 100}))
    m.observe(DrainObservation(now=20, offline=ALIVE, progress={"log": 100}))
    out = m.observe(DrainObservation(now=30, offline=ALIVE, progress={"log": 100}))
    assert out is DrainOutcome.HANG


def test_parse_metrics_sums_labels_and_accepts_total_suffix() -> None:
    text = (
        "# TYPE vllm:generation_tokens counter\n"
        'vllm:generation_tokens_total{model_name="a"} 10\n'
        'vllm:generation_tokens_total{model_name="b"} 5\n'
        'vllm:generation_tokens_created{model_name="a"} 1.7e9\n'
        "# TYPE vllm:num_requests_running gauge\n"
        "vllm:num_requests_running 3\n"
    )
    got = parse_metrics(text, ["vllm:generation_tokens", "vllm:num_requests_running", "absent"])
    assert got == {"vllm:generation_tokens": 15.0, "vllm:num_requests_running": 3.0}
    assert parse_metrics(text, ["vllm:generation_tokens_total"]) == {
        "vllm:generation_tokens_total": 15.0
    }


def test_signal_priority_metrics_then_markers_then_growth() -> None:
    src, sig = choose_signals(
        metrics={"a": 1},
        progress_metrics=["a"],
        markers=None,
        server_activity=10,
        client_logs={"c": 3},
    )
    assert src == "metrics" and sig == {"metric:a": 1.0}
    # The engine's markers: a client's log growth does not count beside them.
    src, sig = choose_signals(
        metrics=None, progress_metrics=["a"], markers=4, server_activity=10, client_logs={"c": 3}
    )
    assert src == "markers" and sig == {"markers": 4.0}
    # No word from the engine: the server's activity lines and the clients' logs.
    src, sig = choose_signals(
        metrics={}, progress_metrics=["a"], markers=0, server_activity=10, client_logs={"c": 3}
    )
    assert src == "log-growth" and sig == {"server-log:lines": 10.0, "log:c": 3.0}


def test_bench_done_counts_are_progress_with_or_without_the_engine() -> None:
    src, sig = choose_signals(
        metrics={"a": 1},
        progress_metrics=["a"],
        markers=None,
        server_activity=10,
        client_logs={},
        bench_answered=7,
    )
    assert src == "metrics+bench" and sig == {"metric:a": 1.0, "bench:answered": 7.0}
    src, sig = choose_signals(
        metrics=None,
        progress_metrics=[],
        markers=None,
        server_activity=None,
        client_logs={},
        bench_answered=0,
    )
    assert src == "bench" and sig == {"bench:answered": 0.0}


def test_bench_heartbeat_lines_without_new_answers_are_no_progress() -> None:
    counts = BenchCounts()
    counts.feed("w.log", b"[bench] warmup: 2/2 done, 0 failed, 4.0 req/s, 0.5s\n")
    counts.feed("w.log", b"[bench] benchmark: 3/40 done, 1 failed, 1.0 req/s, 3.0s\n")
    assert counts.view() == (4, {"w.log"})
    for _ in range(5):  # the same counts, written again and again by a hung bench
        counts.feed("w.log", b"[bench] benchmark: 3/40 done, 1 failed, 0.5 req/s, 9.0s\n")
    assert counts.view()[0] == 4
    counts.feed("w.log", b"[bench] benchmark: 1/40 done, 0 failed, 1.0 req/s, 1.0s\n")  # a repeat
    assert counts.view()[0] == 5


def test_idle_stats_lines_and_probes_are_not_server_activity() -> None:
    activity = ServerActivity("s.log")
    activity.feed(
        "s.log",
        (
            b"INFO 12-04 15:54:07 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
            b"Avg generation throughput: 0.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs\n"
            b'INFO:     127.0.0.1:5 - "GET /metrics HTTP/1.1" 200 OK\n'
            b'INFO:     127.0.0.1:5 - "GET /health HTTP/1.1" 200 OK\n'
        ),
    )
    assert activity.lines == 0
    activity.feed("other.log", b"anything\n")
    activity.feed(
        "s.log",
        b"Avg prompt throughput: 5.0 tokens/s, Avg generation throughput: "
        b"31.0 tokens/s\n"
        b'"POST /v1/completions HTTP/1.1" 200\n',
    )
    assert activity.lines == 2


def test_clients_gone_with_no_engine_signal_is_drained_whatever_the_log_does() -> None:
    m = DrainMachine(cfg(), 0)
    grow = [{"server-log:lines": n} for n in (5, 6)]
    assert (
        m.observe(DrainObservation(now=10, server=ALIVE, progress=grow[0], clients_alive=1)) is None
    )
    out = m.observe(DrainObservation(now=20, server=ALIVE, progress=grow[1], clients_alive=0))
    assert out is DrainOutcome.DRAINED


def test_client_log_growth_never_hides_a_hang_the_engine_reports() -> None:
    m = DrainMachine(cfg(stuck_polls=3), 0)
    # The engine's counter frozen, the bench's heartbeats without new answers: no progress.
    frozen = {"metric:gen": 50.0, "bench:answered": 8.0}
    outs = [
        m.observe(
            DrainObservation(now=t, server=ALIVE, clients_alive=1, running=4, progress=frozen)
        )
        for t in (10, 20, 30, 40)
    ]
    assert outs == [None, None, None, DrainOutcome.HANG]


def test_a_death_proctor_caused_itself_is_its_stop_not_a_death() -> None:
    stopped = ProcStatus(False, 143, stopped_by="stop: stop requested")
    out = DrainMachine(cfg(), 0).observe(DrainObservation(now=1, server=stopped))
    assert out is DrainOutcome.STOPPED and out.exit_code == 130
    timed = ProcStatus(False, 143, stopped_by="timeout: time limit of 5s reached")
    out = DrainMachine(cfg(offline=True), 0).observe(DrainObservation(now=1, offline=timed))
    assert out is DrainOutcome.TIMEOUT and out.exit_code == 4
    # A death nobody in proctor asked for is still one.
    out = DrainMachine(cfg(), 0).observe(DrainObservation(now=1, server=ProcStatus(False, 143)))
    assert out is DrainOutcome.SERVER_DIED and out.exit_code == 3
    gate = ReadyGate(10, 0)
    assert gate.observe(ReadyObservation(now=1, process=stopped)) is ReadyOutcome.STOPPED
    assert ReadyOutcome.STOPPED.exit_code == 130


def test_a_client_alive_while_the_engine_runs_nothing_is_no_hang() -> None:
    """An offline workload, a client starting up, a sweep between points: alive, sending
    nothing. The engine's running gauge (0) says the server holds no work: not a hang."""
    m = DrainMachine(cfg(stuck_polls=2, max_s=1000), 0)
    outs = [m.observe(full(t, 5, 1, running=0)) for t in (10, 20, 30, 40)]
    assert outs == [None, None, None, None] and m.stuck == 0
    # Without the gauge, a live client is work in flight, as before.
    m = DrainMachine(cfg(stuck_polls=2), 0)
    outs = [m.observe(full(t, 5, 1)) for t in (10, 20, 30)]
    assert outs == [None, None, DrainOutcome.HANG]
