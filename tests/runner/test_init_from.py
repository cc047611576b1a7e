"""`init_from=`: a new run starts from a trained policy's weights (BC in one run, RL in the next), and says why not
when it cannot."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch
import yaml

from embodied.cli import compose
from embodied.config import ConfigError
from embodied.runner import checkpoint
from embodied.runner.checkpoint import DamagedCheckpointError
from embodied.runner.pipeline import Pipeline, runner_class
from embodied.runner.trainer import Trainer

NET = ["policy.actor_hidden=[16]", "policy.critic_hidden=[16]"]
TINY = ["experiment=arm_reach", "train.num_envs=16", "train.rollout_steps=8", "train.total_env_steps=256",
        "train.eval_episodes=0", "train.progress=false", *NET]


def weights(policy) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in policy.state_dict().items()}


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished PPO run (2 updates)."""
    run = tmp_path_factory.mktemp("trained") / "run"
    Trainer(compose(TINY), run).learn()
    return run


def test_a_new_run_starts_from_the_trained_weights_with_a_fresh_optimizer(trained, tmp_path, capsys):
    final = checkpoint.load_model(trained / "checkpoints" / "final")
    fresh = Trainer(compose(TINY + ["seed=1"]), tmp_path / "fresh")
    assert not same(weights(fresh.policy), final)
    run = Trainer(compose(TINY + ["seed=1", f"init_from={trained}"]), tmp_path / "run")
    assert "init_from: policy weights of" in capsys.readouterr().out
    assert same(weights(run.policy), final)  # before its first update
    assert run.iteration == 0 and run.env_steps == 0 and not run.algo.optimizer.state  # only the weights came
    assert run.config["init_from"] == str(trained / "checkpoints" / "final")
    summary = run.learn()
    assert summary["init_from"] == run.config["init_from"] and summary["env_steps"] == 256
    assert checkpoint.load_config(tmp_path / "run" / "checkpoints" / "final")["init_from"] == run.config["init_from"]
    assert not same(checkpoint.load_model(tmp_path / "run" / "checkpoints" / "final"), final)  # it trained on
    # resuming it continues from its own checkpoint, with init_from's run no longer needed
    resumed = Trainer.resume(tmp_path / "run")
    assert resumed.config["init_from"] == run.config["init_from"] and same(weights(resumed.policy), weights(run.policy))


def test_a_checkpoint_directory_or_an_unfinished_run_says_which_checkpoint(trained, tmp_path, capsys):
    latest = trained / "checkpoints" / "latest"
    run = Trainer(compose(TINY + [f"init_from={latest}"]), tmp_path / "a")
    assert same(weights(run.policy), checkpoint.load_model(latest))
    assert "(the checkpoint given)" in capsys.readouterr().out
    unfinished = tmp_path / "unfinished"
    shutil.copytree(latest, unfinished / "checkpoints" / "latest")
    run = Trainer(compose(TINY + [f"init_from={unfinished}"]), tmp_path / "b")
    assert "the run's latest checkpoint: it has no final one" in capsys.readouterr().out


def test_behaviour_cloning_in_one_run_then_ppo_in_another(tmp_path, capsys):
    """The README's two commands: a BC pipeline that stops after its bc stage, then a PPO run from its weights."""
    bc = ["experiment=arm_reach_bc_ppo", "train.num_envs=8", "train.total_env_steps=0", "train.eval_episodes=4",
          "train.progress=false", *NET, "pipeline.demos.episodes=4", "pipeline.bc.updates=10",
          "pipeline.bc.batch_size=32", "pipeline.online.eval_episodes=4"]
    config = compose(bc)
    runner_class(config)(config, tmp_path / "bc").learn()
    cloned = checkpoint.load_model(tmp_path / "bc" / "bc" / "checkpoints" / "final")
    ppo = Trainer(compose(TINY + [f"init_from={tmp_path / 'bc'}"]), tmp_path / "ppo")
    out = capsys.readouterr().out
    assert "the run's final checkpoint of its bc stage" in out and "policy.normalize_until=1 there, None here" in out
    assert same(weights(ppo.policy), cloned)
    again = Pipeline(compose(bc + [f"init_from={tmp_path / 'bc'}"]), tmp_path / "again")  # a pipeline loads them too
    assert same(weights(again.policy), cloned) and again.config["init_from"] == ppo.config["init_from"]


def test_the_off_policy_pipeline_loads_too_and_refuses_another_policy(trained, tmp_path):
    sac = compose(["experiment=arm_reach", "algo=sac", "policy=sac_mlp", f"init_from={trained}"])
    assert runner_class(sac) is Pipeline
    with pytest.raises(ConfigError, match=r"holds a policy=mlp and this run trains policy=sac_mlp"):
        Pipeline(sac, tmp_path)


def test_weights_that_do_not_fit_name_the_tensors_and_settings(trained, tmp_path):
    with pytest.raises(ConfigError, match=r"(?s)do not fit.*shapes differ: actor\.0\.bias \[16\] there, \[32\] here, "
                                          r"actor\.0\.weight \[16, \d+\] there, \[32, \d+\] here.*"
                                          r"policy\.actor_hidden=\[16\] there, \[32\] here"):
        Trainer(compose(TINY + ["policy.actor_hidden=[32]", f"init_from={trained}"]), tmp_path)
    with pytest.raises(ConfigError, match=r"(?s)do not fit.*\d+ missing \(actor\.4\.bias, actor\.4\.weight\).*"
                                          r"policy\.actor_hidden=\[16\] there, \[16, 16\] here"):
        Trainer(compose(TINY + ["policy.actor_hidden=[16,16]", f"init_from={trained}"]), tmp_path)


def test_a_missing_path_or_a_directory_without_a_checkpoint_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"init_from=.*nowhere: no such directory; expected a run directory"):
        Trainer(compose(TINY + [f"init_from={tmp_path / 'nowhere'}"]), tmp_path / "a")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"empty is not a checkpoint.*checkpoints/final.*model\.safetensors"):
        Trainer(compose(TINY + [f"init_from={tmp_path / 'empty'}"]), tmp_path / "b")


def test_a_damaged_checkpoint_names_the_file(trained, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(trained / "checkpoints" / "final", copy)
    data = bytearray((copy / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF  # one flipped bit in a weight
    (copy / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(DamagedCheckpointError, match=r"model\.safetensors is damaged: its sha256"):
        Trainer(compose(TINY + [f"init_from={copy}"]), tmp_path / "run")


def test_the_cli_starts_from_a_run_and_refuses_resume_with_it(trained, tmp_path, capsys, monkeypatch):
    from embodied.cli import main

    monkeypatch.chdir(tmp_path)
    overrides = [o for o in TINY if not o.startswith("train.total_env_steps")] + ["train.total_env_steps=128"]
    monkeypatch.setattr(sys, "argv", ["embodied", "train", *overrides, f"init_from={trained}",
                                      f"hydra.run.dir={tmp_path}/run"])
    with pytest.raises(SystemExit) as exit_:
        main()
    out = capsys.readouterr()
    assert exit_.value.code == 0, out.err
    assert "init_from: policy weights of" in out.out and "starting from the policy weights of" in out.out
    saved = yaml.safe_load((tmp_path / "run" / "checkpoints" / "final" / "config.yaml").read_text())
    assert saved["init_from"] == str(trained / "checkpoints" / "final")

    monkeypatch.setattr(sys, "argv", ["embodied", "train", f"resume={tmp_path}/run", f"init_from={trained}"])
    with pytest.raises(SystemExit) as exit_:
        main()
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and "error: resume=" in err and "init_from=" in err and "set one" in err, err


@pytest.fixture
def lm():
    pytest.importorskip("peft", reason="the language-agent path needs the lm extra: pip install -e '.[lm]'")
    return ["experiment=null", "env=tests.runner.test_language_agent:EchoEnv", "policy=lm", "policy.model=tiny",
            "policy.lora_rank=4", "policy.max_new_tokens=1", "algo=grpo", "algo.group_size=4", "algo.minibatches=1",
            "train.num_envs=8", "train.total_env_steps=16", "train.eval_episodes=0", "train.progress=false"]


def test_a_language_model_with_lora_starts_from_its_adapters(lm, tmp_path):
    first = Trainer(compose(lm), tmp_path / "first")
    first.learn()
    adapters = checkpoint.load_model(tmp_path / "first" / "checkpoints" / "final")
    assert adapters and all("lora" in k for k in adapters)  # the base model comes from policy.model
    second = Trainer(compose(lm + ["seed=1", f"init_from={tmp_path / 'first'}"]), tmp_path / "second")
    assert same(weights(second.policy), adapters)
    with pytest.raises(ConfigError, match=r"(?s)do not fit.*missing.*policy\.lora_rank=4 there, 0 here"):
        Trainer(compose(lm + ["policy.lora_rank=0", f"init_from={tmp_path / 'first'}"]), tmp_path / "full")
