"""LeRobotDataset v3.0 <-> EpisodeStore, with pyarrow (parquet) and PyAV (mp4); no LeRobot import.

    import_lerobot("path/to/lerobot_dataset", "demos.zarr")     # -> EpisodeStore
    export_lerobot(EpisodeStore("demos.zarr"), "path/out", fps=10)   # LeRobotDataset(root=...) loads it

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
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from embodied.data.store import EpisodeStore

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


def _require():
    try:
        import av
        import pyarrow
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
    _, pa = _require()
    files = sorted(Path(root).glob(pattern))
    if not files:
        raise FileNotFoundError(f"{root}: no files match {pattern}")
    return pa.concat_tables([pa.parquet.read_table(f) for f in files])


def read_tasks(root: Path) -> dict[int, str]:
    table = _read_parquets(root, "meta/tasks.parquet").to_pydict()
    names = table.get("task", table.get("__index_level_0__"))  # pandas writes the index as a column
    if names is None:
        raise ValueError(f"{root}/meta/tasks.parquet has no 'task' column: {sorted(table)}")
    return dict(zip(table["task_index"], names))


class _VideoCursor:
    """Decodes one video key's mp4 files front to back, handing out each episode's frames in turn
    (episodes lie in increasing time order in a file; going back reopens it)."""

    def __init__(self, av, fps: float):
        self.av, self.fps, self.path, self.frames, self.last = av, fps, None, None, float("inf")

    def take(self, path: Path, start: float, count: int) -> np.ndarray:
        tol = 0.5 / self.fps
        if path != self.path or self.last >= start - tol:
            container = self.av.open(str(path))
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            self.path, self.last = path, -float("inf")
            self.frames = ((float(f.time), f.to_ndarray(format="rgb24")) for f in container.decode(stream))
        out = []
        while len(out) < count:
            expected = start + len(out) / self.fps
            time, image = next(self.frames, (None, None))
            if time is None:
                raise ValueError(f"{path}: the video ends before t={expected:.4f}s")
            self.last = time
            if time < expected - tol:
                continue  # a frame of an earlier episode
            if time > expected + tol:
                raise ValueError(f"{path}: no frame at t={expected:.4f}s (the next one is at {time:.4f}s)")
            out.append(image)
        return np.stack(out)


def import_lerobot(root: str | Path, store_path: str | Path, max_language_bytes: int = 128) -> EpisodeStore:
    """Read a LeRobot v3.0 dataset into a new episode store (one committed episode per LeRobot episode)."""
    av, pa = _require()
    root = Path(root)
    info = read_info(root)
    fps = float(info["fps"])
    features = info["features"]
    tasks = read_tasks(root)
    episodes = _read_parquets(root, "meta/episodes/*/*.parquet").to_pydict()
    order = np.argsort(episodes["episode_index"])
    columns = [k for k, ft in features.items() if ft["dtype"] not in ("video", "image", "string") and k not in FRAME_COLUMNS]
    images = [k for k, ft in features.items() if ft["dtype"] == "image"]
    videos = [k for k, ft in features.items() if ft["dtype"] == "video"]
    cursors = {k: _VideoCursor(av, fps) for k in videos}
    data_cache: dict[Path, dict] = {}
    if (Path(store_path) / "zarr.json").exists():
        raise FileExistsError(f"import_lerobot: {store_path} already holds an episode store; choose a new path")
    store = EpisodeStore(store_path, mode="w")
    for i in order:
        data_file = root / DATA_PATH.format(chunk_index=episodes["data/chunk_index"][i],
                                            file_index=episodes["data/file_index"][i])
        if data_file not in data_cache:
            data_cache.clear()  # files come in episode order: keep one open
            data_cache[data_file] = _load_frames(pa, data_file, columns + images)
        frames = data_cache[data_file]
        rows = np.flatnonzero(frames["episode_index"] == episodes["episode_index"][i])
        if len(rows) != episodes["length"][i]:
            raise ValueError(f"{data_file}: episode {episodes['episode_index'][i]} has {len(rows)} frames, "
                             f"meta/episodes says {episodes['length'][i]}")
        rows = rows[np.argsort(frames["frame_index"][rows])]
        out = {store_key(k): frames[k][rows].reshape(len(rows), *_row_shape(features[k])) for k in columns}
        for k in images:
            out[store_key(k)] = np.stack([_decode_image(av, frames[k][r]) for r in rows])
        for k in videos:
            path = root / info["video_path"].format(video_key=k, chunk_index=episodes[f"videos/{k}/chunk_index"][i],
                                                    file_index=episodes[f"videos/{k}/file_index"][i])
            out[store_key(k)] = cursors[k].take(path, float(episodes[f"videos/{k}/from_timestamp"][i]), len(rows))
        text = np.zeros((len(rows), max_language_bytes), np.uint8)
        for j, task_index in enumerate(frames["task_index"][rows]):
            raw = np.frombuffer(tasks[int(task_index)].encode("utf-8"), np.uint8)[:max_language_bytes]
            text[j, : len(raw)] = raw
        out[LANGUAGE] = text
        out.setdefault("reward", np.zeros(len(rows), np.float32))
        out.setdefault("terminated", np.zeros(len(rows), bool))
        out["terminated"] = out["terminated"].astype(bool)
        store.append_episode(out)
    store.set_attrs(fps=fps, robot_type=info.get("robot_type"), source=f"lerobot {info['codebase_version']}",
                    lerobot_features=features)
    return store


def _row_shape(feature: dict) -> tuple[int, ...]:
    shape = tuple(feature["shape"])
    return () if shape == (1,) else shape


def _load_frames(pa, path: Path, columns: list[str]) -> dict[str, np.ndarray]:
    table = pa.parquet.read_table(path)
    out = {}
    for name in [*columns, "episode_index", "frame_index", "task_index"]:
        if name not in table.column_names:
            raise KeyError(f"{path}: no column {name!r}; columns: {table.column_names}")
        col = table.column(name).combine_chunks()
        if pa.types.is_struct(col.type):  # an image: {bytes, path}
            out[name] = np.array(col.field("bytes").to_pylist(), dtype=object)
            continue
        depth = 0
        while pa.types.is_list(col.type) or pa.types.is_fixed_size_list(col.type) or pa.types.is_large_list(col.type):
            col, depth = col.flatten(), depth + 1
        values = col.to_numpy(zero_copy_only=False)
        out[name] = values.reshape(len(table), -1) if depth else values
    return out


def _decode_image(av, data: bytes) -> np.ndarray:
    import io

    with av.open(io.BytesIO(data)) as container:
        return next(container.decode(video=0)).to_ndarray(format="rgb24")


# ---- export --------------------------------------------------------------------------------------


def export_lerobot(store: EpisodeStore, root: str | Path, fps: float | None = None, robot_type: str | None = None,
                   default_task: str = "", vcodec: str = VIDEO_CODEC) -> Path:
    """Write the store's committed episodes as a LeRobot v3.0 dataset at `root`. Everything goes in
    one data file and one mp4 per camera (LeRobot's 100/200 MB per-file limits are not applied; its
    reader takes any size). Tasks come from `obs/language` when the store has it, else `default_task`."""
    from embodied.data.lerobot_writer import write_dataset

    fps = fps or store.attrs.get("fps")
    if not fps:
        raise ValueError("export_lerobot needs fps: pass fps= or set_attrs(fps=...) on the store")
    if int(fps) != fps:
        raise ValueError(f"LeRobot stores fps as an integer; got {fps}")
    return write_dataset(store, Path(root), int(fps), robot_type, default_task, vcodec)


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
