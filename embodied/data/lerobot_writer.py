"""Writes an EpisodeStore as a LeRobot v3.0 dataset: `export_lerobot` (the layout: embodied/data/lerobot_format.py).

Column types follow what LeRobot 0.6.1's own writer produces: vectors as fixed-size lists, shape (1,)
features as plain columns, one parquet row group per episode, `tasks.parquet` with pandas metadata
that makes `task` the index (LeRobot reads it with `pandas.read_parquet`). The episode-metadata
columns come in LeRobot's order (`DatasetMetadata.save_episode`, `dataset_metadata.py` v0.6.1):
episode_index, tasks, length, data/{chunk,file}_index, dataset_{from,to}_index, videos/<key>/...,
stats/<feature>/<stat> in info.json's feature order, meta/episodes/{chunk,file}_index; so the file
LeRobot's `resume` + `save_episode` adds beside ours has our columns in our order.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from embodied.data.lerobot_format import (
    CODEBASE_VERSION,
    DATA_PATH,
    EPISODES_PATH,
    LANGUAGE,
    VIDEO_CODEC,
    VIDEO_OPTIONS,
    VIDEO_PATH,
    _require,
    _staged,
    aggregate_stats,
    episode_stats,
    iter_episodes,
    lerobot_key,
    progress_bar,
    quiet_svt,
)
from embodied.data.store import EpisodeStore

CHUNKS_SIZE, DATA_MB, VIDEO_MB = 1000, 100, 200  # LeRobot's DEFAULT_CHUNK_SIZE and file-size limits (utils.py)


def export_lerobot(store: EpisodeStore, root: str | Path, fps: float | None = None, robot_type: str | None = None,
                   default_task: str = "", vcodec: str = VIDEO_CODEC, progress: bool = False) -> Path:
    """Write the store's committed episodes as a LeRobot v3.0 dataset at `root`. Everything goes in
    one data file and one mp4 per camera (LeRobot's 100/200 MB per-file limits are not applied; its
    reader takes any size). Tasks come from `obs/language` when the store has it, else `default_task`.
    Like the import, the dataset appears at `root` only when complete. `progress`: a bar on a terminal."""
    fps = fps or store.attrs.get("fps")
    if not fps:
        raise ValueError("export_lerobot needs fps: pass fps= or set_attrs(fps=...) on the store")
    if int(fps) != fps:
        raise ValueError(f"LeRobot stores fps as an integer; got {fps}")
    with _staged(Path(root), "export_lerobot") as tmp:
        write_dataset(store, tmp, int(fps), robot_type, default_task, vcodec, progress)
    return Path(root)


def _is_image(store: EpisodeStore, key: str) -> bool:
    shape, dtype = store.spec(key)
    return len(shape) == 3 and shape[-1] == 3 and dtype == np.uint8


def _feature(shape: tuple[int, ...], dtype: np.dtype) -> dict:
    return {"dtype": "bool" if dtype == np.bool_ else str(dtype), "shape": list(shape) or [1], "names": None}


def _column(pa, values: np.ndarray):
    """One feature's rows -> a parquet column (fixed-size list per row for vectors)."""
    if values.ndim == 1:
        return pa.array(values)
    if values.ndim > 2:
        raise ValueError(f"LeRobot export supports scalar, vector and image features; got rows of shape {values.shape[1:]}")
    return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), values.shape[1])


def _tasks_table(pa, tasks: list[str]):
    table = pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()), "task": pa.array(tasks, pa.string())})
    pandas_meta = {  # what pandas.DataFrame.to_parquet writes for an index named "task"
        "index_columns": ["task"],
        "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object",
                            "metadata": {"encoding": "UTF-8"}}],
        "columns": [
            {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64", "metadata": None},
            {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object", "metadata": None},
        ],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.3",
    }
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


def write_dataset(store: EpisodeStore, root: Path, fps: int, robot_type: str | None, default_task: str,
                  vcodec: str, progress: bool = False) -> Path:
    av, pa = _require()
    quiet_svt()
    if store.num_episodes == 0:
        raise ValueError(f"export_lerobot: {store.path} has no committed episodes")
    if root.exists() and any(root.iterdir()):
        raise FileExistsError(f"export_lerobot: {root} exists and is not empty")
    images = [k for k in store.keys if _is_image(store, k)]
    values = [k for k in store.keys if k not in images and k != LANGUAGE]
    for k in values:  # checked before anything is written
        if len(store.spec(k)[0]) > 1:
            raise ValueError(f"export_lerobot: {k!r} has rows of shape {list(store.spec(k)[0])}; "
                             "LeRobot export supports scalar, vector and RGB image (H, W, 3, uint8) features")
    features = {lerobot_key(k): _feature(*store.spec(k)) for k in values}
    for k in images:
        h, w, c = store.spec(k)[0]
        features[lerobot_key(k)] = {"dtype": "video", "shape": [h, w, c], "names": ["height", "width", "channels"]}
    features.update({
        "timestamp": {"dtype": "float32", "shape": [1], "names": None},
        "frame_index": {"dtype": "int64", "shape": [1], "names": None},
        "episode_index": {"dtype": "int64", "shape": [1], "names": None},
        "index": {"dtype": "int64", "shape": [1], "names": None},
        "task_index": {"dtype": "int64", "shape": [1], "names": None},
    })
    data_path = root / DATA_PATH.format(chunk_index=0, file_index=0)
    data_path.parent.mkdir(parents=True)
    video_paths = {k: root / VIDEO_PATH.format(video_key=lerobot_key(k), chunk_index=0, file_index=0) for k in images}
    containers, streams = {}, {}
    for k, path in video_paths.items():
        path.parent.mkdir(parents=True)
        h, w, _ = store.spec(k)[0]
        containers[k] = av.open(str(path), "w")
        streams[k] = containers[k].add_stream(vcodec, fps, options=dict(VIDEO_OPTIONS) if vcodec == "libsvtav1" else {})
        streams[k].pix_fmt, streams[k].width, streams[k].height = "yuv420p", w, h

    tasks: dict[str, int] = {}
    episode_rows, all_stats = [], []
    writer, offset = None, 0
    for e, ep in progress_bar(iter_episodes(store), store.num_episodes, "export", progress):
        n = len(next(iter(ep.values())))
        texts = [bytes(r).rstrip(b"\0").decode("utf-8") for r in ep[LANGUAGE]] if LANGUAGE in ep else [default_task] * n
        task_index = np.array([tasks.setdefault(t, len(tasks)) for t in texts], np.int64)
        cols = {lerobot_key(k): _column(pa, ep[k]) for k in values}
        cols.update({
            "timestamp": pa.array(np.arange(n, dtype=np.float32) / fps),
            "frame_index": pa.array(np.arange(n, dtype=np.int64)),
            "episode_index": pa.array(np.full(n, e, np.int64)),
            "index": pa.array(np.arange(offset, offset + n, dtype=np.int64)),
            "task_index": pa.array(task_index),
        })
        table = pa.table(cols)
        if writer is None:
            table = table.replace_schema_metadata({b"huggingface": _hf_metadata(features, values)})
            writer = pa.parquet.ParquetWriter(data_path, table.schema)
        writer.write_table(table)  # one row group per episode, as LeRobot writes
        stats = {lerobot_key(k): episode_stats(ep[k], False) for k in values}
        stats.update({name: episode_stats(cols[name].to_numpy(), False) for name in
                      ("timestamp", "frame_index", "episode_index", "index", "task_index")})
        row = {"episode_index": e, "tasks": sorted(set(texts), key=texts.index), "length": n,
               "data/chunk_index": 0, "data/file_index": 0, "dataset_from_index": offset, "dataset_to_index": offset + n}
        for k in images:
            for i, image in enumerate(ep[k]):
                frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
                frame.pts = offset + i
                containers[k].mux(streams[k].encode(frame))
            stats[lerobot_key(k)] = episode_stats(ep[k][:: max(1, n // 100)], True)  # LeRobot also subsamples frames
            row.update({f"videos/{lerobot_key(k)}/chunk_index": 0, f"videos/{lerobot_key(k)}/file_index": 0,
                        f"videos/{lerobot_key(k)}/from_timestamp": offset / fps,
                        f"videos/{lerobot_key(k)}/to_timestamp": (offset + n) / fps})
        for feature in features:  # LeRobot's column order (see the module docstring)
            for name, v in stats[feature].items():
                row[f"stats/{feature}/{name}"] = np.asarray(v).tolist()
        row.update({"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0})
        episode_rows.append(row)
        all_stats.append(stats)
        offset += n
    writer.close()
    for k in images:
        containers[k].mux(streams[k].encode())  # flush
        containers[k].close()
        features[lerobot_key(k)]["info"] = _video_info(av, video_paths[k])

    episodes_path = root / EPISODES_PATH.format(chunk_index=0, file_index=0)
    episodes_path.parent.mkdir(parents=True)
    pa.parquet.write_table(pa.Table.from_pylist(episode_rows), episodes_path)
    pa.parquet.write_table(_tasks_table(pa, list(tasks)), root / "meta" / "tasks.parquet")
    dataset_stats = {f: {k: v.tolist() for k, v in aggregate_stats([s[f] for s in all_stats]).items()}
                     for f in all_stats[0]}
    (root / "meta" / "stats.json").write_text(json.dumps(dataset_stats, indent=4))
    info = {
        "codebase_version": CODEBASE_VERSION, "robot_type": robot_type, "total_episodes": store.num_episodes,
        "total_frames": offset, "total_tasks": len(tasks), "chunks_size": CHUNKS_SIZE,
        "data_files_size_in_mb": DATA_MB, "video_files_size_in_mb": VIDEO_MB, "fps": fps,
        "splits": {"train": f"0:{store.num_episodes}"},
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4" if images else None,
        "features": features,
    }
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=4))
    return root


def _hf_metadata(features: dict, values: list[str]) -> bytes:
    """The Hugging Face `datasets` feature types LeRobot's writer records in the data parquet."""
    hf = {}
    for name, ft in features.items():
        if ft["dtype"] == "video":
            continue
        value = {"dtype": ft["dtype"], "_type": "Value"}
        hf[name] = value if ft["shape"] == [1] else {"feature": value, "length": ft["shape"][0], "_type": "List"}
    return json.dumps({"info": {"features": hf}}).encode()


def _video_info(av, path: Path) -> dict:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        info = {"video.height": stream.height, "video.width": stream.width, "video.codec": stream.codec.canonical_name,
                "video.pix_fmt": stream.pix_fmt, "video.fps": int(stream.base_rate), "video.channels": 3,
                "has_audio": False}
    if info["video.codec"] == "av1":
        info.update({"video.g": 2, "video.crf": 30, "video.preset": 12})
    info["is_depth_map"] = False
    return info
