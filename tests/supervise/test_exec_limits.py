from __future__ import annotations

import pytest

from proctor.errors import UsageError
from proctor.supervise.launch import check_exec_limits


def test_an_argument_the_kernel_would_refuse_is_a_usage_error() -> None:
    check_exec_limits(["echo", "y" * 100_000], {})
    with pytest.raises(UsageError, match="per argument"):
        check_exec_limits(["echo", "y" * 200_000], {})


def test_a_command_line_beyond_arg_max_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="the system allows"):
        check_exec_limits(["echo", *(["y" * 100_000] * 400)], {})
