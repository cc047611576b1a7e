"""How a run config composes: an experiment's settings apply only to the components it was written for; without
one, each component's own defaults (its Config); names resolve through one registry; a loop says what it trains."""

import dataclasses

import pytest
from omegaconf import OmegaConf

from embodied import registry
from embodied.cli import compose
from embodied.config import ConfigError
from embodied.registry import MissingExtraError
from embodied.runner.pipeline import Pipeline
from embodied.runner.pipeline import runner_class
from embodied.runner.trainer import TrainConfig, Trainer

TRAIN_DEFAULTS = dataclasses.asdict(TrainConfig())


def defaults(kind: str, name: str) -> dict:
    """A component's Config defaults as a config holds them (tuples as lists)."""
    fields = dataclasses.asdict(registry.resolve(kind, name).Config())
    return OmegaConf.to_container(OmegaConf.create({"name": name, **fields}))


@pytest.mark.parametrize("name", registry.names("env"))
def test_env_alone_starts_from_its_own_defaults(name, tmp_path):
    """`embodied train env=<name>`: nothing of the default experiment (quadrotor_hover) comes along."""
    config = compose([f"env={name}"])
    assert config["name"] == name
    assert config["env"] == defaults("env", name)
    assert config["policy"] == defaults("policy", "mlp") and config["algo"] == defaults("algo", "ppo")
    assert config["train"] == TRAIN_DEFAULTS
    small = {**config, "train": {**config["train"], "num_envs": 2}}  # the objects it builds, not 10M steps
    try:
        runner_class(small)(small, tmp_path)
    except MissingExtraError as err:  # a backend not installed here: one line naming it and what to install
        assert "\n" not in str(err) and f"env {name!r}" in str(err)
    except ConfigError as err:  # an env that needs a setting (gym: its env.id) names the key
        assert "env." in str(err)


def test_experiment_settings_apply_only_to_its_own_choices():
    hover = compose(["experiment=quadrotor_hover"])
    assert hover["env"]["obs_motor_estimate"] is True and hover["env"]["w_pos"] == 1.5
    waypoint = compose(["experiment=quadrotor_hover", "env=quadrotor_waypoint"])
    assert waypoint["env"] == defaults("env", "quadrotor_waypoint")  # the waypoint task's own weights
    assert waypoint["name"] == "quadrotor_waypoint"
    assert [waypoint[k] for k in ("policy", "algo", "train")] == [hover[k] for k in ("policy", "algo", "train")]
    # a key set on the command line stays; a key the new env lacks goes
    kept = compose(["experiment=quadrotor_hover", "env=quadrotor_waypoint", "env.w_pos=2.5"])
    assert kept["env"] == {**defaults("env", "quadrotor_waypoint"), "w_pos": 2.5}
    assert "obs_motor_estimate" not in compose(["experiment=quadrotor_hover", "env=arm_reach"])["env"]
    # an experiment that extends another: both files' policy settings go with the policy, the env's stay
    rgb = compose(["experiment=mujoco_reach_rgb_bc_ppo", "policy=diffusion"])
    assert rgb["policy"] == defaults("policy", "diffusion") and rgb["env"]["cameras"] == ["front", "side"]
    assert rgb["name"] == "mujoco_reach_rgb_bc_ppo"


def test_default_experiment_applies_only_while_no_group_is_chosen():
    assert compose([]) == compose(["experiment=quadrotor_hover"]) == compose(["seed=0"])
    assert compose(["env=quadrotor_hover"]) == compose(["experiment=null"])  # chosen: its own defaults
    alone = compose(["policy=diffusion", "train.num_envs=64"])
    assert alone["env"] == defaults("env", "quadrotor_hover") and alone["policy"] == defaults("policy", "diffusion")
    assert alone["train"] == {**TRAIN_DEFAULTS, "num_envs": 64} and alone["name"] == "quadrotor_hover"


def test_experiment_null_is_the_components_defaults():
    config = compose(["experiment=null"])
    assert config["env"] == defaults("env", "quadrotor_hover") and config["policy"] == defaults("policy", "mlp")
    assert config["train"] == TRAIN_DEFAULTS and config["name"] == "quadrotor_hover"


def test_a_budget_of_partial_iterations_is_announced(tmp_path, capsys):
    config = compose(["experiment=arm_reach", "train.num_envs=32", "train.rollout_steps=8", "train.total_env_steps=500",
                      "train.eval_episodes=0", "train.progress=false"])
    assert Trainer(config, tmp_path).learn()["env_steps"] == 512
    assert "notice: train.total_env_steps=500 is not a multiple of train.num_envs x rollout_steps = 256; " \
           "training 512 env steps" in capsys.readouterr().out


def test_off_policy_algo_without_a_pipeline_section_runs_the_pipeline(tmp_path):
    config = compose(["env=arm_reach", "policy=sac_mlp", "algo=sac"])
    assert "pipeline" not in config and runner_class(config) is Pipeline
    with pytest.raises(ConfigError, match="algo=sac trains .*policy=sac_mlp"):
        Pipeline(compose(["env=arm_reach", "algo=sac", "train.num_envs=2"]), tmp_path)


def test_names_and_import_paths_resolve_through_the_registry(tmp_path, monkeypatch):
    assert registry.resolve("env", "sims.arm_reach:ArmReachEnv") is registry.resolve("env", "arm_reach")
    with pytest.raises(KeyError, match="unknown env 'moon_lander'; valid choices: .*arm_reach.*import path"):
        registry.resolve("env", "moon_lander")
    with pytest.raises(KeyError, match="No module named 'no_such_package'"):
        registry.resolve("env", "no_such_package.envs:MyEnv")
    with pytest.raises(KeyError, match="has no attribute 'Nope'"):
        registry.resolve("env", "sims.arm_reach:Nope")
    (tmp_path / "needs_package.py").write_text("import not_an_installed_package_xyz  # noqa: F401\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(MissingExtraError, match="'needs_package:MyEnv' needs the optional package 'not_an_instal"):
        registry.resolve("env", "needs_package:MyEnv")
