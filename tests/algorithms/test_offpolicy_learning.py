"""Off-policy learning on arm reach within stated budgets (slow: minutes on 2 CPU cores).

Measured on a heavily shared 2-core machine (seed 0): BC on 200 noisy expert episodes reached 48%
eval success after 2,000 updates; SAC from scratch (128x128, 16 envs, 0.5 updates per env step)
moved the eval return from -34.8 (untrained) to -9.7 after 40,000 env steps.
"""

from __future__ import annotations

import pytest

from embodied.cli import compose
from embodied.runner.logger import read_metrics
from embodied.runner.pipeline import Pipeline

SMALL_NETS = ["policy.actor_hidden=[128,128]", "policy.critic_hidden=[128,128]", "train.progress=false",
              "train.eval_episodes=100"]


@pytest.mark.slow
def test_bc_on_noisy_expert_demos_reaches_40_percent(tmp_path):
    """Budget: 200 demos, 2,000 BC updates (about a minute)."""
    overrides = ["experiment=arm_reach_o2o", *SMALL_NETS, "pipeline.offline.updates=0", "train.total_env_steps=16",
                 "pipeline.online.warmup_steps=16"]
    Pipeline(compose(overrides), tmp_path).learn()
    bc = read_metrics(tmp_path / "bc")
    assert bc[-1]["eval/success"] >= 0.40, bc[-1]


@pytest.mark.slow
def test_offline_to_online_reaches_80_percent_within_16k_online_steps(tmp_path):
    """Budget: the arm_reach_o2o defaults (200 demos, BC, 2,000 IQL updates, RLPD + decaying BC) and 16,000
    online env steps (about 5 minutes on a free core). Seed 0 measured 80% at 10k and 92% at 12k
    (benchmarks/RESULTS.md); SAC from scratch is near 10% at 40k."""
    overrides = ["experiment=arm_reach_o2o", *SMALL_NETS, "train.total_env_steps=16000"]
    Pipeline(compose(overrides), tmp_path).learn()
    curve = read_metrics(tmp_path / "online")
    assert max(r["eval/success"] for r in curve if "eval/success" in r) >= 0.8, curve[-1]


@pytest.mark.slow
def test_sac_from_scratch_raises_the_return_on_arm_reach(tmp_path):
    """Budget: 40,000 env steps, 20,000 SAC updates (10-15 minutes on 2 cores)."""
    overrides = ["experiment=arm_reach_sac", *SMALL_NETS, "algo.utd_ratio=0.5", "train.total_env_steps=40000"]
    Pipeline(compose(overrides), tmp_path).learn()
    curve = read_metrics(tmp_path / "online")
    assert curve[0]["eval/return"] < -30 and curve[-1]["eval/return"] > -15, (curve[0], curve[-1])
