"""embodied/distributed/shared.py: the learner's shared-memory blocks, written and read here and in another process."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from embodied.distributed import shared
from embodied.distributed.shared import SharedBlock, receive, send, size

pytestmark = pytest.mark.skipif(not os.path.isdir(shared.SHM), reason="no /dev/shm here: the object store carries all")


def arrays():
    return {"obs": np.arange(24, dtype=np.float32).reshape(2, 3, 4), "done": np.array([True, False]),
            "ids": np.array([[7, -1]], dtype=np.int64), "empty": np.zeros((0, 5), np.float16), "scalar": np.array(3.5)}


def test_arrays_come_back_as_written_each_at_its_dtype_and_shape():
    block = SharedBlock.make(size(arrays()))
    try:
        message = send(block.ref, arrays())
        back = receive(message)
        assert list(back) == list(arrays())
        for key, value in arrays().items():
            assert back[key].dtype == value.dtype and back[key].shape == value.shape
            np.testing.assert_array_equal(back[key], value)
        assert receive(arrays()) is not None and "obs" in receive(arrays())  # what came through Ray, as it is
    finally:
        block.close()


def test_what_does_not_fit_or_is_no_numpy_array_is_not_written():
    block = SharedBlock.make(size(arrays()) - 1)
    try:
        assert send(block.ref, arrays()) is None
        assert np.frombuffer(block.memory.buf, np.uint8).max() == 0  # nothing written
        assert send(block.ref, {"obs": np.zeros(2), "text": ["a", "b"]}) is None
        assert send(block.ref, {"obj": np.array([None, 1], dtype=object)}) is None
    finally:
        block.close()


def test_no_block_where_dev_shm_has_no_room(monkeypatch):
    real = os.statvfs(shared.SHM)

    class Full:
        f_frsize, f_bavail = real.f_frsize, 10  # 10 blocks free

    monkeypatch.setattr(shared.os, "statvfs", lambda path: Full())
    assert SharedBlock.make(10 * real.f_frsize) is None and SharedBlock.make(0) is None
    block = SharedBlock.make(5 * real.f_frsize)  # twice its size is free
    assert block is not None
    block.close()


WORKER = """
import sys, numpy as np
from embodied.distributed.shared import MARK, receive, send
weights = receive({MARK: eval(sys.argv[1])})
assert send(eval(sys.argv[2]), {"batch": weights["w"] * 2}) is not None
"""


def test_another_process_reads_and_writes_a_block_and_leaves_it_in_place_when_it_exits():
    """A worker (a process of its own, as Ray's are) maps the learner's blocks untracked: Python's resource tracker
    (< 3.13) would unlink a block the worker merely opened when the worker exits, and the learner's next collection
    would find it gone."""
    w, out = SharedBlock.make(4096), SharedBlock.make(4096)
    try:
        message = send(w.ref, {"w": np.arange(8, dtype=np.float32)})
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        subprocess.run([sys.executable, "-c", WORKER, repr(message[shared.MARK]), repr(out.ref)], cwd=root,
                       check=True, timeout=120)
        for block in (w, out):
            assert os.path.exists(os.path.join(shared.SHM, block.memory.name))
        batch = shared.read(out.ref, {"batch": ("<f4", (8,), 0)})["batch"]
        np.testing.assert_array_equal(batch, np.arange(8, dtype=np.float32) * 2)
        del batch
    finally:
        w.close()
        out.close()
    assert not [f for f in os.listdir(shared.SHM) if f.startswith(f"embodied_{os.getpid()}_")]


KILLED = """
import os, signal
from embodied.distributed.shared import SharedBlock
print(SharedBlock.make(1 << 20).memory.name, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_learner_s_blocks_are_unlinked():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    run = subprocess.run([sys.executable, "-c", KILLED], cwd=root, capture_output=True, text=True, timeout=120)
    assert run.returncode == -signal.SIGKILL
    path = os.path.join(shared.SHM, run.stdout.strip())
    deadline = time.monotonic() + 60  # the learner's resource tracker, a process of its own, unlinks it when it sees
    while os.path.exists(path) and time.monotonic() < deadline:  # the learner gone: waited for, not assumed
        time.sleep(0.05)
    assert run.stdout.startswith("embodied_") and not os.path.exists(path)
