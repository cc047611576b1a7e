"""Shared fixtures: untrained policy checkpoints (any policy will do for plumbing tests)."""

from pathlib import Path

import pytest
import torch

from embodied.cli import compose
from embodied.runner import checkpoint
from embodied.build import make_env, make_policy


def save_untrained(run_dir: Path, experiment: str, seed: int = 0, zero_action: bool = False) -> Path:
    """A checkpoint of a freshly initialized policy for `experiment`, as `embodied train` would lay it out.
    zero_action: the actor's last layer zeroed, so it always outputs 0 (a quadrotor's exact hover speed:
    an untrained policy's small random outputs would tip an open-loop quadrotor over within a second)."""
    config = compose([f"experiment={experiment}", f"seed={seed}", "device=cpu"])
    torch.manual_seed(seed)
    env = make_env(config, 1, torch.device("cpu"))
    policy = make_policy(config, env)
    if zero_action:
        torch.nn.init.zeros_(policy.actor[-1].weight)
        torch.nn.init.zeros_(policy.actor[-1].bias)
    checkpoint.save_checkpoint(run_dir / "checkpoints" / "final", policy.state_dict(), {}, config)
    return run_dir


@pytest.fixture(scope="session")
def hover_run(tmp_path_factory) -> Path:
    return save_untrained(tmp_path_factory.mktemp("hover"), "quadrotor_hover", zero_action=True)


@pytest.fixture(scope="session")
def arm_run(tmp_path_factory) -> Path:
    return save_untrained(tmp_path_factory.mktemp("arm"), "arm_reach")
