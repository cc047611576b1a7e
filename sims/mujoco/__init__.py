"""Batched MuJoCo Panda tabletop tasks (reach, push-cube, pick-cube) behind the VecEnv contract.

Offscreen rendering uses EGL (Mesa's software renderer on a CPU-only machine) unless
MUJOCO_GL says otherwise; MuJoCo reads the variable when it is first imported. Mesa's
llvmpipe rasterizes in the thread that draws (LP_NUM_THREADS=0) unless set otherwise:
the envs' own render threads (render.py) spread the frames over the cores, and beside
them llvmpipe's helper threads cost more than they gave. Two render threads on 2 cores
drew 48 / 128 / 256 px frames 2.34x / 2.13x / 1.59x as fast as one renderer with
Mesa's default helpers, and 1.24x / 1.37x / 1.32x with them (benchmarks/RESULTS.md,
"Rendering in threads").
"""

import os

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("LP_NUM_THREADS", "0")

from sims.mujoco.env import MujocoArmConfig, MujocoArmEnv  # noqa: E402
from sims.mujoco.tasks import MujocoPickEnv, MujocoPushEnv, MujocoReachEnv  # noqa: E402

__all__ = ["MujocoArmConfig", "MujocoArmEnv", "MujocoPickEnv", "MujocoPushEnv", "MujocoReachEnv"]
