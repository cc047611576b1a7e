"""Files that survive a crash: written whole, fsynced, renamed into place, their folder fsynced.

Shared by the learner's spool and the actor's outbox (embodied/hil): after a crash such a file is
either absent or complete, so an acknowledgement sent after `write_durably` returned covers only
what is on disk."""

from __future__ import annotations

import os
from pathlib import Path


def write_durably(path: Path, data: bytes) -> None:
    """Write whole, fsync the file, rename into place, fsync the folder (the rename only counts once the
    folder's entry is on disk)."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
