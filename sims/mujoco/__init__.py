"""Batched MuJoCo Panda tabletop tasks (reach, push-cube, pick-cube) behind the VecEnv contract.

Offscreen rendering uses EGL (Mesa's software renderer on a CPU-only machine) unless
MUJOCO_GL says otherwise; MuJoCo reads the variable when it is first imported.
"""

import os

os.environ.setdefault("MUJOCO_GL", "egl")

from sims.mujoco.env import MujocoArmConfig, MujocoArmEnv  # noqa: E402
from sims.mujoco.tasks import MujocoPickEnv, MujocoPushEnv, MujocoReachEnv  # noqa: E402

__all__ = ["MujocoArmConfig", "MujocoArmEnv", "MujocoPickEnv", "MujocoPushEnv", "MujocoReachEnv"]
