"""loop.run: the bench's event loop, asked only for what it must do."""

from __future__ import annotations

import pytest

from proctor.workloads.loadgen import loop


class _Counted:
    """A result that counts how often it is formatted with repr."""

    def __init__(self) -> None:
        self.reprs = 0

    def __repr__(self) -> str:
        self.reprs += 1
        return "_Counted()"


@pytest.mark.parametrize("kind", ["uvloop", "asyncio"])
def test_the_result_is_returned_without_being_formatted(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # asyncio.run formats its main task when it puts SIGINT's handler back, and a task's repr
    # holds its result's: a bench's records took 35 ms there, twice a run.
    monkeypatch.setenv(loop.ENV, kind)
    result = _Counted()

    async def main() -> _Counted:
        return result

    assert loop.run(main()) is result
    assert result.reprs == 0


def test_an_error_in_the_coroutine_still_reaches_the_caller() -> None:
    async def main() -> None:
        raise LookupError("no such model")

    with pytest.raises(LookupError, match="no such model"):
        loop.run(main())
