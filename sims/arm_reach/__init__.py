"""Torch-batched arm reach with language instructions (an SO-101-like 4-joint arm)."""

from sims.arm_reach.env import ArmReachConfig, ArmReachEnv
from sims.arm_reach.scripted import scripted_action

__all__ = ["ArmReachConfig", "ArmReachEnv", "scripted_action"]
