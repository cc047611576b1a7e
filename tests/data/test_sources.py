"""`data=`: episode stores and LeRobot v3 datasets as the demonstrations of a pipeline (embodied/data/sources.py)."""

import os
import subprocess
import sys

import numpy as np
import torch

from embodied import keys, registry
from embodied.data.lerobot_writer import export_lerobot
from embodied.data.sources import load_transitions
from embodied.data.store import EpisodeStore
from embodied.specs import encode_text


def _store(path, episodes=2, steps=7, seed=0):
    rng = np.random.default_rng(seed)
    with EpisodeStore(path, mode="w") as store:
        for _ in range(episodes):
            store.append_episode({
                "obs/state": rng.random((steps, 26), np.float32), "obs/privileged": rng.random((steps, 10), np.float32),
                "obs/language": np.repeat(encode_text(["reach the red ball"], 64).numpy(), steps, 0),
                "action": rng.random((steps, 4), np.float32) * 2 - 1, "reward": rng.random(steps, np.float32),
                "terminated": np.eye(steps, dtype=bool)[-1], "truncated": np.zeros(steps, bool)})


def test_a_lerobot_dataset_reads_as_the_store_it_came_from(tmp_path, monkeypatch, capsys):
    """Exported to LeRobot v3 and read back through data=: the same transitions and returns-to-go; imported once
    into the cache and reused while the dataset is unchanged."""
    monkeypatch.setenv("EMBODIED_CACHE", str(tmp_path / "cache"))
    env = registry.build("env", "arm_reach", {}, num_envs=1)
    _store(tmp_path / "s.zarr")
    with EpisodeStore(tmp_path / "s.zarr") as store:
        export_lerobot(store, tmp_path / "lerobot", fps=10)
    ours = load_transitions([tmp_path / "s.zarr"], env.observation_spec, env.action_spec, 0.99)
    theirs = load_transitions([tmp_path / "lerobot"], env.observation_spec, env.action_spec, 0.99)
    assert ours.numel() == theirs.numel() == 14
    for key in (keys.ACTION, keys.REWARD, keys.TERMINATED, keys.MC_RETURN, (keys.OBS, keys.STATE),
                (keys.OBS, keys.LANGUAGE), (keys.NEXT_OBS, keys.STATE)):
        torch.testing.assert_close(theirs[key], ours[key])
    # returns-to-go stop at each episode's end: the last row's is its own reward
    torch.testing.assert_close(ours[keys.MC_RETURN][6], ours[keys.REWARD][6])
    assert capsys.readouterr().out.count("importing the LeRobot dataset") == 1
    load_transitions([tmp_path / "lerobot"], env.observation_spec, env.action_spec, 0.99)
    assert "importing" not in capsys.readouterr().out  # the cached import is reused
    assert len(list((tmp_path / "cache" / "lerobot").iterdir())) == 1


def test_a_lerobot_dataset_trains_from_the_cli(tmp_path):
    _store(tmp_path / "s.zarr", episodes=4, steps=20)
    with EpisodeStore(tmp_path / "s.zarr") as store:
        export_lerobot(store, tmp_path / "lerobot", fps=10)
    out = subprocess.run([sys.executable, "-m", "embodied.cli", "train", "experiment=arm_reach_o2o",
                          "pipeline.demos.episodes=0", f"data={tmp_path / 'lerobot'}", "pipeline.bc.updates=10",
                          "pipeline.offline.updates=10", "train.total_env_steps=32", "train.eval_episodes=4",
                          "pipeline.online.eval_episodes=4", "pipeline.online.eval_every=10000", "train.progress=false",
                          f"hydra.run.dir={tmp_path}/run"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "EMBODIED_CACHE": str(tmp_path / "cache")})  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "data: 80 transitions" in out.stdout
    assert (tmp_path / "run" / "offline" / "checkpoints" / "final" / "model.safetensors").exists()
