"""The Panda tabletop tasks: reach, push-cube, pick-cube.

Each task samples its target, names it in a language instruction and scores a
step with a dense shaped cost (negative, so finishing early pays) plus the
success bonus, or with the sparse reward alone (`sparse=True`: 0 per step, the
bonus on success). Success terminates the episode. Shaping follows ManiSkill3's
PushCube-v1 / PickCube-v1 dense rewards (reach the pushing / grasping pose, then
move the cube to the goal, a grasp term for picking), as distances in metres.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sims.mujoco import scene
from sims.mujoco.env import MujocoArmConfig, MujocoArmEnv


@dataclass(frozen=True)
class ReachConfig(MujocoArmConfig):
    """Touch a target ball in the air above the table with the tool centre point."""

    success_radius: float = 0.03  # m, tcp to target centre
    sparse: bool = False  # reward only success
    target_low: tuple[float, float, float] = (-0.15, -0.2, 0.05)  # m, target box (a reachable slab over the table)
    target_high: tuple[float, float, float] = (0.15, 0.2, 0.35)


class MujocoReachEnv(MujocoArmEnv):
    TASK = "reach"
    Config = ReachConfig
    goal_relative_to = "tcp"
    templates = (
        "move the gripper to the green ball",
        "reach the green target",
        "touch the green sphere with the gripper",
        "put the fingertips on the green ball",
    )

    def _sample_task(self, m, cube_xy):
        low, high = np.array(self.config.target_low), np.array(self.config.target_high)
        return low + (high - low) * self._uniform(m, 3, low=0.0, high=1.0)

    def _reward(self, q):
        distance = np.linalg.norm(q["tcp"] - q["target"], axis=-1)
        success = distance < self.config.success_radius
        return (np.zeros_like(distance) if self.config.sparse else -distance), success


@dataclass(frozen=True)
class PushConfig(MujocoArmConfig):
    """Push the cube along the table onto a target in front of it."""

    success_radius: float = 0.04  # m, cube centre to target in the table plane
    sparse: bool = False
    push_distance: tuple[float, float] = (0.1, 0.2)  # m, target ahead of the cube along +x (ManiSkill3 PushCube: 0.2)
    push_sideways: float = 0.05  # m, target offset along y uniform in +-this
    place_weight: float = 3.0  # cost per metre of cube-to-target distance, relative to the reaching term


class MujocoPushEnv(MujocoArmEnv):
    TASK = "push"
    Config = PushConfig
    templates = (
        "push the red cube to the green marker",
        "slide the red block onto the green target",
        "push the cube to the green ball",
    )

    def _sample_task(self, m, cube_xy):
        cfg = self.config
        ahead = self._uniform(m, low=cfg.push_distance[0], high=cfg.push_distance[1])
        side = self._uniform(m) * cfg.push_sideways
        return np.stack([cube_xy[:, 0] + ahead, cube_xy[:, 1] + side, np.full(m, scene.CUBE_HALF)], -1)

    def _reward(self, q):
        cube, target = q["cube"], q["target"]
        to_goal = target[:, :2] - cube[:, :2]
        place = np.linalg.norm(to_goal, axis=-1)
        success = place < self.config.success_radius
        if self.config.sparse:
            return np.zeros_like(place), success
        # the pushing pose: just behind the cube, on the far side from the target, at the cube's height
        direction = to_goal / np.maximum(place, 1e-6)[:, None]
        behind = np.concatenate([cube[:, :2] - (scene.CUBE_HALF + 0.015) * direction, cube[:, 2:]], -1)
        reach = np.linalg.norm(q["tcp"] - behind, axis=-1)
        return -reach - self.config.place_weight * place, success


@dataclass(frozen=True)
class PickConfig(MujocoArmConfig):
    """Grasp the cube and lift it to a target in the air."""

    max_episode_steps: int = 60
    success_radius: float = 0.04  # m, cube centre to target centre (the cube must be held there)
    sparse: bool = False
    target_height: tuple[float, float] = (0.06, 0.2)  # m, target centre above the table
    target_range: float = 0.1  # m, target x, y uniform in +-range (ManiSkill3 PickCube)
    grasp_weight: float = 0.5  # cost per step without a grasp
    place_weight: float = 2.0  # cost per metre of cube-to-target distance


class MujocoPickEnv(MujocoArmEnv):
    TASK = "pick"
    Config = PickConfig
    templates = (
        "pick up the red cube and lift it to the green ball",
        "lift the red block to the green target",
        "grasp the cube and raise it to the green marker",
    )

    def _sample_task(self, m, cube_xy):
        cfg = self.config
        xy = self._uniform(m, 2) * cfg.target_range
        z = self._uniform(m, low=cfg.target_height[0], high=cfg.target_height[1])
        return np.concatenate([xy, z[:, None]], -1)

    def _reward(self, q):
        cfg = self.config
        place = np.linalg.norm(q["cube"] - q["target"], axis=-1)
        success = (place < cfg.success_radius) & q["grasped"]
        if cfg.sparse:
            return np.zeros_like(place), success
        reach = np.linalg.norm(q["tcp"] - q["cube"], axis=-1)
        return -reach - cfg.grasp_weight * ~q["grasped"] - cfg.place_weight * place, success

