"""Shared by the HIL tests: a small, untrained SAC checkpoint for arm_reach (the operator does the work)."""

import pytest

from embodied import registry
from embodied.runner import checkpoint


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """A small SAC policy checkpoint for arm_reach (untrained: the operator does the work)."""
    config = {"name": "hil_test", "device": "cpu", "threads": 1, "env": {"name": "arm_reach"},
              "policy": {"name": "sac_mlp", "actor_hidden": [32], "critic_hidden": [32]},
              "algo": {"name": "sac", "batch_size": 16}}  # fmt: skip
    env = registry.build("env", "arm_reach", {}, num_envs=1)
    policy = registry.build("policy", "sac_mlp", {"actor_hidden": (32,), "critic_hidden": (32,)},
                            observation_spec=env.observation_spec, action_spec=env.action_spec)  # fmt: skip
    path = tmp_path_factory.mktemp("run") / "ckpt"
    checkpoint.save_checkpoint(path, policy.state_dict(), {}, config)
    return path
