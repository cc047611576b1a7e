"""LeRobot v3.0 export and import with our own reader and writer (the real-LeRobot check is
test_lerobot_compat.py, behind --runslow)."""

import json

import numpy as np
import pytest

from embodied.data.lerobot_format import import_lerobot, lerobot_key, read_info, store_key
from embodied.data.lerobot_writer import export_lerobot
from embodied.data.store import EpisodeStore
from tests.data.crash_writer import episode


def big_episode(i):
    ep = episode(i)
    ep["obs/images/cam"] = np.repeat(np.repeat(ep["obs/images/cam"], 4, 1), 4, 2)  # 64 x 64: SVT-AV1's comfort zone
    return ep


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("lerobot")
    store = EpisodeStore(root / "s.zarr", mode="a")
    for i in range(4):
        store.append_episode(big_episode(i))
    store.set_attrs(fps=10)
    export_lerobot(store, root / "export", robot_type="so101")
    return store, root


def test_export_layout(exported):
    store, root = exported
    import pyarrow.parquet as pq

    out = root / "export"
    for rel in ["meta/info.json", "meta/stats.json", "meta/tasks.parquet", "meta/episodes/chunk-000/file-000.parquet",
                "data/chunk-000/file-000.parquet", "videos/observation.images.cam/chunk-000/file-000.mp4"]:
        assert (out / rel).exists(), rel
    info = read_info(out)
    assert info["codebase_version"] == "v3.0" and info["total_frames"] == store.num_steps and info["fps"] == 10
    assert info["features"]["observation.state"] == {"dtype": "float32", "shape": [4], "names": None}
    assert info["features"]["observation.images.cam"]["info"]["video.codec"] == "av1"
    data = pq.read_table(out / "data/chunk-000/file-000.parquet")
    assert data.num_rows == store.num_steps
    assert pq.ParquetFile(out / "data/chunk-000/file-000.parquet").num_row_groups == store.num_episodes
    assert data.column("index").to_pylist() == list(range(store.num_steps))
    episodes = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pydict()
    assert episodes["dataset_to_index"] == store.episode_ends.tolist()
    assert episodes["tasks"][2] == ["episode 2"]
    stats = json.loads((out / "meta/stats.json").read_text())
    state = store.read("obs/state")
    assert np.allclose(stats["observation.state"]["mean"], state.mean(0))
    assert np.allclose(stats["observation.state"]["std"], state.std(0), rtol=1e-6)
    assert np.array(stats["observation.images.cam"]["mean"]).shape == (3, 1, 1)
    with pytest.raises(FileExistsError, match="not empty"):
        export_lerobot(store, out)


def test_round_trip(exported):
    store, root = exported
    back = import_lerobot(root / "export", root / "back.zarr")
    assert np.array_equal(back.episode_ends, store.episode_ends)
    for k in ["obs/state", "action", "reward", "terminated", "is_intervention"]:
        assert np.array_equal(back.read(k), store.read(k)), k
    err = np.abs(back.read("obs/images/cam").astype(float) - store.read("obs/images/cam").astype(float))
    assert err.mean() < 3.0, err.mean()  # AV1 at CRF 30 is lossy; smooth test images stay close
    texts = [bytes(r).rstrip(b"\0").decode() for r in back.read("obs/language")]
    assert texts == [bytes(r).rstrip(b"\0").decode() for r in store.read("obs/language")]
    assert back.attrs["fps"] == 10
    with pytest.raises(FileExistsError, match="already holds"):
        import_lerobot(root / "export", root / "back.zarr")


def test_key_mapping_and_errors(tmp_path):
    for ours, theirs in [("obs/state", "observation.state"), ("obs/images/wrist", "observation.images.wrist"),
                         ("reward", "next.reward"), ("terminated", "next.done"), ("action", "action")]:
        assert lerobot_key(ours) == theirs and store_key(theirs) == ours
    with pytest.raises(FileNotFoundError, match="no meta/info.json"):
        import_lerobot(tmp_path, tmp_path / "s.zarr")
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta/info.json").write_text(json.dumps({"codebase_version": "v2.1", "fps": 10}))
    with pytest.raises(ValueError, match="v2.1"):
        import_lerobot(tmp_path, tmp_path / "s.zarr")
    store = EpisodeStore(tmp_path / "t.zarr", mode="a")
    store.append_episode(episode(0))
    with pytest.raises(ValueError, match="needs fps"):
        export_lerobot(store, tmp_path / "out")


STATS = ("min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99")


def lerobot_episode_columns(info: dict) -> list[str]:
    """The meta/episodes columns in the order LeRobot 0.6.1 writes them (`DatasetMetadata.save_episode`:
    its episode dict, then the data and video metadata, then the flattened stats, then
    `_save_episode_metadata` adds meta/episodes/{chunk,file}_index)."""
    videos = [k for k, ft in info["features"].items() if ft["dtype"] == "video"]
    return ["episode_index", "tasks", "length", "data/chunk_index", "data/file_index", "dataset_from_index",
            "dataset_to_index",
            *[f"videos/{k}/{x}" for k in videos
              for x in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")],
            *[f"stats/{k}/{s}" for k in info["features"] for s in STATS],
            "meta/episodes/chunk_index", "meta/episodes/file_index"]


def test_export_writes_lerobots_episode_column_order(exported):
    import pyarrow.parquet as pq

    _, root = exported
    columns = pq.read_table(root / "export/meta/episodes/chunk-000/file-000.parquet").column_names
    assert columns == lerobot_episode_columns(read_info(root / "export"))


def resume_like_lerobot(root, copy_of: int, drop: str | None = None) -> None:
    """Add one episode to an exported dataset as LeRobot's `resume` + `save_episode` does: a new data
    file and a new meta/episodes file (file-001) whose columns come in LeRobot's order. The first
    episodes file is rewritten in the order exporters before LeRobot's order wrote (meta/episodes
    indices before the stats). The new episode repeats episode `copy_of`'s frames."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    info = read_info(root)
    episodes_path = root / "meta/episodes/chunk-000/file-000.parquet"
    episodes = pq.read_table(episodes_path)
    meta = ["meta/episodes/chunk_index", "meta/episodes/file_index"]
    old_order = [c for c in episodes.column_names if not c.startswith("stats/") and c not in meta] + meta + \
        [c for c in episodes.column_names if c.startswith("stats/")]
    pq.write_table(episodes.select(old_order), episodes_path)

    data = pq.read_table(root / "data/chunk-000/file-000.parquet")
    frames = data.filter(pc.equal(data.column("episode_index"), copy_of))
    n, new, offset = frames.num_rows, info["total_episodes"], info["total_frames"]
    frames = frames.set_column(frames.schema.get_field_index("episode_index"), "episode_index",
                               pa.array(np.full(n, new, np.int64)))
    frames = frames.set_column(frames.schema.get_field_index("index"), "index",
                               pa.array(np.arange(offset, offset + n, dtype=np.int64)))
    pq.write_table(frames, root / "data/chunk-000/file-001.parquet")

    row = {k: v[copy_of] for k, v in episodes.to_pydict().items()}
    row.update({"episode_index": new, "data/file_index": 1, "dataset_from_index": offset,
                "dataset_to_index": offset + n, "meta/episodes/file_index": 1})
    columns = [c for c in lerobot_episode_columns(info) if c != drop]
    pq.write_table(pa.Table.from_pydict({c: [row[c]] for c in columns}),
                   root / "meta/episodes/chunk-000/file-001.parquet")
    info.update(total_episodes=new + 1, total_frames=offset + n, splits={"train": f"0:{new + 1}"})
    (root / "meta/info.json").write_text(json.dumps(info, indent=4))


@pytest.fixture
def no_video_export(tmp_path):
    store = EpisodeStore(tmp_path / "s.zarr", mode="a")
    for i in range(3):
        store.append_episode({k: v for k, v in episode(i).items() if k != "obs/images/cam"})
    store.set_attrs(fps=10)
    return store, export_lerobot(store, tmp_path / "export")


def test_dataset_resumed_by_lerobot_imports_every_episode(no_video_export, tmp_path):
    store, root = no_video_export
    resume_like_lerobot(root, copy_of=1)
    back = import_lerobot(root, tmp_path / "back.zarr")
    assert back.num_episodes == 4
    for k in ["obs/state", "action", "reward", "terminated", "is_intervention"]:
        for e in range(3):
            assert np.array_equal(back.read(k, *back.episode_range(e)), store.read(k, *store.episode_range(e))), k
        assert np.array_equal(back.read(k, *back.episode_range(3)), store.read(k, *store.episode_range(1))), k
    texts = [bytes(r).rstrip(b"\0").decode() for r in back.read("obs/language", *back.episode_range(3))]
    assert set(texts) == {"episode 1"}


def test_episodes_file_with_a_missing_column_is_named(no_video_export, tmp_path):
    _, root = no_video_export
    resume_like_lerobot(root, copy_of=0, drop="stats/action/q99")
    with pytest.raises(ValueError, match=r"file-001\.parquet: .*missing \['stats/action/q99'\], extra none"):
        import_lerobot(root, tmp_path / "back.zarr")
    assert not (tmp_path / "back.zarr").exists()
