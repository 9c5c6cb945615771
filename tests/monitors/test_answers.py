"""The generation answers drain reads from logs: access-log statuses and loadgen progress."""

from __future__ import annotations

from pathlib import Path

from proctor.monitors.answers import AnswerTally
from proctor.monitors.drain import DrainConfig, DrainMachine, DrainObservation, DrainOutcome
from proctor.monitors.logscan import LogScanner
from proctor.monitors.watch import ProcStatus

OK = b'INFO:     127.0.0.1:5 - "POST /v1/completions HTTP/1.1" 200 OK\n'
ERR = b'INFO:     127.0.0.1:5 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error\n'
HEALTH = b'INFO:     127.0.0.1:5 - "GET /health HTTP/1.1" 200 OK\n'


def test_access_log_streak_in_order_within_one_read() -> None:
    tally = AnswerTally()
    tally.feed("server.log", OK * 4 + ERR * 5 + HEALTH * 3)
    assert tally.server.streak == 5 and tally.server.good == 4
    assert "last 5 generation requests" in (tally.broken(5) or "")
    tally.feed("server.log", OK)
    assert tally.broken(5) is None


def test_a_few_errors_are_not_a_broken_server_until_the_clients_finish() -> None:
    tally = AnswerTally()
    tally.feed("server.log", ERR * 2)
    assert tally.broken(5) is None
    assert tally.broken(5, finished=True) is not None  # every answer it gave was an error
    tally.feed("server.log", OK + ERR)
    assert tally.broken(5, finished=True) is None  # the last 1 of 4 is not "all of them"


def test_client_progress_lines_count_failed_requests() -> None:
    tally = AnswerTally()
    tally.feed("w.log", b"[bench] benchmark: 4/40 done, 0 failed, 9.0 req/s, 0.4s\n")
    tally.feed("w.log", b"[bench] benchmark: 10/40 done, 6 failed, 9.0 req/s, 1.0s\n")
    assert tally.clients.streak == 6 and tally.clients.good == 4
    assert "load generator's progress" in (tally.broken(5) or "")


def test_requests_the_client_gave_up_on_are_no_answers_not_errors() -> None:
    """`N failed (T timed out)`: the T got no answer at all (a hang's sign, read by the progress
    monitor), so only N - T are error answers; a streak of timeouts never makes a fault."""
    tally = AnswerTally()
    tally.feed("w.log", b"[bench] benchmark: 4/40 done, 0 failed, 9.0 req/s, 0.4s\n")
    tally.feed("w.log", b"[bench] benchmark: 14/40 done, 10 failed (10 timed out), 1.0 req/s\n")
    assert tally.clients.errors == 0 and tally.broken(5) is None
    assert tally.broken(5, finished=True) is None
    tally.feed("w.log", b"[bench] benchmark: 20/40 done, 16 failed (11 timed out), 1.0 req/s\n")
    assert tally.clients.errors == 5 and tally.clients.streak == 5  # five error answers
    assert tally.broken(5) is not None


def test_scanner_feeds_observers_with_new_bytes_only(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(ERR * 9)
    tally = AnswerTally()
    scanner = LogScanner([], observers=[tally.feed])
    scanner.add(log, from_end=True)  # a reused log: old answers are old news
    scanner.poll()
    assert tally.server.seen == 0
    with log.open("ab") as f:
        f.write(ERR)
    scanner.poll()
    scanner.close()
    assert tally.server.errors == 1


def test_machine_calls_a_broken_server_a_fault_without_a_pattern() -> None:
    tally = AnswerTally()
    machine = DrainMachine(DrainConfig(poll_s=1.0), started_at=0.0)
    alive = ProcStatus(alive=True)
    assert machine.observe(DrainObservation(now=0.1, server=alive, answers=tally)) is None
    tally.feed("server.log", ERR * 5)
    outcome = machine.observe(DrainObservation(now=0.2, server=alive, answers=tally))
    assert outcome is DrainOutcome.FAULT and "alive but answered" in machine.reason


def _scrape(good: int, errors: int) -> str:
    return (
        "# TYPE http_requests_total counter\n"
        f'http_requests_total{{handler="/v1/completions",method="POST",status="2xx"}} {good}.0\n'
        f'http_requests_total{{handler="/v1/completions",method="POST",status="5xx"}} {errors}.0\n'
        f'http_requests_total{{handler="/health",method="GET",status="2xx"}} 99.0\n'
    )


def test_metrics_scrapes_count_5xx_of_generation_handlers_from_the_first_scrape_on() -> None:
    tally = AnswerTally()
    tally.feed_metrics(_scrape(3, 7))  # baseline: answers before the drain are not counted
    assert tally.metrics.seen == 0
    tally.feed_metrics(_scrape(3, 13))
    assert tally.metrics.streak == 6 and "the server's /metrics" in (tally.broken(5) or "")
    tally.feed_metrics(_scrape(4, 13))
    assert tally.broken(5) is None
    tally.feed_metrics("no metrics here {")
    assert tally.metrics.seen == 7
