"""LeRobot import/export with bad inputs: every feature checked against meta/info.json (shape,
dtype, image size), and a failed import or export leaves nothing behind, so a retry works."""

import json
import shutil

import numpy as np
import pytest

from embodied.data.lerobot_format import import_lerobot
from embodied.data.lerobot_writer import export_lerobot
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


@pytest.fixture(scope="module")
def two_files(dataset, tmp_path_factory):
    """The dataset with episodes 2-3 read from a second data file and a second mp4 (copies of the first ones,
    which hold their frames too), as LeRobot's writer lays out a dataset once a file reaches its size limit."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = shutil.copytree(dataset, tmp_path_factory.mktemp("two") / "data")
    for first in [root / "data/chunk-000/file-000.parquet", *root.glob("videos/*/chunk-000/file-000.mp4")]:
        shutil.copy(first, first.with_name(first.name.replace("file-000", "file-001")))
    meta = root / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(meta)
    videos = [n for n in table.column_names if n.startswith("videos/") and n.endswith("/file_index")]
    for name in ["data/file_index", *videos]:
        index = table.schema.get_field_index(name)
        table = table.set_column(index, name, pa.array([0, 0, 1, 1], table.schema.field(name).type))
    pq.write_table(table, meta)
    clean = import_lerobot(root, tmp_path_factory.mktemp("clean") / "s.zarr")
    assert clean.num_episodes == 4
    return root, clean


def truncate(path, keep=0.6):
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * keep)])


def garble_head(path):
    data = bytearray(path.read_bytes())
    data[:64] = bytes(range(64))
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("file, damage", [
    ("data/chunk-000/file-001.parquet", truncate),
    ("data/chunk-000/file-000.parquet", truncate),
    ("data/chunk-000/file-001.parquet", garble_head),
    ("videos/observation.images.cam/chunk-000/file-001.mp4", truncate),
    ("videos/observation.images.cam/chunk-000/file-000.mp4", truncate),
    ("videos/observation.images.cam/chunk-000/file-001.mp4", garble_head),
])
def test_damaged_file_skips_its_episodes_and_imports_the_rest(two_files, tmp_path, file, damage):
    root, clean = two_files
    src = shutil.copytree(root, tmp_path / "data")
    damage(src / file)
    lost, kept = ([2, 3], [0, 1]) if "file-001" in file else ([0, 1], [2, 3])
    with pytest.warns(UserWarning) as caught:
        store = import_lerobot(src, tmp_path / "s.zarr")
    lines = [str(w.message) for w in caught]
    assert len(lines) == 2, lines
    assert f"skipping episodes {lost}: {src / file}: " in lines[0]
    assert lines[1] == f"import_lerobot: imported 2 of 4 episodes of {src}; skipped 2 damaged: {file}: episodes {lost}"
    assert store.num_episodes == 2 and store.attrs["lerobot_skipped"] == lost
    for ours, theirs in enumerate(kept):  # the episodes kept are those of an import of the undamaged dataset
        (a, b), (c, d) = store.episode_range(ours), clean.episode_range(theirs)
        for key in ("obs/state", "obs/images/cam", "action", "obs/language"):
            assert np.array_equal(store.read(key, a, b), clean.read(key, c, d)), key


def test_every_episode_damaged_is_an_error_and_nothing_is_left(two_files, tmp_path):
    src = shutil.copytree(two_files[0], tmp_path / "data")
    truncate(src / "data/chunk-000/file-000.parquet")
    truncate(src / "videos/observation.images.cam/chunk-000/file-001.mp4")
    with pytest.raises(ValueError, match=r"every episode of .* is damaged \(data/chunk-000/file-000.parquet: "
                                         r"episodes \[0, 1\]; videos/.*/file-001.mp4: episodes \[2, 3\]\)"):
        import_lerobot(src, tmp_path / "s.zarr")
    nothing_left(tmp_path)


def test_a_damaged_dataset_as_data_trains_on_the_rest(two_files, tmp_path, monkeypatch):
    import torch

    from embodied.data.sources import open_data
    from embodied.specs import Spec

    monkeypatch.setenv("EMBODIED_CACHE", str(tmp_path / "cache"))
    src = shutil.copytree(two_files[0], tmp_path / "data")
    truncate(src / "data/chunk-000/file-000.parquet")
    spec = {"state": Spec((6,)), "images/cam": Spec((48, 64, 3), torch.uint8)}
    with pytest.warns(UserWarning) as caught:
        source = open_data([src], spec, Spec((2,)), 0.99)
    assert "skipping episodes [0, 1]" in str(caught[0].message) and "imported 2 of 4" in str(caught[1].message)
    assert len(source) == sum(len(wide_episode(i)["reward"]) for i in (2, 3))
    with pytest.warns(UserWarning, match=r"episodes \[0, 1\] are damaged and left out"):  # the cached import
        assert len(open_data([src], spec, Spec((2,)), 0.99)) == len(source)
