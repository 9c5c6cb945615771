"""One wording for every rejected model (issue 21 point 5): field path, why, the value given,
never a credential's value, the other problems counted."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError

from proctor.errors import ConfigError, UsageError, invalid, validation_problem


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    port: int
    api_key: SecretStr | None = None


class Outer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: str = "a"
    servers: dict[str, Inner] = {}
    sizes: list[int] = []


def rejected(data: object) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        Outer.model_validate(data)
    return caught.value


def test_path_reason_and_value_in_one_line() -> None:
    line = validation_problem(rejected({"servers": {"my host": {"port": "x"}}}), what="f.toml")
    assert line == (
        "f.toml: servers.'my host'.port: Input should be a valid integer, unable to parse "
        "string as an integer (got 'x')"
    )
    assert "\n" not in line


def test_list_items_are_indexed_and_the_table_is_prefixed() -> None:
    line = validation_problem(rejected({"sizes": [1, "two"]}), at="engines.vllm")
    assert line.startswith("engines.vllm.sizes[1]: ") and "(got 'two')" in line


def test_a_credential_is_never_echoed() -> None:
    line = validation_problem(rejected({"servers": {"s": {"port": 1, "api_key": 12345678}}}))
    assert "servers.s.api_key" in line and "12345678" not in line


def test_long_values_are_cut_and_more_problems_counted() -> None:
    data = {"mode": 7, "sizes": ["a" * 500, "b", "c"], "extra": 1}
    line = validation_problem(rejected(data), limit=2)
    assert "a" * 100 not in line and "…" in line
    assert line.endswith("(+3 more)")


def test_invalid_keeps_the_exit_code_of_its_class() -> None:
    err = invalid(rejected({"mode": 7}), what="x", hint="fix it", cls=ConfigError)
    assert isinstance(err, ConfigError) and err.exit_code == 64
    assert err.one_line() == "x: mode: Input should be a valid string (got 7) (fix it)"
    assert isinstance(invalid(rejected({"mode": 7}), what="x"), UsageError)
