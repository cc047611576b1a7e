"""EpisodeStore: exact round trips, layout errors, concurrent readers, and SIGKILL crash safety."""

import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from embodied.data.store import EpisodeStore
from tests.data.crash_writer import episode, write_forever

REPO = Path(__file__).resolve().parents[2]


def expected(n: int) -> dict[str, np.ndarray]:
    eps = [episode(i) for i in range(n)]
    return {k: np.concatenate([e[k] for e in eps]) for k in eps[0]}


def check_exact(store: EpisodeStore, n: int) -> None:
    """The store holds exactly episodes 0..n-1 of crash_writer.episode."""
    assert store.num_episodes == n
    want = expected(n)
    ends = np.cumsum([len(episode(i)["reward"]) for i in range(n)])
    assert np.array_equal(store.episode_ends, ends)
    for key, value in want.items():
        got = store.read(key)
        assert got.dtype == value.dtype and np.array_equal(got, value), key


def test_round_trip_and_reopen(tmp_path):
    path = tmp_path / "s.zarr"
    with EpisodeStore(path, mode="a") as store:
        for i in range(6):
            store.append_episode(episode(i))
        assert store.keys == sorted(episode(0))
        check_exact(store, 6)
    reader = EpisodeStore(path)
    check_exact(reader, 6)
    ep = reader.episode(4)
    assert ep.batch_size == torch.Size([len(episode(4)["reward"])])
    assert torch.equal(ep["obs", "images", "cam"], torch.from_numpy(episode(4)["obs/images/cam"]))
    assert bytes(ep["obs", "language"][0].numpy()).rstrip(b"\0") == b"episode 4"
    index = np.array([[0, 5], [reader.num_steps - 1, 17]])
    assert np.array_equal(reader.gather("obs/images/cam", index), expected(6)["obs/images/cam"][index])
    with EpisodeStore(path, mode="a") as store:  # append after reopening
        store.append_episode(episode(6))
    reader.refresh()
    check_exact(reader, 7)


def test_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="mode='a'"):
        EpisodeStore(tmp_path / "missing.zarr")
    with pytest.raises(ValueError, match="choose 'r'"):
        EpisodeStore(tmp_path / "x.zarr", mode="rw")
    store = EpisodeStore(tmp_path / "s.zarr", mode="a")
    with pytest.raises(RuntimeError, match="already open for writing"):
        EpisodeStore(tmp_path / "s.zarr", mode="a")
    store.append_episode(episode(0))
    with pytest.raises(KeyError, match="missing \\['reward'\\]"):
        store.add_rows({k: v for k, v in episode(1).items() if k != "reward"})
    bad = episode(1)
    bad["action"] = np.zeros((len(bad["reward"]), 3), np.float32)
    with pytest.raises(ValueError, match="'action' is float32 \\[3\\]"):
        store.add_rows(bad)
    with pytest.raises(ValueError, match="same leading length"):
        store.add_rows({**episode(1), "reward": np.zeros(1, np.float32)})
    with pytest.raises(ValueError, match="no rows"):
        store.end_episode()
    with pytest.raises(KeyError, match="no key 'nope'"):
        store.read("nope")
    with pytest.raises(IndexError, match="1 committed"):
        store.episode(1)
    with pytest.raises(PermissionError, match="read-only"):
        EpisodeStore(tmp_path / "s.zarr").append_episode(episode(1))


def test_uncommitted_rows_and_index_entries_are_ignored(tmp_path):
    """The states a crash can leave: rows past the last end, an index entry grown but not written,
    temporary files of interrupted writes."""
    path = tmp_path / "s.zarr"
    store = EpisodeStore(path, mode="a")
    for i in range(3):
        store.append_episode(episode(i))
    store.add_rows(episode(3))  # rows written, never committed
    store._ends_array.resize((4,))  # the commit's first half: the entry reads as -1
    (path / "data" / "action" / "c" / "0.1234.partial").write_bytes(b"torn")
    reader = EpisodeStore(path)
    check_exact(reader, 3)
    store.close()
    with EpisodeStore(path, mode="a") as store:  # reopening for writing drops the open episode
        assert not list(path.rglob("*.partial"))
        check_exact(store, 3)
        store.append_episode(episode(3))
    check_exact(EpisodeStore(path), 4)


def kill_repeatedly(path: Path, kills: int, start_writer, reader_checks: bool) -> int:
    """Start a writer, SIGKILL it at a random moment, check the store, repeat. Returns episodes written."""
    rng = random.Random(0)
    committed = 0  # episodes some writer reported as committed
    reader = None
    for _ in range(kills):
        pid, out = start_writer()
        lines = b""
        while len(lines.split(b"\n")) < 3:  # "ready" and one commit: every run makes progress
            lines += os.read(out, 4096)
        deadline = time.monotonic() + rng.uniform(0.02, 0.4)
        while time.monotonic() < deadline:
            if reader_checks and reader is not None:  # a reader follows the writer while it appends
                reader.refresh()
                check_exact(reader, reader.num_episodes)
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.set_blocking(out, False)
        try:
            while chunk := os.read(out, 1 << 16):
                lines += chunk
        except BlockingIOError:
            pass
        os.close(out)
        reported = [int(x) for x in lines.split()[1:] if x.isdigit()]
        store = EpisodeStore(path)
        # every reported commit survived; at most one more (killed between commit and report)
        top = max(reported, default=committed - 1) + 1
        assert top <= store.num_episodes <= top + 1
        assert store.num_episodes >= committed
        check_exact(store, store.num_episodes)
        committed = store.num_episodes
        reader = reader or store
    return committed


def test_sigkill_forked_writer_loses_only_the_open_episode(tmp_path):
    path = str(tmp_path / "s.zarr")
    ctx = multiprocessing.get_context("fork")

    def start():
        r, w = os.pipe()
        proc = ctx.Process(target=write_forever, args=(path, w), daemon=True)
        proc.start()
        os.close(w)
        start.procs.append(proc)  # keep the handle so multiprocessing does not reap it first
        return proc.pid, r

    start.procs = []
    assert kill_repeatedly(Path(path), kills=10, start_writer=start, reader_checks=True) >= 10


@pytest.mark.slow
def test_sigkill_writer_subprocess_many_times(tmp_path):
    path = tmp_path / "s.zarr"

    def start():
        proc = subprocess.Popen([sys.executable, "-m", "tests.data.crash_writer", str(path)], cwd=REPO,
                                stdout=subprocess.PIPE)
        return proc.pid, os.dup(proc.stdout.fileno())

    assert kill_repeatedly(path, kills=25, start_writer=start, reader_checks=True) >= 25
