"""Every experiment in configs/experiment composes and its sections validate, as `embodied train` checks them
first: a key misplaced in an experiment file fails here, not minutes into a run."""

import pytest

from embodied import registry
from embodied.cli import CONFIG_DIR, compose
from embodied.config import build_config
from embodied.registry import MissingExtraError
from embodied.runner.pipeline import PipelineConfig
from embodied.runner.pipeline import runner_class
from embodied.runner.trainer import TrainConfig

EXPERIMENTS = sorted(p.stem for p in (CONFIG_DIR / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_config_is_valid(name):
    """Each section builds into its Config (build_config raises ConfigError on a misplaced or misspelt key)
    and keeps the experiment's values; the experiment names the runner that reads its sections."""
    config = compose([f"experiment={name}"])
    train = build_config(TrainConfig, config["train"], "train")
    assert train.total_env_steps == config["train"]["total_env_steps"]
    if "pipeline" in config:
        assert isinstance(build_config(PipelineConfig, config["pipeline"], "pipeline"), PipelineConfig)
    replay = getattr(registry.resolve("algo", config["algo"]["name"]), "needs_replay", False)
    assert runner_class(config).__name__ == ("Pipeline" if config.get("pipeline") or replay else "Trainer")
    for group in ("env", "policy", "algo"):
        params = {k: v for k, v in config[group].items() if k != "name"}
        try:
            cls = registry.resolve(group, config[group]["name"]).Config
        except MissingExtraError as err:
            pytest.skip(str(err))
        built = build_config(cls, params, group)
        scalars = {k: v for k, v in params.items() if not isinstance(v, (list, dict))}  # lists become tuples
        assert {k: getattr(built, k) for k in scalars} == scalars, group
