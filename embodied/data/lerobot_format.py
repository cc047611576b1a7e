"""LeRobotDataset v3.0 <-> EpisodeStore, with pyarrow (parquet) and PyAV (mp4); no LeRobot import. This module
reads (and holds the layout both directions share); embodied/data/lerobot_writer.py writes.

    import_lerobot("path/to/lerobot_dataset", "demos.zarr")     # -> EpisodeStore
    export_lerobot(EpisodeStore("demos.zarr"), "path/out", fps=10)   # (lerobot_writer) LeRobotDataset(root=...) loads it

The v3.0 layout (LeRobot `src/lerobot/datasets/utils.py`, v0.4-v0.6):
    meta/info.json              codebase_version "v3.0", fps, features {key: {dtype, shape, names, info}}
    meta/stats.json             {feature: {min, max, mean, std, count, q01, q10, q50, q90, q99}}
    meta/tasks.parquet          one row per task string: task (index), task_index
    meta/episodes/chunk-000/file-000.parquet   one row per episode: episode_index, tasks, length,
        data/{chunk,file}_index, dataset_{from,to}_index, videos/<key>/{chunk_index, file_index,
        from_timestamp, to_timestamp}, meta/episodes/{chunk,file}_index, stats/<feature>/<stat>
    data/chunk-000/file-000.parquet            one row per frame: features, timestamp, frame_index,
        episode_index, index, task_index
    videos/<key>/chunk-000/file-000.mp4        every episode's frames back to back
Keys map as `observation.state` <-> `obs/state`, `observation.images.<cam>` <-> `obs/images/<cam>`,
`observation.<x>` <-> `obs/<x>`, `next.reward` <-> `reward`, `next.done` <-> `terminated`, other
dots <-> slashes; the task string <-> `obs/language` (zero-padded UTF-8, `embodied.specs.encode_text`).
An imported dataset without `next.reward` / `next.done` gets zero rewards and no terminations.

Damage. An episode whose data parquet or video file cannot be read (truncated, garbled, missing, or a
video that ends before the episode's frames) is left out of an import: one warning per file names it and
the episodes it cost, and a last one says "imported N of M episodes; skipped K damaged: ...". The store
records them in its `lerobot_skipped` attribute. A feature that disagrees with meta/info.json is no damage
but a schema error, and fails the whole import; so does a dataset with every episode damaged.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from embodied.data.store import DamagedDataWarning, EpisodeStore

CODEBASE_VERSION = "v3.0"
CHUNK_FILE = "chunk-{chunk_index:03d}/file-{file_index:03d}"
DATA_PATH = "data/" + CHUNK_FILE + ".parquet"
VIDEO_PATH = "videos/{video_key}/" + CHUNK_FILE + ".mp4"
EPISODES_PATH = "meta/episodes/" + CHUNK_FILE + ".parquet"
FRAME_COLUMNS = ("timestamp", "frame_index", "episode_index", "index", "task_index")  # LeRobot's DEFAULT_FEATURES
RENAMES = {"next.reward": "reward", "next.done": "terminated", "next.success": "success"}
LANGUAGE = "obs/language"
QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)  # LeRobot compute_stats.DEFAULT_QUANTILES
# LeRobot's RGB video defaults (lerobot/configs/video.py VideoEncoderConfig): AV1 via SVT-AV1, a key
# frame every 2 frames so random access decodes at most one extra frame, CRF 30, preset 12
VIDEO_CODEC, VIDEO_OPTIONS = "libsvtav1", {"g": "2", "crf": "30", "preset": "12"}


def store_key(key: str) -> str:
    if key in RENAMES:
        return RENAMES[key]
    if key.startswith("observation."):
        return "obs/" + key[len("observation."):].replace(".", "/")
    return key.replace(".", "/")


def lerobot_key(key: str) -> str:
    inverse = {v: k for k, v in RENAMES.items()}
    if key in inverse:
        return inverse[key]
    if key.startswith("obs/"):
        return "observation." + key[len("obs/"):].replace("/", ".")
    return key.replace("/", ".")


class DamagedFileError(ValueError):
    """A file of a LeRobot dataset cannot be read: the episodes it holds cannot be imported."""

    def __init__(self, path: Path, err: Exception):
        super().__init__(f"{path}: {type(err).__name__}: {str(err)[:200]}")
        self.path = path


def _require():
    try:
        import av
        import pyarrow
        import pyarrow.compute
        import pyarrow.parquet
    except ImportError as err:
        raise ImportError(f"LeRobot import/export needs pyarrow and av: pip install 'embodied[lerobot]' ({err})") from err
    return av, pyarrow


# ---- import --------------------------------------------------------------------------------------


def read_info(root: Path) -> dict:
    path = Path(root) / "meta" / "info.json"
    if not path.exists():
        raise FileNotFoundError(f"{root} is not a LeRobot dataset: no meta/info.json")
    info = json.loads(path.read_text())
    version = str(info.get("codebase_version", "?"))
    if not version.startswith("v3."):
        raise ValueError(f"{root}: LeRobot dataset format {version}; only v3.x is supported "
                         "(convert v2.1 with lerobot.scripts.convert_dataset_v21_to_v30)")
    return info


def _read_parquets(root: Path, pattern: str):
    """The files matching `pattern` as one table, joined by column name: LeRobot's writer orders the
    episode-metadata columns otherwise than exporters before ours did (a dataset we exported and
    LeRobot's `resume` extended holds both orders), and `concat_tables` alone joins by position."""
    _, pa = _require()
    files = sorted(Path(root).glob(pattern))
    if not files:
        raise FileNotFoundError(f"{root}: no files match {pattern}")
    tables = [pa.parquet.read_table(f) for f in files]
    names = tables[0].column_names
    for f, table in zip(files[1:], tables[1:]):
        missing, extra = sorted(set(names) - set(table.column_names)), sorted(set(table.column_names) - set(names))
        if missing or extra:
            raise ValueError(f"{f}: its columns differ from those of {files[0]}: "
                             f"missing {missing or 'none'}, extra {extra or 'none'}")
    # permissive: a column typed int64 in one file and double in another (from_pydict of other values) joins
    return pa.concat_tables([t.select(names) for t in tables], promote_options="permissive")


def read_tasks(root: Path) -> dict[int, str]:
    table = _read_parquets(root, "meta/tasks.parquet").to_pydict()
    names = table.get("task", table.get("__index_level_0__"))  # pandas writes the index as a column
    if names is None:
        raise ValueError(f"{root}/meta/tasks.parquet has no 'task' column: {sorted(table)}")
    return dict(zip(table["task_index"], names))


class _BadVideo(ValueError):
    """A video has no video stream, or no frame where an episode needs one."""


class _VideoCursor:
    """Decodes one video key's mp4 files front to back, handing out each episode's frames in turn
    (episodes lie in increasing time order in a file; going back reopens it)."""

    def __init__(self, av, fps: float):
        self.av, self.fps, self.path, self.frames, self.last = av, fps, None, None, float("inf")

    def take(self, path: Path, start: float, count: int) -> np.ndarray:
        try:
            return self._take(path, start, count)
        except (self.av.error.FFmpegError, _BadVideo) as err:
            # a decoder error ends the frame generator: the file's later episodes then fail fast as a gap
            raise DamagedFileError(path, err) from err

    def _take(self, path: Path, start: float, count: int) -> np.ndarray:
        tol = 0.5 / self.fps
        if path != self.path or self.last >= start - tol:
            container = self.av.open(str(path))
            if not container.streams.video:
                raise _BadVideo("the file holds no video stream")
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            self.path, self.last = path, -float("inf")
            self.frames = ((float(f.time), f.to_ndarray(format="rgb24")) for f in container.decode(stream))
        out = []
        while len(out) < count:
            expected = start + len(out) / self.fps
            time, image = next(self.frames, (None, None))
            if time is None:
                raise _BadVideo(f"the video ends before t={expected:.4f}s")
            self.last = time
            if time < expected - tol:
                continue  # a frame of an earlier episode
            if time > expected + tol:
                raise _BadVideo(f"no frame at t={expected:.4f}s (the next one is at {time:.4f}s)")
            out.append(image)
        return np.stack(out)


def import_lerobot(root: str | Path, store_path: str | Path, max_language_bytes: int = 128,
                   progress: bool = False) -> EpisodeStore:
    """Read a LeRobot v3.0 dataset into a new episode store (one committed episode per LeRobot
    episode) and return it opened for reading. Every feature's shape and dtype is checked against
    meta/info.json. The store is built in a hidden sibling directory and renamed into place only
    when complete, so a failed import leaves nothing behind and can simply be run again. Episodes
    whose files cannot be read are left out with a warning (module docstring, Damage).
    `progress`: a bar over the episodes on a terminal."""
    av, pa = _require()
    root, store_path = Path(root), Path(store_path)
    info = read_info(root)
    if (store_path / "zarr.json").exists():
        raise FileExistsError(f"import_lerobot: {store_path} already holds an episode store; choose a new path")
    reader = _DatasetReader(av, pa, root, info, max_language_bytes)
    damaged: dict[Path, tuple[str, list[int]]] = {}  # file -> (what failed, episode indices)
    with _staged(store_path, "import_lerobot") as tmp, EpisodeStore(tmp, mode="w") as store:
        for i in progress_bar(reader.order, len(reader.order), "import", progress):
            try:
                episode = reader.episode(i)
            except DamagedFileError as err:
                damaged.setdefault(err.path, (str(err), []))[1].append(int(reader.episodes["episode_index"][i]))
                continue
            store.append_episode(episode)
        skipped = sorted(e for _, eps in damaged.values() for e in eps)
        total = len(reader.order)
        report = "; ".join(f"{path.relative_to(root)}: episodes {eps}" for path, (_, eps) in damaged.items())
        if len(skipped) == total:
            raise ValueError(f"import_lerobot: every episode of {root} is damaged ({report}); first error: "
                             f"{next(iter(damaged.values()))[0]}")
        for why, eps in damaged.values():
            warnings.warn(f"import_lerobot: skipping episodes {eps}: {why}", DamagedDataWarning, stacklevel=2)
        if skipped:
            warnings.warn(f"import_lerobot: imported {total - len(skipped)} of {total} episodes of {root}; skipped "
                          f"{len(skipped)} damaged: {report}", DamagedDataWarning, stacklevel=2)
        store.set_attrs(fps=reader.fps, robot_type=info.get("robot_type"), lerobot_skipped=skipped,
                        source=f"lerobot {info['codebase_version']}", lerobot_features=reader.features)
    return EpisodeStore(store_path)


@contextmanager
def _staged(target: Path, what: str) -> Iterator[Path]:
    """A hidden sibling directory to build `target` in: renamed to `target` (one atomic step) when
    the block succeeds, deleted when it fails, so a failed import or export leaves nothing behind
    and can be retried. Also on Ctrl-C; a SIGKILL leaves the hidden `.<name>.<what>-*` directory."""
    if target.exists() and any(target.iterdir()):
        raise FileExistsError(f"{what}: {target} exists and is not empty")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.{what}-", dir=target.parent))
    try:
        yield tmp
        try:
            os.rename(tmp, target)  # replaces an empty directory, refuses a non-empty one
        except OSError as err:
            raise FileExistsError(f"{what}: {target} appeared while writing it ({err})") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


class _DatasetReader:
    """A LeRobot dataset's episodes as store rows, in episode order, each feature checked against
    meta/info.json. Keeps one data file decoded and one video cursor per camera."""

    def __init__(self, av, pa, root: Path, info: dict, max_language_bytes: int):
        self.av, self.pa, self.root, self.info, self.max_language_bytes = av, pa, root, info, max_language_bytes
        self.fps, self.features = float(info["fps"]), info["features"]
        self.tasks = read_tasks(root)
        self.episodes = _read_parquets(root, "meta/episodes/*/*.parquet").to_pydict()
        self.order = np.argsort(self.episodes["episode_index"])
        kinds = {k: ft["dtype"] for k, ft in self.features.items()}
        self.columns = [k for k, d in kinds.items() if d not in ("video", "image", "string") and k not in FRAME_COLUMNS]
        self.images = [k for k, d in kinds.items() if d == "image"]
        self.videos = [k for k, d in kinds.items() if d == "video"]
        self.cursors = {k: _VideoCursor(av, self.fps) for k in self.videos}
        self.data_file, self.frames, self.data_error = None, None, None

    def episode(self, i: int) -> dict[str, np.ndarray]:
        episodes, index = self.episodes, self.episodes["episode_index"][i]
        data_file = self.root / DATA_PATH.format(chunk_index=episodes["data/chunk_index"][i],
                                                 file_index=episodes["data/file_index"][i])
        if data_file != self.data_file:  # files come in episode order: keep one decoded
            self.data_file, self.frames, self.data_error = data_file, None, None
            try:
                table = self.pa.parquet.read_table(data_file)
            except (OSError, self.pa.ArrowException) as err:  # truncated, garbled or missing
                self.data_error = DamagedFileError(data_file, err)
            else:
                self.frames = _load_frames(self.pa, data_file, table, self.columns + self.images)
        if self.data_error is not None:
            raise self.data_error
        frames = self.frames
        rows = np.flatnonzero(frames["episode_index"] == index)
        if len(rows) != episodes["length"][i]:
            raise ValueError(f"{data_file}: episode {index} has {len(rows)} frames, "
                             f"meta/episodes says {episodes['length'][i]}")
        rows = rows[np.argsort(frames["frame_index"][rows])]
        where = f"{data_file}: episode {index}"
        out = {store_key(k): _checked_column(k, self.features[k], frames[k][rows], where) for k in self.columns}
        for k in self.images:
            try:
                images = np.stack([_decode_image(self.av, frames[k][r]) for r in rows])
            except self.av.error.FFmpegError as err:  # an image's encoded bytes are garbled
                raise DamagedFileError(data_file, err) from err
            out[store_key(k)] = _checked_frames(k, self.features[k], images, where)
        for k in self.videos:
            path = self.root / self.info["video_path"].format(video_key=k, chunk_index=episodes[f"videos/{k}/chunk_index"][i],
                                                              file_index=episodes[f"videos/{k}/file_index"][i])
            video = self.cursors[k].take(path, float(episodes[f"videos/{k}/from_timestamp"][i]), len(rows))
            out[store_key(k)] = _checked_frames(k, self.features[k], video, f"{path}: episode {index}")
        text = np.zeros((len(rows), self.max_language_bytes), np.uint8)
        for j, task_index in enumerate(frames["task_index"][rows]):
            raw = np.frombuffer(self.tasks[int(task_index)].encode("utf-8"), np.uint8)[: self.max_language_bytes]
            text[j, : len(raw)] = raw
        out[LANGUAGE] = text
        out.setdefault("reward", np.zeros(len(rows), np.float32))
        out.setdefault("terminated", np.zeros(len(rows), bool))
        out["terminated"] = out["terminated"].astype(bool)
        return out


def _row_shape(feature: dict) -> tuple[int, ...]:
    shape = tuple(feature["shape"])
    return () if shape == (1,) else shape


def _checked_column(key: str, feature: dict, values: np.ndarray, where: str) -> np.ndarray:
    """One feature's rows [n, *shape] as info.json declares them. The shape must match exactly (a
    reshape would accept [6] declared as [2, 3]); shape [1] and a plain column are the same; the
    dtype may differ only within its kind (float64 data for a float32 feature), as the store allows."""
    declared, actual = _row_shape(feature), _row_shape({"shape": values.shape[1:] or (1,)})
    if actual != declared:
        raise ValueError(f"{where}: feature {key!r} has shape {list(values.shape[1:])} per frame, "
                         f"meta/info.json declares {list(feature['shape'])}")
    try:
        dtype = np.dtype(feature["dtype"])
    except TypeError:
        raise ValueError(f"{where}: feature {key!r} declares dtype {feature['dtype']!r}, not a number type") from None
    if not np.can_cast(values.dtype, dtype, "same_kind"):
        raise ValueError(f"{where}: feature {key!r} holds {values.dtype}, meta/info.json declares {feature['dtype']}")
    return values.reshape(len(values), *declared).astype(dtype, copy=False)


def _checked_frames(key: str, feature: dict, frames: np.ndarray, where: str) -> np.ndarray:
    """Decoded RGB frames [n, H, W, 3]: H and W must be the declared ones (read by `names`, which
    say whether the channels come first or last)."""
    shape, names = list(feature["shape"]), feature.get("names")
    names = names if isinstance(names, list) else []
    if len(shape) != 3:
        raise ValueError(f"{where}: feature {key!r} is an image of shape {shape} in meta/info.json; expected 3 dims")
    if "height" in names and "width" in names:
        height, width = shape[names.index("height")], shape[names.index("width")]
    else:  # no names: channels are the dimension of size 1, 3 or 4 at either end
        height, width = shape[:2] if shape[-1] in (1, 3, 4) else shape[1:]
    if frames.shape[1:3] != (height, width):
        raise ValueError(f"{where}: feature {key!r} has frames of {frames.shape[1]}x{frames.shape[2]} (height x width), "
                         f"meta/info.json declares {height}x{width} (shape {shape}, names {names or None})")
    return frames


def _load_frames(pa, path: Path, table, columns: list[str]) -> dict[str, np.ndarray]:
    """Columns of a data file's table as arrays [rows, *shape]; list columns keep their nesting as dimensions."""
    out = {}
    for name in [*columns, "episode_index", "frame_index", "task_index"]:
        if name not in table.column_names:
            raise KeyError(f"{path}: no column {name!r}; columns: {table.column_names}")
        col = table.column(name).combine_chunks()
        if pa.types.is_struct(col.type):  # an image: {bytes, path}
            out[name] = np.array(col.field("bytes").to_pylist(), dtype=object)
            continue
        shape = []
        while pa.types.is_list(col.type) or pa.types.is_fixed_size_list(col.type) or pa.types.is_large_list(col.type):
            lengths = np.unique(pa.compute.list_value_length(col).to_numpy(zero_copy_only=False))
            if len(lengths) > 1:
                raise ValueError(f"{path}: column {name!r} holds lists of different lengths {lengths[:5].tolist()}")
            shape.append(int(lengths[0]) if len(lengths) else 0)
            col = col.flatten()
        out[name] = col.to_numpy(zero_copy_only=False).reshape(len(table), *shape)
    return out


def _decode_image(av, data: bytes) -> np.ndarray:
    import io

    with av.open(io.BytesIO(data)) as container:
        return next(container.decode(video=0)).to_ndarray(format="rgb24")


def progress_bar(items, total: int, what: str, show: bool):
    """`items`, with a bar over them on stderr when `show` and stderr is a terminal."""
    if not (show and sys.stderr.isatty()):
        return items
    from rich.console import Console
    from rich.progress import track

    return track(items, total=total, description=what, console=Console(stderr=True), transient=True)


def iter_episodes(store: EpisodeStore) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    for e in range(store.num_episodes):
        start, stop = store.episode_range(e)
        yield e, {k: store.read(k, start, stop) for k in store.keys}


def episode_stats(values: np.ndarray, image: bool) -> dict[str, np.ndarray]:
    """LeRobot's per-feature statistics of one episode: images per channel in [0, 1] as [C, 1, 1]."""
    x = values.astype(np.float64)
    if image:
        x = x.reshape(-1, x.shape[-1]) / 255.0
    elif x.ndim == 1:
        x = x[:, None]
    stats = {"min": x.min(0), "max": x.max(0), "mean": x.mean(0), "std": x.std(0), "count": np.array([len(values)])}
    for q in QUANTILES:
        stats[f"q{int(q * 100):02d}"] = np.quantile(x, q, axis=0)
    if image:
        stats = {k: (v[:, None, None] if k != "count" else v) for k, v in stats.items()}
    return stats


def aggregate_stats(per_episode: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Dataset statistics from episode statistics: exact min/max/mean/std; quantiles as the
    count-weighted mean of the episodes' (LeRobot's `aggregate_stats` does the same)."""
    counts = np.array([s["count"][0] for s in per_episode], dtype=np.float64)
    w = counts / counts.sum()
    shape = (-1,) + (1,) * per_episode[0]["mean"].ndim
    means = np.stack([s["mean"] for s in per_episode])
    mean = (means * w.reshape(shape)).sum(0)
    var = ((np.stack([s["std"] for s in per_episode]) ** 2 + (means - mean) ** 2) * w.reshape(shape)).sum(0)
    out = {"min": np.min([s["min"] for s in per_episode], 0), "max": np.max([s["max"] for s in per_episode], 0),
           "mean": mean, "std": np.sqrt(var), "count": np.array([int(counts.sum())])}
    for q in QUANTILES:
        key = f"q{int(q * 100):02d}"
        out[key] = (np.stack([s[key] for s in per_episode]) * w.reshape(shape)).sum(0)
    return out


def quiet_svt() -> None:
    os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints its whole config at info level; errors only
