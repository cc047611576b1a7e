"""ManiSkill3 tasks (GPU-parallel PhysX on CUDA, one scene per env on the CPU) behind the VecEnv contract."""

from sims.maniskill.env import INSTRUCTIONS, ManiSkillConfig, ManiSkillEnv

__all__ = ["INSTRUCTIONS", "ManiSkillConfig", "ManiSkillEnv"]
