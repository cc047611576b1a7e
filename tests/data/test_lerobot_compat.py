"""Real LeRobot (0.6.1, in the separate environment scripts/lerobot_env.sh builds) reads our export,
and our importer reads what LeRobot's own writer produced. Slow: the first run builds the environment
(~3.5 min, ~5.4 GB, cached in .lerobot-env/: fixture `lerobot_python`, tests/conftest.py); each LeRobot
call starts a fresh interpreter."""

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from embodied.data.lerobot_format import import_lerobot
from embodied.data.lerobot_writer import export_lerobot
from embodied.data.sources import load_transitions, store_path
from embodied.data.store import EpisodeStore
from embodied.specs import Spec
from tests.data.crash_writer import episode

pytestmark = pytest.mark.slow
SIDE = Path(__file__).resolve().parent / "lerobot_side.py"


def run_side(python, *args):
    result = subprocess.run([python, str(SIDE), *map(str, args)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]


def test_lerobot_reads_our_export(lerobot_python, tmp_path):
    store = EpisodeStore(tmp_path / "s.zarr", mode="a")
    for i in range(5):
        ep = episode(i)
        ep["obs/images/cam"] = np.repeat(np.repeat(ep["obs/images/cam"], 4, 1), 4, 2)
        store.append_episode(ep)
    export_lerobot(store, tmp_path / "export", fps=10)
    run_side(lerobot_python, "read", tmp_path / "export", tmp_path / "read.npz")
    got = np.load(tmp_path / "read.npz")
    meta = json.loads(str(got["meta"]))
    assert meta["num_episodes"] == 5 and meta["num_frames"] == store.num_steps
    assert meta["camera_keys"] == ["observation.images.cam"]
    assert np.array_equal(got["observation.state"], store.read("obs/state"))
    assert np.array_equal(got["action"], store.read("action"))
    assert np.array_equal(got["next.reward"].reshape(-1), store.read("reward"))
    assert np.array_equal(got["next.done"].reshape(-1), store.read("terminated"))
    ends = store.episode_ends
    assert np.array_equal(got["episode_index"].reshape(-1), np.searchsorted(ends, np.arange(ends[-1]), side="right"))
    texts = [bytes(r).rstrip(b"\0").decode() for r in store.read("obs/language")]
    assert got["task"].tolist() == texts
    images = got["observation.images.cam"]  # LeRobot: float CHW in [0, 1]
    assert images.shape == (store.num_steps, 3, 64, 64)
    err = np.abs(images.transpose(0, 2, 3, 1) * 255 - store.read("obs/images/cam").astype(float))
    assert err.mean() < 3.0, err.mean()


def test_we_read_what_lerobot_wrote(lerobot_python, tmp_path):
    run_side(lerobot_python, "write", tmp_path / "written", tmp_path / "fed.npz")
    fed = np.load(tmp_path / "fed.npz")
    store = import_lerobot(tmp_path / "written", tmp_path / "s.zarr")
    assert store.num_episodes == 3 and store.episode_ends.tolist() == [7, 19, 24]
    assert np.array_equal(store.read("obs/state"), fed["observation.state"])
    assert np.array_equal(store.read("action"), fed["action"])
    assert np.array_equal(store.read("reward"), fed["next.reward"].reshape(-1))
    assert np.array_equal(store.read("terminated"), fed["next.done"].reshape(-1))
    texts = [bytes(r).rstrip(b"\0").decode() for r in store.read("obs/language")]
    assert texts == fed["task"].tolist()
    err = np.abs(store.read("obs/images/front").astype(float) - fed["observation.images.front"].astype(float))
    assert err.mean() < 4.0, err.mean()
    assert store.attrs["fps"] == 10


def test_data_source_trains_from_what_lerobot_wrote(lerobot_python, tmp_path, monkeypatch):
    """A dataset LeRobot's own writer made (create, add_frame, save_episode, finalize) is a `data=` source as it
    is: imported once into the cache, its frames the transitions that were fed to the writer."""
    rng = np.random.default_rng(0)
    lengths = [6, 9, 4]
    n, ends = sum(lengths), np.cumsum(lengths)
    fed = {"observation.state": rng.normal(size=(n, 5)).astype(np.float32),
           "action": rng.uniform(-1, 1, (n, 2)).astype(np.float32),
           "next.reward": rng.normal(size=n).astype(np.float32), "next.done": np.isin(np.arange(n), ends[:2] - 1)}
    # episodes 0 and 1 terminate; episode 2 stops without a termination (a time limit)
    np.savez(tmp_path / "fed.npz", fps=10, episode_index=np.repeat(np.arange(3), lengths), task=np.array(["push"] * n),
             **fed)
    run_side(lerobot_python, "write_npz", tmp_path / "written", tmp_path / "fed.npz")
    monkeypatch.setenv("EMBODIED_CACHE", str(tmp_path / "cache"))
    cached = store_path(tmp_path / "written")
    assert cached.parent == tmp_path / "cache" / "lerobot" and store_path(tmp_path / "written") == cached
    rows = load_transitions([tmp_path / "written"], {"state": Spec((5,))}, Spec((2,), low=-1.0, high=1.0), gamma=0.5)
    state = torch.from_numpy(fed["observation.state"])
    assert rows.batch_size == (n,)
    assert torch.equal(rows["obs", "state"], state)
    assert torch.equal(rows["action"], torch.from_numpy(fed["action"]))
    assert torch.equal(rows["reward"], torch.from_numpy(fed["next.reward"]))
    assert torch.equal(rows["terminated"], torch.from_numpy(fed["next.done"]))
    assert rows["truncated"].nonzero().view(-1).tolist() == [n - 1]
    last = np.isin(np.arange(n), ends - 1)  # an episode's last row bootstraps from its own observation
    assert torch.equal(rows["next_obs", "state"][~last], state[1:][~last[:-1]])
    assert torch.equal(rows["next_obs", "state"][last], state[last])
    r = fed["next.reward"][:6]  # episode 0's return-to-go, by hand
    assert rows["mc_return"][0].item() == pytest.approx(sum(r[t] * 0.5**t for t in range(6)), rel=1e-5)
