"""The runner: reproducibility, resume, NaN handling, checkpoints and run-directory contents."""

import json

import pytest
import torch

from embodied.algorithms.losses import NonFiniteLossError
from embodied.cli import compose
from embodied.runner import checkpoint
from embodied.runner.trainer import Trainer

SMALL = ["experiment=arm_reach", "train.num_envs=64", "train.rollout_steps=8", "train.total_env_steps=2048",
         "train.checkpoint_every=2", "train.eval_episodes=16", "train.progress=false"]


def weights(trainer):
    return {k: v.clone() for k, v in trainer.policy.state_dict().items()}


def records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_run_directory_holds_config_metrics_checkpoints_and_curve(tmp_path):
    trainer = Trainer(compose(SMALL), tmp_path)
    summary = trainer.learn()
    assert summary["env_steps"] == 2048 and 0.0 <= summary["eval/success"] <= 1.0
    for path in ["metrics.jsonl", "curve.png", "checkpoints/final/model.safetensors",
                 "checkpoints/final/config.yaml", "checkpoints/latest/trainer.safetensors"]:
        assert (tmp_path / path).exists(), path
    assert any(p.name.startswith("events.out.tfevents") for p in (tmp_path / "tensorboard").iterdir())
    rows = records(tmp_path)
    assert [r["iteration"] for r in rows[:-1]] == [1, 2, 3, 4] and "eval/success" in rows[-1]
    # each iteration's seconds, split into collecting and updating: they add up to its share of the training time
    times = [0.0] + [r["time"] for r in rows[:-1]]
    for before, row in zip(times, rows[:-1]):
        assert row["time/collect"] > 0 and row["time/update"] > 0
        assert row["time/collect"] + row["time/update"] == pytest.approx(row["time"] - before, abs=1e-3)
    assert checkpoint.load_config(tmp_path / "checkpoints" / "final")["env"]["name"] == "arm_reach"


def test_seeded_runs_are_reproducible(tmp_path):
    a = Trainer(compose(SMALL + ["train.eval_episodes=0"]), tmp_path / "a")
    b = Trainer(compose(SMALL + ["train.eval_episodes=0"]), tmp_path / "b")
    a.learn()
    b.learn()
    for key, value in weights(a).items():
        assert torch.equal(value, b.policy.state_dict()[key]), key
    c = Trainer(compose(SMALL + ["train.eval_episodes=0", "seed=1"]), tmp_path / "c")
    c.learn()
    assert not torch.equal(c.policy.state_dict()["log_std"], a.policy.state_dict()["log_std"])
    # evaluations during training (a success curve) leave the training run as it was
    d = Trainer(compose(SMALL + ["train.eval_every=2"]), tmp_path / "d")
    d.learn()
    for key, value in weights(a).items():
        assert torch.equal(value, d.policy.state_dict()[key]), key
    assert [r["iteration"] for r in records(tmp_path / "d") if "eval/success" in r] == [2, 4, 4]  # + the final one


def test_resume_continues_the_same_curve(tmp_path):
    overrides = SMALL + ["train.eval_episodes=0", "train.total_env_steps=4096"]
    straight = Trainer(compose(overrides), tmp_path / "straight")
    straight.learn()

    # the same run, stopped after 2 iterations (its last checkpoint) and resumed
    first = Trainer(compose(overrides[:-1] + ["train.total_env_steps=1024"]), tmp_path / "resumed")
    first.learn()
    # pretend the interruption came later than the checkpoint: a stale metrics line must be dropped
    with (tmp_path / "resumed" / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"iteration": 3, "env_steps": 1536, "time": 0.0}) + "\n")
    cfg_path = tmp_path / "resumed" / "checkpoints" / "latest" / "config.yaml"
    cfg_path.write_text(cfg_path.read_text().replace("total_env_steps: 1024", "total_env_steps: 4096"))
    checkpoint.reseal(cfg_path.parent)  # an edit on purpose (checkpoints carry checksums)
    resumed = Trainer.resume(tmp_path / "resumed")
    assert resumed.iteration == 2
    resumed.learn()
    for key, value in weights(straight).items():
        assert torch.equal(value, resumed.policy.state_dict()[key]), key
    curve = lambda d: [(r["iteration"], r["train/return"] if "train/return" in r else None) for r in records(d)]
    assert curve(tmp_path / "straight") == curve(tmp_path / "resumed")


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path):
    trainer = Trainer(compose(SMALL + ["train.total_env_steps=8192"]), tmp_path)
    original_step = trainer.env.step
    calls = {"n": 0}

    def poisoned_step(action):
        obs, reward, terminated, truncated, info = original_step(action)
        calls["n"] += 1
        if calls["n"] > 8 * 5:  # iteration 6 collects poisoned rewards
            reward = reward * float("nan")
        return obs, reward, terminated, truncated, info

    trainer.env.step = poisoned_step
    with pytest.raises(NonFiniteLossError, match="last good checkpoint"):
        trainer.learn()
    good = checkpoint.load_model(tmp_path / "checkpoints" / "latest")
    assert all(torch.isfinite(v).all() for v in good.values())
    assert checkpoint.load_trainer(tmp_path / "checkpoints" / "latest")["iteration"] == 4


GRPO = ["experiment=arm_reach", "algo=grpo", "algo.group_size=4", "train.num_envs=16", "train.total_env_steps=3000",
        "train.checkpoint_every=1", "train.eval_episodes=0", "train.progress=false", "algo.lr=3e-4"]


@pytest.mark.parametrize("advantage", ["grpo", "rloo"])
def test_grpo_trains_a_robot_policy_from_group_rollouts_and_resumes_on_the_same_curve(tmp_path, advantage):
    """algo=grpo on a VecEnv: each update is 16 // 4 initial states x 4 episodes (collect_groups), env steps are the
    steps before each episode's end; a resumed run continues the same seeds and weights."""
    overrides = GRPO + [f"algo.advantage={advantage}"]
    straight = Trainer(compose(overrides), tmp_path / "straight")
    straight.learn()
    rows = records(tmp_path / "straight")
    assert rows[0]["train/episodes"] == 16 and rows[-1]["env_steps"] >= 3000
    assert rows[0]["env_steps"] == round(16 * rows[0]["train/length"])
    first = Trainer(compose(overrides[:-4] + ["train.total_env_steps=1", *overrides[-3:]]), tmp_path / "resumed")
    first.learn()
    cfg_path = tmp_path / "resumed" / "checkpoints" / "latest" / "config.yaml"
    cfg_path.write_text(cfg_path.read_text().replace("total_env_steps: 1\n", "total_env_steps: 3000\n"))
    checkpoint.reseal(cfg_path.parent)
    resumed = Trainer.resume(tmp_path / "resumed")
    assert resumed.iteration == 1
    resumed.learn()
    for key, value in weights(straight).items():
        assert torch.equal(value, resumed.policy.state_dict()[key]), key
