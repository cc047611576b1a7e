"""Envs of one's own, without editing embodied/: named by import path (env=package.module:Class), or declared by an
installed package in the `embodied.envs` entry points. Such an env may lack snapshots (get_state): its checkpoints
resume all the same, from a fresh seeded reset."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from embodied import registry
from embodied.cli import compose, list_cmd
from embodied.runner import checkpoint
from embodied.runner.pipeline import Pipeline
from embodied.runner.trainer import Trainer

# a user's module, outside embodied/: a VecEnv subclass with a Config dataclass, and no get_state/set_state
POINT_ENV = '''
from dataclasses import dataclass

import torch
from tensordict import TensorDict

from embodied.envs import VecEnv
from embodied.specs import Spec


@dataclass(frozen=True)
class PointConfig:
    max_episode_steps: int = 20
    radius: float = 0.1  # success: |x| below it


class PointEnv(VecEnv):
    """A point on a line, pushed by the action toward the origin."""

    Config = PointConfig

    def __init__(self, config, num_envs=1, device="cpu"):
        self.config, self.num_envs, self.device = config, num_envs, torch.device(device)
        self.max_episode_steps = config.max_episode_steps
        self.observation_spec = {"state": Spec((1,))}
        self.action_spec = Spec((1,), low=-1.0, high=1.0)
        self.generator = torch.Generator().manual_seed(0)
        self.x = torch.zeros(num_envs)
        self.t = torch.zeros(num_envs, dtype=torch.long)

    def _obs(self):
        return TensorDict({"state": self.x[:, None].clone()}, batch_size=[self.num_envs])

    def _reset(self, seed, options):
        if seed is not None:
            self.generator.manual_seed(seed)
        self.x, self.t = torch.rand(self.num_envs, generator=self.generator) * 2 - 1, torch.zeros_like(self.t)
        return self._obs(), {}

    def _step(self, action):
        self.x, self.t = self.x + 0.1 * action[:, 0].clamp(-1, 1), self.t + 1
        success, truncated = self.x.abs() < self.config.radius, self.t >= self.max_episode_steps
        final_obs = self._obs()
        self.x = torch.where(truncated, torch.rand(self.num_envs, generator=self.generator) * 2 - 1, self.x)
        self.t = torch.where(truncated, 0, self.t)
        info = {"final_obs": final_obs, "success": success}
        return self._obs(), -self.x.abs(), torch.zeros_like(truncated), truncated, info
'''

DIST_INFO = {  # an installed distribution declaring two envs, as pip leaves it in site-packages
    "METADATA": "Metadata-Version: 2.1\nName: user-envs\nVersion: 0.1\n",
    "entry_points.txt": "[embodied.envs]\npoint = user_envs.point:PointEnv\n"
                        "broken = user_envs.broken:BrokenEnv [fast]\n",
}
TINY = ["train.num_envs=16", "train.rollout_steps=8", "train.total_env_steps=256", "train.eval_episodes=8",
        "train.progress=false"]


def user_package(site: Path, dist_info: bool = False) -> Path:
    (site / "user_envs").mkdir(parents=True)
    (site / "user_envs" / "__init__.py").write_text("")
    (site / "user_envs" / "point.py").write_text(POINT_ENV)
    (site / "user_envs" / "broken.py").write_text("import not_an_installed_package_xyz  # noqa: F401\n")
    if dist_info:
        (site / "user_envs-0.1.dist-info").mkdir()
        for name, text in DIST_INFO.items():
            (site / "user_envs-0.1.dist-info" / name).write_text(text)
    return site


def embodied(*args, cwd, site):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "embodied.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_env_by_import_path_trains_from_the_cli(tmp_path):
    site = user_package(tmp_path / "site")
    out = embodied("train", "env=user_envs.point:PointEnv", "env.radius=0.2", *TINY, cwd=tmp_path, site=site)
    assert out.returncode == 0, out.stderr
    assert "evaluation: success" in out.stdout
    (run,) = (tmp_path / "runs" / "user_envs.point.PointEnv").iterdir()  # no ':' in a directory name
    saved = yaml.safe_load((run / "checkpoints" / "final" / "config.yaml").read_text())
    assert saved["env"] == {"name": "user_envs.point:PointEnv", "max_episode_steps": 20, "radius": 0.2}


def test_installed_entry_point_is_listed_and_trains(tmp_path, monkeypatch, capsys):
    site = user_package(tmp_path / "site", dist_info=True)
    monkeypatch.syspath_prepend(str(site))
    registry._installed.cache_clear()  # entry points are read once per process
    try:
        assert registry.resolve("env", "point").__name__ == "PointEnv"
        list_cmd()
    finally:
        monkeypatch.undo()
        registry._installed.cache_clear()
    assert any(line.split() == ["env", "point", "user_envs.point:PointEnv", "(from", "user-envs)"]
               for line in capsys.readouterr().out.splitlines())
    out = embodied("train", "env=point", *TINY, cwd=tmp_path, site=site)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "runs" / "point").is_dir()


def test_installed_env_missing_a_package_fails_in_one_line_and_leaves_nothing(tmp_path):
    site = user_package(tmp_path / "site", dist_info=True)
    out = embodied("train", "env=broken", *TINY, cwd=tmp_path, site=site)
    assert out.returncode == 1
    assert "error: env 'broken' needs the optional package 'not_an_installed_package_xyz': " \
           "pip install 'user-envs[fast]'" in out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    assert not (tmp_path / "runs").exists()


def test_checkpoints_without_env_snapshots_resume_from_a_fresh_reset(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(user_package(tmp_path / "site")))
    run = tmp_path / "run"
    Trainer(compose(["env=user_envs.point:PointEnv", *TINY, "train.eval_episodes=0"]), run).learn()
    latest = run / "checkpoints" / "latest"
    assert "env" not in checkpoint.load_trainer(latest)
    (latest / "config.yaml").write_text((latest / "config.yaml").read_text().replace("total_env_steps: 256",
                                                                                      "total_env_steps: 512"))
    checkpoint.reseal(latest)  # an edit on purpose: train 2 more iterations
    capsys.readouterr()
    resumed = Trainer.resume(run)
    assert "resuming without the envs' state (PointEnv has no snapshots)" in capsys.readouterr().out
    assert resumed.learn()["env_steps"] == 512


def test_off_policy_checkpoints_without_env_snapshots_resume(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(user_package(tmp_path / "site")))
    run = tmp_path / "run"
    overrides = ["env=user_envs.point:PointEnv", "policy=sac_mlp", "algo=sac", "train.num_envs=8",
                 "train.total_env_steps=64", "train.eval_episodes=0", "train.progress=false", "algo.batch_size=16",
                 "policy.actor_hidden=[16]", "policy.critic_hidden=[16]", "+pipeline.online.eval_every=32",
                 "+pipeline.online.eval_episodes=4"]
    Pipeline(compose(overrides), run).learn()
    assert "env" not in checkpoint.load_trainer(run / "online" / "checkpoints" / "latest")
    shutil.rmtree(run / "online" / "checkpoints" / "final")  # interrupted after its last checkpoint
    capsys.readouterr()
    assert Pipeline.resume(run).learn()["env_steps"] == 64
    assert "resuming without the envs' state (PointEnv has no snapshots)" in capsys.readouterr().out
