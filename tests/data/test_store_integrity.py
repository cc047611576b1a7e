"""EpisodeStore under attack: two writers in two processes, truncated and bit-flipped chunk files,
and stores written before chunks carried checksums."""

import subprocess
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec

from embodied.data import store as store_module
from embodied.data.store import DamagedStoreError, EpisodeStore
from tests.data.crash_writer import episode

REPO = Path(__file__).resolve().parents[2]
# episode i has 3 + 7i % 17 rows: episodes end at rows 3, 13, 30, 40, ...; with 4-row chunks of
# obs/state, chunk c/3/0 holds rows 12-15: the end of episode 1 and the start of episode 2
STATE_CHUNK_3 = r"data/obs/state chunk c/3/0 \(episodes 1-2\)"


@pytest.fixture
def other_process(tmp_path):
    """ask(command) -> the reply of a second process running tests/data/store_holder.py on s.zarr."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.data.store_holder", str(tmp_path / "s.zarr")], cwd=REPO,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(command: str) -> str:
        proc.stdin.write(command + "\n")
        proc.stdin.flush()
        return proc.stdout.readline().strip()  # "" if it died: the assertion then shows that

    yield ask
    proc.stdin.close()
    assert proc.wait(timeout=120) == 0


def test_one_writer_across_processes_in_every_mode(tmp_path, other_process):
    path = tmp_path / "s.zarr"
    # the other process writes; its first "w" also creates the store (the path does not exist yet)
    for theirs, episodes in [("w", 1), ("a", 2)]:
        assert other_process(f"open {theirs}") == "opened"
        for ours in ("a", "w"):
            with pytest.raises(RuntimeError, match="already open for writing"):
                EpisodeStore(path, mode=ours)
        assert EpisodeStore(path).num_episodes == episodes  # the refused "w" deleted nothing
        assert other_process("close") == "closed"
    # the reverse: this process writes, the other one is refused
    for ours in ("w", "a"):
        store = EpisodeStore(path, mode=ours)
        for theirs in ("a", "w"):
            assert other_process(f"open {theirs}") == "locked"
        store.close()
    assert other_process("open a") == "opened"  # free again once closed


@pytest.fixture
def small_chunks(tmp_path):
    """A store of 8 episodes whose obs/state chunks hold 4 rows (16 bytes each)."""
    path = tmp_path / "s.zarr"
    with mock.patch.object(store_module, "CHUNK_BYTES", 64), EpisodeStore(path, mode="a") as store:
        for i in range(8):
            store.append_episode(episode(i))
    assert EpisodeStore(path).spec("obs/state")[0] == (4,)
    return path


def every_read_fails(path: Path, match: str) -> None:
    store = EpisodeStore(path)
    with pytest.raises(DamagedStoreError, match=match):
        store.read("obs/state")  # zarr's read path
    with pytest.raises(DamagedStoreError, match=match):
        store.episode(2)
    with pytest.raises(DamagedStoreError, match=match):
        store.gather("obs/state", np.arange(10, 20))  # the direct chunk decoder
    before = np.concatenate([episode(0)["obs/state"], episode(1)["obs/state"][:9]])
    assert np.array_equal(store.read("obs/state", 0, 12), before)  # the chunks before it still read


def test_truncated_chunk_names_array_chunk_file_and_episodes(small_chunks):
    chunk = small_chunks / "data/obs/state/c/3/0"
    chunk.write_bytes(chunk.read_bytes()[:-7])
    every_read_fails(small_chunks, STATE_CHUNK_3 + r" cannot be decoded .*the file .*data/obs/state/c/3/0 is damaged")


@pytest.mark.parametrize("offset", [0, 5, 17, 40, -6, -1])  # blosc header, zstd frame, payload, checksum
def test_bit_flipped_chunk_is_detected(small_chunks, offset):
    chunk = small_chunks / "data/obs/state/c/3/0"
    data = bytearray(chunk.read_bytes())
    data[offset] ^= 0x10
    chunk.write_bytes(bytes(data))
    every_read_fails(small_chunks, STATE_CHUNK_3)


def test_damaged_episode_index_is_named(small_chunks):
    chunk = small_chunks / "meta/episode_ends/c/0"
    chunk.write_bytes(chunk.read_bytes()[:-3])
    with pytest.raises(DamagedStoreError, match=r"meta/episode_ends chunk c/0 \(episode ends 0-4095\)"):
        EpisodeStore(small_chunks)


def test_stores_without_checksums_still_read_and_append(tmp_path):
    """The layout written before chunks carried a crc32c: bytes -> blosc only. It reads (both read
    paths) and appends; an emptied chunk file (what a power loss can leave) is still named. A bit
    flip or a partial truncation there may decode silently through zarr (store.py's docstring)."""
    path = tmp_path / "old.zarr"
    eps = [episode(i) for i in range(4)]
    root = zarr.open_group(path, mode="w")
    root.attrs.update({"format": "embodied.episode_store", "version": 1})
    ends = np.cumsum([len(e["reward"]) for e in eps])
    root.create_array("meta/episode_ends", data=ends, chunks=(4096,), fill_value=-1)
    for key in eps[0]:
        value = np.concatenate([e[key] for e in eps])
        root.create_array(f"data/{key}", data=value, chunks=(4, *value.shape[1:]),
                          compressors=BloscCodec(cname="zstd", clevel=3, shuffle="shuffle"))
    with EpisodeStore(path, mode="a") as store:
        store.append_episode(episode(4))
    store = EpisodeStore(path)
    want = np.concatenate([episode(i)["obs/state"] for i in range(5)])
    assert np.array_equal(store.read("obs/state"), want)
    assert np.array_equal(store.gather("obs/state", np.arange(len(want))[::-1]), want[::-1])
    chunk = path / "data/obs/state/c/3/0"
    chunk.write_bytes(b"")
    every_read_fails(path, STATE_CHUNK_3)
    chunk.write_bytes(b"\x02\x01\x01\x04" + bytes(20))  # truncated: the direct decoder checks blosc's header
    with pytest.raises(DamagedStoreError, match=STATE_CHUNK_3 + ".*do not match the blosc header"):
        EpisodeStore(path).gather("obs/state", np.arange(12, 16))
