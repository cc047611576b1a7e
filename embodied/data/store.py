"""A crash-safe episode store on zarr 3: one growing, chunked, compressed array per key.

    store = EpisodeStore("demos.zarr", mode="a")   # one writer at a time (a file lock says so)
    store.append_episode(episode)                   # TensorDict [T] or {"obs/state": [T, D], ...}
    store.add_rows(rows); store.end_episode()       # or stream an episode in pieces, then commit
    reader = EpisodeStore("demos.zarr")             # mode="r"; any number, also while writing
    reader.refresh()                                # see episodes committed since opening
    reader.episode(3)                               # TensorDict [T_3], nested keys
    reader.gather("obs/images/wrist", index)        # rows at any int array of indices

Layout: `data/<key>` holds all episodes' rows back to back, shape [rows, *row_shape], chunked
along rows; `meta/episode_ends` int64 [E] holds the exclusive end row of each committed episode
(diffusion_policy's ReplayBuffer layout). Any row past `episode_ends[-1]` is uncommitted.

Crash safety. Every file zarr writes here is written whole to a temporary file and renamed into
place (zarr's LocalStore does this), so a file is always either its old or its new version. An
episode's rows are written first (growing the arrays' allocated length when needed); then it is
committed by growing `episode_ends` by one entry (fill value -1) and writing the new end, the
single file rename that makes it visible. Readers trust only the entries before the first -1, so a
SIGKILL at any moment loses at most the open episode; reopening for writing drops it and
overwrites its rows. Durability across power loss would also need fsync, which this does not do.

One writer. A writer holds an flock on `<store>/.writer.lock`, a file nothing ever deletes: mode='w'
empties the directory around it rather than letting zarr remove the directory (zarr's mode='w'
does `rmtree`, which left the flock on a deleted file that the next writer never saw).

Damage. Every chunk of a store created since checksums were added ends in a crc32c of its bytes
(zarr's Crc32cCodec): a truncated or bit-flipped chunk fails to decode instead of reading as other
numbers (without it about half of single bit flips in a blosc-zstd chunk decoded silently).
Older stores, without the codec, still read and append; there `gather` checks a chunk's length
against its blosc header, but a flipped bit may decode silently and `read` (zarr's path) trusts blosc,
which does not notice a truncated chunk (rewrite an old store into a new one to get checksums).
Any chunk that cannot be decoded raises `DamagedStoreError` naming the array, the chunk file and the
episodes it holds (also its attributes `file` and `episodes`). `damaged_chunks(key)` lists every such
chunk of a key by its checksum, without decoding: `data=` leaves their episodes out
(embodied/data/sources.py).
"""

from __future__ import annotations

import fcntl
import math
import shutil
import sys
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path

import google_crc32c  # a dependency of zarr (its Crc32cCodec)
import numpy as np
import torch
import zarr
from tensordict import TensorDict
from numcodecs import Blosc
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, ZstdCodec

UNCOMMITTED = -1  # fill value of episode_ends: an entry not written yet
CHUNK_BYTES = 1 << 20  # ~1 MiB uncompressed per chunk of a vector key: thousands of state rows
# images: ~128 KiB per chunk (4 frames of 96x96 RGB), so a random window decodes little beyond the
# frames it needs. Measured (bench_data.py, 2 cores): 37-frame chunks read through zarr gave ~110
# windows/s uncached; 4-frame chunks decoded by `_read_chunk` ~1,700
IMAGE_CHUNK_BYTES = 1 << 17
_blosc = Blosc()
ENDS_CHUNK = 4096  # episode ends per chunk of the index
LOCK = ".writer.lock"


class DamagedStoreError(ValueError):
    """A file of the store cannot be decoded: truncated, bit-flipped, or its checksum does not match.
    `file`: the chunk file; `episodes`: the committed episodes with rows in it (empty for the index)."""

    def __init__(self, message: str, file: Path | None = None, episodes: range = range(0)):
        super().__init__(message)
        self.file, self.episodes = file, episodes


class DamagedDataWarning(UserWarning):
    """Episodes were left out of an import or a training source: files holding them cannot be read."""


def _flat_numpy(episode: TensorDict | Mapping) -> dict[str, np.ndarray]:
    if isinstance(episode, TensorDict):
        episode = dict(episode.flatten_keys("/").items())
    return {k: (v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)) for k, v in episode.items()}


class EpisodeStore:
    def __init__(self, path: str | Path, mode: str = "r", cache_bytes: int = 256 << 20):
        if mode not in ("r", "a", "w"):
            raise ValueError(f"EpisodeStore mode={mode!r}: choose 'r' (read), 'a' (append, create if absent) or 'w' (overwrite)")
        self.path, self.mode = Path(path), mode
        self._lock = None
        if mode == "r":
            if not (self.path / "zarr.json").exists():
                raise FileNotFoundError(f"no episode store at {self.path} (no zarr.json); open with mode='a' to create one")
        else:
            self._take_writer_lock()
            if mode == "w":
                self._clear()
            for partial in self.path.rglob("*.partial"):  # temporary files of writes a crash interrupted
                partial.unlink(missing_ok=True)
        self.root = zarr.open_group(self.path, mode="r" if mode == "r" else "a")  # never zarr's "w": see _clear
        if mode != "r" and "meta/episode_ends" not in self.root:
            self.root.create_array("meta/episode_ends", shape=(0,), chunks=(ENDS_CHUNK,), dtype="int64",
                                   fill_value=UNCOMMITTED, compressors=[ZstdCodec(level=0), Crc32cCodec()])
            self.root.attrs.update({"format": "embodied.episode_store", "version": 1})
        self._cache: OrderedDict[tuple[str, int], np.ndarray] = OrderedDict()
        self._cache_bytes, self._cached = cache_bytes, 0
        self._open_rows = 0  # rows of the episode in progress (writer only)
        self.refresh()
        if mode != "r":
            self._ends_array.resize((self.num_episodes,))  # forget an entry a crash left uncommitted

    # ---- reading -------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Re-read the committed episodes, then the arrays' metadata (in that order, so every
        committed row lies inside the arrays this reader sees)."""
        self._ends_array = zarr.open_array(self.root.store, path="meta/episode_ends", mode="r" if self.mode == "r" else "r+")
        try:
            ends = self._ends_array[:]
        except Exception as err:  # any decode failure means a damaged file: say which
            raise self._locate_damage("meta/episode_ends", self._ends_array, 0, self._ends_array.shape[0], err) from err
        valid = np.flatnonzero(ends == UNCOMMITTED)
        ends = ends[: valid[0]] if len(valid) else ends
        if len(ends) and (np.any(np.diff(ends) <= 0) or ends[0] <= 0):
            raise ValueError(f"{self.path}: meta/episode_ends is not strictly increasing: {ends[:20]}...")
        self._ends = ends.astype(np.int64)
        self._arrays = {}
        if "data" in self.root:
            self._arrays = {path[len("data/"):]: arr for path, arr in _arrays_under(self.root["data"], "data")}
        for key, arr in self._arrays.items():
            if self.num_steps > arr.shape[0]:
                raise ValueError(f"{self.path}: data/{key} has {arr.shape[0]} rows but episodes end at {self.num_steps}")

    @property
    def episode_ends(self) -> np.ndarray:
        """int64 [E]: exclusive end row of each committed episode."""
        return self._ends

    @property
    def num_episodes(self) -> int:
        return len(self._ends)

    @property
    def num_steps(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    @property
    def keys(self) -> list[str]:
        return sorted(self._arrays)

    @property
    def attrs(self) -> dict:
        return dict(self.root.attrs)

    def spec(self, key: str) -> tuple[tuple[int, ...], np.dtype]:
        """(row shape, dtype) of a key."""
        arr = self._array(key)
        return tuple(arr.shape[1:]), arr.dtype

    def episode_range(self, i: int) -> tuple[int, int]:
        if not -self.num_episodes <= i < self.num_episodes:
            raise IndexError(f"episode {i} out of range: the store has {self.num_episodes} committed episodes")
        i %= self.num_episodes
        return (int(self._ends[i - 1]) if i else 0), int(self._ends[i])

    def read(self, key: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Committed rows [start, stop) of one key."""
        stop = self.num_steps if stop is None else min(stop, self.num_steps)
        arr = self._array(key)
        try:
            return arr[start:stop]
        except Exception as err:  # any decode failure means a damaged file: say which
            raise self._locate_damage(f"data/{key}", arr, start, stop, err) from err

    def episode(self, i: int) -> TensorDict:
        start, stop = self.episode_range(i)
        data = {k: torch.from_numpy(np.ascontiguousarray(self.read(k, start, stop))) for k in self.keys}
        return TensorDict(data, batch_size=[stop - start]).unflatten_keys("/")

    def gather(self, key: str, index: np.ndarray) -> np.ndarray:
        """Rows at `index` (any int array shape S) -> [*S, *row_shape]. Reads each chunk the indices
        touch once, keeping fully committed chunks in an LRU cache of `cache_bytes`."""
        arr = self._array(key)
        flat = np.asarray(index, dtype=np.int64).reshape(-1)
        if len(flat) and (flat.min() < 0 or flat.max() >= self.num_steps):
            raise IndexError(f"gather({key!r}): indices must be in [0, {self.num_steps})")
        rows = arr.chunks[0]
        out = np.empty((len(flat), *arr.shape[1:]), dtype=arr.dtype)
        chunk_of = flat // rows
        order = np.argsort(chunk_of, kind="stable")
        ids, starts = np.unique(chunk_of[order], return_index=True)
        for c, lo, hi in zip(ids, starts, [*starts[1:], len(order)]):
            sel = order[lo:hi]
            out[sel] = self._chunk(key, arr, int(c), rows)[flat[sel] - c * rows]
        return out.reshape(*np.shape(index), *arr.shape[1:])

    def _chunk(self, key: str, arr: zarr.Array, c: int, rows: int) -> np.ndarray:
        hit = self._cache.get((key, c))
        if hit is not None:
            self._cache.move_to_end((key, c))
            return hit
        try:
            block = self._read_chunk(key, arr, c)
            if block is None:
                block = arr[c * rows : min((c + 1) * rows, self.num_steps)]
            else:
                block = block[: max(0, min(rows, self.num_steps - c * rows))]
        except Exception as err:  # any decode failure means a damaged file: say which
            raise self._damaged(f"data/{key}", arr, c, err) from err
        if (c + 1) * rows <= self.num_steps and block.nbytes <= self._cache_bytes:  # committed rows never change
            self._cache[(key, c)] = block
            self._cached += block.nbytes
            while self._cached > self._cache_bytes:
                self._cached -= self._cache.popitem(last=False)[1].nbytes
        return block

    def _read_chunk(self, key: str, arr: zarr.Array, c: int) -> np.ndarray | None:
        """One chunk decoded straight from its file, as the zarr v3 spec lays it out (chunk key
        encoding, then the bytes -> blosc [-> crc32c] codec chain this store writes); None = let zarr
        read it. Zarr's own read path costs ~1-3 ms per call in asyncio machinery, which dominated
        random access to camera frames (benchmarks/RESULTS.md, data section)."""
        crc = _checksummed(arr)
        if crc is None or (arr.dtype.itemsize > 1 and arr.metadata.codecs[0].endian is not None
                           and arr.metadata.codecs[0].endian.value != sys.byteorder):
            return None
        raw = self._checked_bytes(key, arr, c, crc)
        if raw is None:
            return None  # never written: zarr supplies the fill value
        return np.frombuffer(_blosc.decode(raw), dtype=arr.dtype).reshape(arr.chunks)

    def _checked_bytes(self, key: str, arr: zarr.Array, c: int, crc: bool) -> bytes | None:
        """The blosc bytes of chunk c, checked against their crc32c (when the store writes one) and
        blosc's header, without decoding them; None when the chunk file was never written."""
        # a string path and math.prod: pathlib joins and np.prod took half the time of a scan of camera chunks
        path = f"{self.path}/data/{key}/{arr.metadata.encode_chunk_key((c,) + (0,) * (arr.ndim - 1))}"
        try:
            with open(path, "rb") as file:
                raw = file.read()
        except FileNotFoundError:
            return None
        if crc:  # the zarr v3 crc32c codec appends the checksum of the bytes before it, 4 bytes little-endian
            raw, stored = raw[:-4], raw[-4:]
            if len(stored) < 4 or google_crc32c.value(raw) != int.from_bytes(stored, "little"):
                raise ValueError("crc32c checksum mismatch")
        # blosc's header (bytes 4-7: decoded size, 12-15: encoded size) is checked here because blosc
        # itself reads past the end of a truncated buffer: old stores have no crc32c to catch that
        if len(raw) < 16 or int.from_bytes(raw[12:16], "little") != len(raw) or \
                int.from_bytes(raw[4:8], "little") != arr.dtype.itemsize * math.prod(arr.chunks):
            raise ValueError(f"{len(raw)} bytes do not match the blosc header (truncated?)")
        return raw

    def damaged_chunks(self, key: str) -> list[DamagedStoreError]:
        """Every chunk of `key` holding committed rows that fails its check, as the error a read of it
        raises. Chunks in this store's layout are checked without decoding (crc32c and blosc header:
        a file read each, so a scan of camera keys costs about a read of their compressed bytes); other
        layouts are decoded through zarr."""
        arr = self._array(key)
        rows, crc = arr.chunks[0], _checksummed(arr)
        found = []
        for c in range(-(-self.num_steps // rows)):
            try:
                if crc is None:
                    arr[c * rows : min((c + 1) * rows, arr.shape[0])]
                else:
                    self._checked_bytes(key, arr, c, crc)
            except Exception as err:  # any failure means a damaged file: say which
                found.append(self._damaged(f"data/{key}", arr, c, err))
        return found

    def _damaged(self, name: str, arr: zarr.Array, c: int, err: Exception) -> DamagedStoreError:
        """The error for chunk c of array `name` (e.g. data/obs/state): which file, which episodes."""
        chunk = arr.metadata.encode_chunk_key((c,) + (0,) * (arr.ndim - 1))
        lo, hi = c * arr.chunks[0], (c + 1) * arr.chunks[0]  # rows, or entries of episode_ends
        episodes = range(0)
        if name == "meta/episode_ends":
            held = f"episode ends {lo}-{hi - 1}"
        elif lo >= self.num_steps:
            held = "uncommitted rows only"
        else:  # the episodes whose rows lie in [lo, hi)
            first = int(np.searchsorted(self._ends, lo, side="right"))
            last = min(int(np.searchsorted(self._ends, hi - 1, side="right")), self.num_episodes - 1)
            held = f"episodes {first}-{last}" if last > first else f"episode {first}"
            episodes = range(first, last + 1)
        return DamagedStoreError(f"{self.path}: {name} chunk {chunk} ({held}) cannot be decoded ({type(err).__name__}: "
                                 f"{str(err)[:120]}); the file {self.path / name / chunk} is damaged",
                                 self.path / name / chunk, episodes)

    def _locate_damage(self, name: str, arr: zarr.Array, start: int, stop: int, err: Exception) -> DamagedStoreError:
        """Reading rows [start, stop) failed: find the chunk that does not decode (on the error path
        only, so reads pay nothing for it)."""
        rows = arr.chunks[0]
        for c in range(start // rows, -(-stop // rows)):
            try:
                arr[c * rows : min((c + 1) * rows, arr.shape[0])]
            except Exception as chunk_err:
                return self._damaged(name, arr, c, chunk_err)
        return DamagedStoreError(f"{self.path}: {name} rows {start}-{stop} cannot be read "
                                 f"({type(err).__name__}: {str(err)[:120]})")

    def _array(self, key: str) -> zarr.Array:
        if key not in self._arrays:
            raise KeyError(f"no key {key!r} in the episode store {self.path}; keys: {self.keys}")
        return self._arrays[key]

    # ---- writing -------------------------------------------------------------------------------

    def add_rows(self, rows: TensorDict | Mapping) -> None:
        """Append rows [n] to the episode in progress; they become visible with `end_episode`."""
        self._check_writable()
        data = _flat_numpy(rows)
        lengths = {k: v.shape[0] if v.ndim else None for k, v in data.items()}
        if not data or len(set(lengths.values())) != 1 or None in lengths.values():
            raise ValueError(f"add_rows: every key needs the same leading length; got {lengths}")
        n = next(iter(lengths.values()))
        if not self._arrays or (self.num_episodes == 0 and self._open_rows == 0):
            self._create_arrays(data)
        self._check_layout(data)
        start = self.num_steps + self._open_rows
        for key, value in data.items():
            arr = self._arrays[key]
            if arr.shape[0] < start + n:  # grow geometrically so metadata rewrites stay rare
                arr.resize((max(start + n, 2 * arr.shape[0]), *arr.shape[1:]))
            arr[start : start + n] = value
        self._open_rows += n

    def end_episode(self) -> None:
        """Commit the episode in progress (the one atomic step that makes it visible)."""
        self._check_writable()
        if self._open_rows == 0:
            raise ValueError("end_episode: the episode in progress has no rows; add_rows first")
        k, end = self.num_episodes, self.num_steps + self._open_rows
        self._ends_array.resize((k + 1,))  # the new entry reads as -1 (uncommitted) until the next line
        self._ends_array[k] = end
        self._ends = np.append(self._ends, np.int64(end))
        self._open_rows = 0

    def append_episode(self, episode: TensorDict | Mapping) -> None:
        self.add_rows(episode)
        self.end_episode()

    def discard_episode(self) -> None:
        """Forget the rows of the episode in progress (a failed or aborted demonstration)."""
        self._open_rows = 0

    def set_attrs(self, **attrs) -> None:
        """Store-level metadata (fps, robot type, feature names); the group's zarr.json is replaced whole."""
        self._check_writable()
        self.root.attrs.update(attrs)

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()  # releases the flock
            self._lock = None

    def __enter__(self) -> EpisodeStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EpisodeStore({str(self.path)!r}, episodes={self.num_episodes}, steps={self.num_steps}, keys={self.keys})"

    def _take_writer_lock(self) -> None:
        """An flock on `.writer.lock`. Every writer of this path opens the same file (O_CREAT, never
        O_EXCL or truncate-by-replace, and nothing here deletes it), so two writers always contend
        for one inode, also when both create the store at once."""
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock = open(self.path / LOCK, "a")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            self._lock = None
            raise RuntimeError(f"{self.path} is already open for writing by another process (one writer at a time)") from None

    def _clear(self) -> None:
        """mode='w': delete everything in the store but the lock file (which this writer holds)."""
        for child in self.path.iterdir():
            if child.name == LOCK:
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()

    def _check_writable(self) -> None:
        if self.mode == "r" or self._lock is None:
            raise PermissionError(f"{self.path} is open read-only (mode={self.mode!r}) or closed")

    def _create_arrays(self, data: dict[str, np.ndarray]) -> None:
        """Create the data arrays from the first rows (replacing any a crash left before the first commit)."""
        if "data" in self.root:
            del self.root["data"]
        self._arrays = {}
        for key, value in data.items():
            if value.dtype.kind not in "biuf":
                raise TypeError(f"add_rows: {key!r} has dtype {value.dtype}; store numbers, bool, or bytes as uint8")
            row_bytes = max(1, value[0].nbytes)
            target = IMAGE_CHUNK_BYTES if value.ndim == 4 else CHUNK_BYTES
            rows = int(min(max(1, target // row_bytes), 1 << 16))
            self._arrays[key] = self.root.create_array(
                f"data/{key}", shape=(0, *value.shape[1:]), chunks=(rows, *value.shape[1:]), dtype=value.dtype,
                # zstd at a low level: ~2-4x on images and state at hundreds of MB/s (Blosc's defaults);
                # then a crc32c, since blosc-zstd carries no checksum of its own (module docstring)
                compressors=[BloscCodec(cname="zstd", clevel=3, shuffle="shuffle" if value.itemsize > 1 else "bitshuffle"),
                             Crc32cCodec()],
            )

    def _check_layout(self, data: dict[str, np.ndarray]) -> None:
        if set(data) != set(self._arrays):
            raise KeyError(f"add_rows: keys differ from the store's (missing {sorted(set(self._arrays) - set(data))}, "
                           f"unexpected {sorted(set(data) - set(self._arrays))})")
        for key, value in data.items():
            arr = self._arrays[key]
            if value.shape[1:] != arr.shape[1:] or not np.can_cast(value.dtype, arr.dtype, "same_kind"):
                raise ValueError(f"add_rows: {key!r} is {value.dtype} {list(value.shape[1:])} per row, "
                                 f"the store holds {arr.dtype} {list(arr.shape[1:])}")


def _checksummed(arr: zarr.Array) -> bool | None:
    """Whether the array's chunks end in a crc32c, for the bytes -> blosc [-> crc32c] chain this store
    writes (stores made before checksums have none); None for any other chain."""
    codecs = arr.metadata.codecs
    crc = len(codecs) == 3 and isinstance(codecs[2], Crc32cCodec)
    if len(codecs) != 2 + crc or not isinstance(codecs[0], BytesCodec) or not isinstance(codecs[1], BloscCodec):
        return None
    return crc


def _arrays_under(group: zarr.Group, prefix: str):
    for name, member in group.members():
        path = f"{prefix}/{name}"
        if isinstance(member, zarr.Group):
            yield from _arrays_under(member, path)
        else:
            yield path, member
