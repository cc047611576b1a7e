"""Same-node transfers past Ray's object store: blocks of shared memory (POSIX shm, /dev/shm) that the learner makes
and owns, and that a worker on the learner's node maps by name, to read the weights from and write its batch into.

    block = SharedBlock.make(nbytes)                 # learner (None where /dev/shm lacks room)
    message = send(block.ref, arrays)                # numpy arrays into it: a small dict for the Ray call, or None
                                                     # (they do not fit, or one is no numpy array: send them by Ray)
    arrays = receive(message)                        # views of them, in any process of the node (or what Ray brought)

Why: on the 2-core host a worker's call answering the main job's 2.9 MB batch took 5.1 ms through Ray's object
store and 2.9 ms through a block (1.5 of them the call itself), the weights' `ray.put` 1.0 ms against 0.04 ms into a
block (benchmarks/RESULTS.md, "Same-node transfers through shared memory"). The object store still carries whatever
crosses nodes or does not fit. The learner's Python tracks its blocks, so they are unlinked even if it is killed;
workers map them untracked (Python < 3.13 would unlink a block it merely opened when the worker exits).
"""

from __future__ import annotations

import mmap
import os
import secrets
from multiprocessing.shared_memory import SharedMemory

import numpy as np

SHM = "/dev/shm"
ALIGN = 64  # each array starts on a cache line


class SharedBlock:
    def __init__(self, nbytes: int):
        # named after the learner's process: `ls /dev/shm/embodied_<pid>_*` lists a run's blocks
        self.memory = SharedMemory(f"embodied_{os.getpid()}_{secrets.token_hex(4)}", create=True, size=nbytes)
        self.ref = {"shm": self.memory.name, "nbytes": nbytes}
        _own[self.memory.name] = self.memory.buf  # the learner's own view: no second mapping

    @classmethod
    def make(cls, nbytes: int) -> SharedBlock | None:
        """A block of `nbytes`, or None where /dev/shm is missing or has less than twice that free: a write past a
        full tmpfs would kill the writer with SIGBUS, not raise."""
        if nbytes <= 0 or not os.path.isdir(SHM):
            return None
        stat = os.statvfs(SHM)
        return cls(nbytes) if stat.f_bavail * stat.f_frsize >= 2 * nbytes else None

    def close(self) -> None:
        del _own[self.memory.name]
        self.memory.unlink()
        _close(self.memory)


_own: dict[str, memoryview] = {}  # the blocks this process made, by name
_maps: dict[str, mmap.mmap] = {}  # the blocks of another process this one mapped, by name
KEEP = 8  # mappings a worker keeps (a block the learner replaced is unlinked; its memory goes with the last mapping)


def _close(mapping) -> None:
    try:
        mapping.close()
    except BufferError:  # a view of it is still alive somewhere: the memory goes when that view does
        pass


def _buffer(ref: dict):
    name = ref["shm"]
    if name in _own:
        return _own[name]
    if name not in _maps:
        while len(_maps) >= KEEP:
            _close(_maps.pop(next(iter(_maps))))
        with open(os.path.join(SHM, name), "r+b") as f:
            _maps[name] = mmap.mmap(f.fileno(), ref["nbytes"])
    return _maps[name]


def write(ref: dict, arrays: dict) -> dict | None:
    """`arrays` into the block `ref`: {key: (dtype, shape, offset)}, or None (nothing written) when a value is not a
    numpy array or they do not fit."""
    if not all(isinstance(v, np.ndarray) and not v.dtype.hasobject for v in arrays.values()):
        return None
    layout, end = _layout(arrays)
    if end > ref["nbytes"]:
        return None
    buffer = _buffer(ref)
    for key, value in arrays.items():
        dtype, shape, start = layout[key]
        np.ndarray(shape, dtype, buffer, start)[...] = value
    return layout


def read(ref: dict, layout: dict) -> dict[str, np.ndarray]:
    """The arrays `write` put into the block: views of it, valid until the block is written again."""
    buffer = _buffer(ref)
    return {key: np.ndarray(shape, dtype, buffer, start) for key, (dtype, shape, start) in layout.items()}


MARK = "__shared_memory__"  # a message's key for (block, layout): no weight or batch key is named so


def send(ref: dict, arrays: dict) -> dict | None:
    """`arrays` written into the block `ref`, as a message for `receive`; None if they could not be."""
    layout = write(ref, arrays)
    return None if layout is None else {MARK: (ref, layout)}


def receive(message: dict) -> dict:
    """The arrays of a `send` message (views of the block), or `message` itself: arrays that came through Ray."""
    return read(*message[MARK]) if MARK in message else message


def _layout(arrays: dict) -> tuple[dict, int]:
    """Where `write` puts each array, {key: (dtype, shape, offset)}, and the bytes they take."""
    layout, end = {}, 0
    for key, value in arrays.items():
        start = -(-end // ALIGN) * ALIGN
        layout[key], end = (value.dtype.str, value.shape, start), start + value.nbytes
    return layout, end


def size(arrays: dict) -> int:
    """The bytes `write` needs for `arrays` (numpy arrays)."""
    return _layout(arrays)[1]
