"""Every experiment in configs/experiment composes and its sections validate, as `embodied train` checks them
first: a key misplaced in an experiment file fails here, not minutes into a run."""

import pytest

from embodied import registry
from embodied.cli import CONFIG_DIR, compose
from embodied.config import build_config
from embodied.registry import MissingExtraError
from embodied.runner.bc import ImitationConfig
from embodied.runner.pipeline import PipelineConfig
from embodied.runner.trainer import TrainConfig

EXPERIMENTS = sorted(p.stem for p in (CONFIG_DIR / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_config_is_valid(name):
    config = compose([f"experiment={name}"])
    build_config(TrainConfig, config["train"], "train")
    for section, cls in (("imitation", ImitationConfig), ("pipeline", PipelineConfig)):
        if section in config:
            build_config(cls, config[section], section)
    for group in ("env", "policy", "algo"):
        params = {k: v for k, v in config[group].items() if k != "name"}
        try:
            build_config(registry.resolve(group, config[group]["name"]).Config, params, group)
        except MissingExtraError as err:
            pytest.skip(str(err))
