"""LeRobot v3.0 export and import with our own reader and writer (the real-LeRobot check is
test_lerobot_compat.py, behind --runslow)."""

import json

import numpy as np
import pytest

from embodied.data.lerobot_format import export_lerobot, import_lerobot, lerobot_key, read_info, store_key
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
