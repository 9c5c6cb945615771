"""A full disk must still end the record: space held back for the last writes.

A run whose command fills the disk leaves no room for the wrapper's own evidence (exit_code,
the final record, the manifest). At the start the wrapper takes a small reserve file in the
run directory; when a write fails with ENOSPC it gives the reserve back and uses that room
to end the record with the reason. A dot-file, so it is never an artifact of the run.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

RESERVE_NAME = ".space-reserve"
RESERVE_BYTES = 256 * 1024


def is_enospc(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)


def enospc_reason(where: Path) -> str:
    return (
        f"no space left on device (ENOSPC) in {where}: the log may be cut short and the "
        f"exit status could not be recorded reliably"
    )


def disk_full(path: Path) -> bool:
    """No byte left for an unprivileged writer on the filesystem holding `path`."""
    try:
        stats = os.statvfs(path)
    except OSError:
        return False
    return stats.f_bavail == 0


class SpaceReserve:
    def __init__(self, directory: Path, size: int = RESERVE_BYTES) -> None:
        self.path = directory / RESERVE_NAME
        self.size = size
        self.held = False

    def take(self) -> bool:
        """Hold `size` bytes; False (and nothing held) when they are not there to take."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError:
            return False
        try:
            try:
                os.posix_fallocate(fd, 0, self.size)
            except OSError as error:
                if is_enospc(error):
                    raise
                os.write(fd, b"\0" * self.size)  # a filesystem without fallocate
            self.held = True  # allocated now (no fsync needed: the blocks are taken)
        except OSError:
            self.release()
        finally:
            os.close(fd)
        return self.held

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()
        self.held = False


__all__ = ["RESERVE_NAME", "SpaceReserve", "disk_full", "enospc_reason", "is_enospc"]
