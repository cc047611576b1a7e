"""LeRobot import/export with bad inputs: every feature checked against meta/info.json (shape,
dtype, image size), and a failed import or export leaves nothing behind, so a retry works."""

import json
import shutil

import numpy as np
import pytest

from embodied.data.lerobot_format import export_lerobot, import_lerobot
from embodied.data.store import EpisodeStore
from tests.data.crash_writer import episode


def wide_episode(i):
    """Frames of 48 x 64 (height x width), so a swapped height and width is a different shape, and a
    6-dimensional state that could be read as [2, 3]."""
    ep = episode(i)
    ep["obs/images/cam"] = np.repeat(np.repeat(ep["obs/images/cam"], 3, 1), 4, 2)
    ep["obs/state"] = np.concatenate([ep["obs/state"], ep["obs/state"][:, :2]], 1)
    return ep


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("lerobot")
    with EpisodeStore(root / "s.zarr", mode="a") as store:
        for i in range(4):
            store.append_episode(wide_episode(i))
        store.set_attrs(fps=10)
        export_lerobot(store, root / "export")
    return root / "export"


def edit_info(root, feature, **changes):
    info = json.loads((root / "meta/info.json").read_text())
    info["features"][feature].update(changes)
    (root / "meta/info.json").write_text(json.dumps(info))


def nothing_left(parent):
    assert sorted(p.name for p in parent.iterdir()) == ["data"], list(parent.iterdir())  # no store, no hidden temp


@pytest.mark.parametrize("feature, changes, message", [
    ("observation.state", {"shape": [2, 3]},
     r"'observation.state' has shape \[6\] per frame, meta/info.json declares \[2, 3\]"),
    ("observation.state", {"shape": [5]}, r"'observation.state' has shape \[6\]"),
    ("action", {"dtype": "bool"}, r"'action' holds float32, meta/info.json declares bool"),
    ("observation.images.cam", {"shape": [3, 64, 48], "names": ["channels", "height", "width"]},
     r"'observation.images.cam' has frames of 48x64 \(height x width\), meta/info.json declares 64x48"),
    ("observation.images.cam", {"shape": [64, 48, 3]}, r"'observation.images.cam' has frames of 48x64"),
])
def test_feature_that_differs_from_info_json_is_named_and_nothing_is_left(dataset, tmp_path, feature, changes, message):
    src = shutil.copytree(dataset, tmp_path / "data")
    edit_info(src, feature, **changes)
    with pytest.raises(ValueError, match=r"episode 0.*" + message):
        import_lerobot(src, tmp_path / "s.zarr")
    nothing_left(tmp_path)


def test_failed_import_leaves_nothing_and_retry_works(dataset, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = shutil.copytree(dataset, tmp_path / "data")
    meta = src / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(meta)
    lengths = table.column("length").to_pylist()
    column = table.schema.get_field_index("length")
    pq.write_table(table.set_column(column, "length", pa.array(lengths[:-1] + [99])), meta)
    with pytest.raises(ValueError, match="episode 3 has .* frames, meta/episodes says 99"):
        import_lerobot(src, tmp_path / "s.zarr")  # fails after three episodes were written
    nothing_left(tmp_path)
    pq.write_table(table, meta)
    store = import_lerobot(src, tmp_path / "s.zarr")
    assert store.num_episodes == 4 and store.spec("obs/images/cam")[0] == (48, 64, 3)
    assert np.array_equal(store.read("obs/state"), np.concatenate([wide_episode(i)["obs/state"] for i in range(4)]))


def test_failed_export_leaves_nothing(tmp_path):
    with EpisodeStore(tmp_path / "data" / "s.zarr", mode="a") as store:
        store.append_episode(episode(0))
        store.set_attrs(fps=10)
    store = EpisodeStore(tmp_path / "data" / "s.zarr")
    with pytest.raises(Exception, match="no-such-codec"):  # fails once the data directory exists
        export_lerobot(store, tmp_path / "out", vcodec="no-such-codec")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]
    export_lerobot(store, tmp_path / "out", vcodec="libsvtav1")
    with EpisodeStore(tmp_path / "m.zarr", mode="a") as matrix:
        matrix.append_episode({"obs/state": np.zeros((3, 2, 3), np.float32)})
    with pytest.raises(ValueError, match=r"'obs/state' has rows of shape \[2, 3\]"):
        export_lerobot(EpisodeStore(tmp_path / "m.zarr"), tmp_path / "out2", fps=10)
    assert not (tmp_path / "out2").exists()
