"""`embodied data info|export|import` as a user runs them (subprocesses)."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from embodied.data.store import EpisodeStore
from embodied.data.summary import describe, find_dataset, summarize
from tests.data.crash_writer import episode



def embodied(*args, cwd):
    return subprocess.run([sys.executable, "-m", "embodied.cli", "data", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def make_store(path: Path, episodes: int = 4) -> EpisodeStore:
    """Episodes with a state, an action, a camera, a language instruction, interventions and a success flag
    (episodes 0 and 2 succeed)."""
    with EpisodeStore(path, mode="a") as store:
        for i in range(episodes):
            ep = episode(i)
            ep["obs/images/cam"] = np.repeat(np.repeat(ep["obs/images/cam"], 4, 1), 4, 2)  # 64 x 64 for SVT-AV1
            ep["success"] = np.arange(len(ep["reward"])) == len(ep["reward"]) - 1 if i % 2 == 0 else \
                np.zeros(len(ep["reward"]), bool)
            store.append_episode(ep)
        store.set_attrs(fps=10)
    return EpisodeStore(path)


def test_info_names_episodes_frames_keys_success_and_interventions(tmp_path):
    store = make_store(tmp_path / "s.zarr")
    out = embodied("info", tmp_path / "s.zarr", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"4 episodes, {store.num_steps} frames, 10 fps" in out.stdout
    rows = {line.split()[0]: line.split(None, 1)[1] for line in out.stdout.splitlines() if line.startswith("  ")}
    assert rows["obs/state"] == "[4]  float32" and rows["obs/images/cam"] == "[64, 64, 3]  uint8"
    assert rows["is_intervention"] == "[]  bool" and set(rows) == set(store.keys)
    assert "success rate: 50.0% (from 'success')" in out.stdout
    share = store.read("is_intervention").mean()
    assert f"intervention share: {share:.1%} of frames" in out.stdout
    assert "language instructions: 4" in out.stdout


def test_export_then_import_round_trips_frame_for_frame(tmp_path):
    store = make_store(tmp_path / "s.zarr")
    out = embodied("export", tmp_path / "s.zarr", tmp_path / "lerobot", "--fps", "10", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "exported 4 episodes" in out.stdout
    info = describe(summarize(tmp_path / "lerobot"))  # what `data info` prints for it (in process: saves a start)
    assert f"LeRobot v3.0, 4 episodes, {store.num_steps} frames" in info
    assert "observation.state" in info and "success rate: 50.0% (from 'next.success')" in info
    out = embodied("import", tmp_path / "lerobot", tmp_path / "back.zarr", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    back = EpisodeStore(tmp_path / "back.zarr")
    assert np.array_equal(back.episode_ends, store.episode_ends)
    for k in ["obs/state", "action", "reward", "terminated", "is_intervention", "success"]:
        assert np.array_equal(back.read(k), store.read(k)), k
    err = np.abs(back.read("obs/images/cam").astype(float) - store.read("obs/images/cam").astype(float))
    assert err.mean() < 3.0, err.mean()  # AV1 is lossy (test_lerobot_format.py's bound)
    texts = lambda s: [bytes(r).rstrip(b"\0").decode() for r in s.read("obs/language")]  # noqa: E731
    assert texts(back) == texts(store)
    # LeRobot keeps task strings, not their padded width: --language-bytes gives the store's width back exactly
    out = embodied("import", tmp_path / "lerobot", tmp_path / "back24.zarr", "--language-bytes", "24", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert np.array_equal(EpisodeStore(tmp_path / "back24.zarr").read("obs/language"), store.read("obs/language"))


def one_line_error(out) -> str:
    assert out.returncode == 1, out.stdout
    assert out.stderr.startswith("error: ") and out.stderr.strip().count("\n") == 0, out.stderr
    return out.stderr


def test_missing_path_is_a_one_line_error(tmp_path):
    # each command starts in ~3 s (torch), so one command here; the others share `find_dataset`'s check
    message = one_line_error(embodied("info", tmp_path / "nope", cwd=tmp_path))
    assert f"no such file or directory: {tmp_path / 'nope'}" in message
    with pytest.raises(FileNotFoundError, match="neither an episode store"):
        find_dataset(tmp_path)


def test_damaged_store_is_a_one_line_error_and_exports_nothing(tmp_path):
    make_store(tmp_path / "s.zarr", episodes=2)
    chunk = tmp_path / "s.zarr/meta/episode_ends/c/0"
    chunk.write_bytes(chunk.read_bytes()[:-3])
    message = one_line_error(embodied("export", tmp_path / "s.zarr", tmp_path / "out", cwd=tmp_path))
    assert "meta/episode_ends" in message and "damaged" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]  # no dataset, no hidden staging directory
