"""Isaac Lab (`DirectRLEnv` / `ManagerBasedRLEnv`) behind the VecEnv contract."""

from sims.isaaclab.env import IsaacLabConfig, IsaacLabEnv

__all__ = ["IsaacLabConfig", "IsaacLabEnv"]
