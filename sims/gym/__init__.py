"""Any registered gymnasium environment (or a user's "module:Id") behind the VecEnv contract."""

from sims.gym.env import GymConfig, GymEnv

__all__ = ["GymConfig", "GymEnv"]
