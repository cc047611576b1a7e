"""`embodied train resume=<run>`: a pipeline started from init_from= resumes once that run is gone; and with
`train.total_env_steps=N` a run, finished or stopped, goes on past its budget as the uninterrupted run with that
budget would; any other override with resume= is an error naming it."""

from __future__ import annotations

import json
import shutil
import sys

import pytest
import torch
import yaml

from embodied.cli import compose, resume_budget
from embodied.config import ConfigError
from embodied.runner.pipeline import Pipeline
from embodied.runner.trainer import Trainer

TINY = ["experiment=arm_reach", "train.num_envs=16", "train.rollout_steps=8", "train.eval_episodes=4",
        "train.progress=false", "policy.actor_hidden=[16]", "policy.critic_hidden=[16]"]
BC_PPO = ["experiment=arm_reach_bc_ppo", "train.num_envs=8", "train.rollout_steps=4", "train.eval_episodes=4",
          "train.progress=false", "policy.actor_hidden=[16]", "policy.critic_hidden=[16]", "pipeline.demos.episodes=8",
          "pipeline.bc.updates=10", "pipeline.bc.batch_size=32", "pipeline.online.eval_episodes=4"]


def losses(run_dir) -> list[tuple]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["iteration"], r["env_steps"], r["algo/loss"]) for r in rows if "algo/loss" in r]


def same_weights(a, b) -> bool:
    return all(torch.equal(v, b.state_dict()[k]) for k, v in a.state_dict().items())


def test_a_finished_run_goes_on_to_a_larger_budget_as_the_uninterrupted_run(tmp_path):
    straight = Trainer(compose(TINY + ["train.total_env_steps=512"]), tmp_path / "straight")
    straight.learn()
    Trainer(compose(TINY + ["train.total_env_steps=256"]), tmp_path / "run").learn()
    assert Trainer.resume(tmp_path / "run").learn()["env_steps"] == 256  # its own budget: nothing left
    resumed = Trainer.resume(tmp_path / "run", {"total_env_steps": 512})
    assert resumed.learn()["env_steps"] == 512
    assert losses(tmp_path / "run") == losses(tmp_path / "straight") and len(losses(tmp_path / "run")) == 4
    assert same_weights(resumed.policy, straight.policy)
    again = Trainer.resume(tmp_path / "run")  # the checkpoints keep the new budget
    assert again.cfg.total_env_steps == 512 and again.iteration == 4
    with pytest.raises(ConfigError, match=r"a resumed run can change only train.total_env_steps, .*not \['lr'\]"):
        Trainer.resume(tmp_path / "run", {"lr": 1.0})


def test_a_pipeline_s_finished_on_policy_stage_goes_on(tmp_path):
    run = tmp_path / "run"
    Pipeline(compose(BC_PPO + ["train.total_env_steps=32"]), run).learn()
    summary = Pipeline.resume(run, {"total_env_steps": 64}).learn()
    assert summary["env_steps"] == 64 and summary["eval/episodes"] == 4
    assert [r[1] for r in losses(run / "online")] == [32, 64]
    assert yaml.safe_load((run / "config.yaml").read_text())["train"]["total_env_steps"] == 64  # a later resume's


def test_a_pipeline_started_from_init_from_resumes_without_that_run(tmp_path):
    Pipeline(compose(BC_PPO + ["train.total_env_steps=32"]), tmp_path / "bc").learn()
    over = BC_PPO + ["train.total_env_steps=32", "pipeline.demos.episodes=0", "pipeline.bc.updates=0",
                     f"init_from={tmp_path}/bc"]
    Pipeline(compose(over), tmp_path / "run").learn()
    start = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["init_from"]
    assert start == str(tmp_path / "bc" / "online" / "checkpoints" / "final")
    shutil.rmtree(tmp_path / "bc")  # the BC run is gone (another machine, cleaned up)
    pipeline = Pipeline.resume(tmp_path / "run", {"total_env_steps": 64})
    assert pipeline.config["init_from"] == start
    summary = pipeline.learn()
    assert summary["env_steps"] == 64 and summary["init_from"] == start


def test_an_off_policy_pipeline_keeps_its_budget_on_resume_and_says_so(tmp_path):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(compose(["experiment=arm_reach_sac"])))
    with pytest.raises(ConfigError, match="learns off-policy.*init_from="):
        Pipeline.resume(tmp_path, {"total_env_steps": 10})


def test_the_command_line_s_budget_applies_and_any_other_override_is_refused(tmp_path, capsys, monkeypatch):
    config = compose(TINY + ["train.total_env_steps=2048", "train.max_seconds=60"])
    config["resume"] = "runs/x"
    overrides = ["resume=runs/x", "train.total_env_steps=2048", "train.max_seconds=60", "hydra.run.dir=/tmp/y"]
    assert resume_budget(config, overrides) == {"total_env_steps": 2048, "max_seconds": 60}
    assert resume_budget(config, ["resume=runs/x"]) == {}
    from embodied.cli import main

    Trainer(compose(TINY + ["train.total_env_steps=128"]), tmp_path / "run").learn()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["embodied", "train", f"resume={tmp_path}/run", "algo.lr=1.0"])
    with pytest.raises(SystemExit) as exit_:
        main()
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and "['algo.lr=1.0'] would not apply" in err and "init_from=" in err, err
    monkeypatch.setattr(sys, "argv", ["embodied", "train", f"resume={tmp_path}/run", "train.total_env_steps=256"])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 0 and [r[1] for r in losses(tmp_path / "run")] == [128, 256]
