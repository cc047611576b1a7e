"""Forward kinematics of a yaw + planar-pitch arm (SO-100/101-like), for the safety layer's workspace check.

Same convention and dimensions as the simulated arm (`arm_reach`): all zeros is the arm
stretched along +x, each pitch angle relative to the previous link, z up from the table.
Dimensions from TheRobotStudio's SO-101 URDF (github.com/TheRobotStudio/SO-ARM100,
Simulation/SO101/so101_new_calib.urdf), rounded: shoulder axis 0.149 m up and 0.030 m
forward of the yaw axis; links 0.116, 0.135 and 0.159 m (wrist to gripper tip).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ArmGeometry:
    shoulder_height: float = 0.149  # m, table to shoulder-pitch axis (URDF shoulder_pan z + shoulder_lift z)
    shoulder_offset: float = 0.030  # m, yaw axis to shoulder-pitch axis, horizontally
    link_lengths: tuple[float, ...] = (0.116, 0.135, 0.159)  # m, upper arm, forearm, wrist to tip

    def forward_kinematics(self, qpos: np.ndarray) -> np.ndarray:
        """Gripper tip [3] in metres of joint angles [1 + len(link_lengths)] (yaw, pitch...), rad."""
        q = np.asarray(qpos, np.float64)
        phi = np.cumsum(q[1 : 1 + len(self.link_lengths)])
        radial = self.shoulder_offset + float(np.sum(np.asarray(self.link_lengths) * np.cos(phi)))
        height = self.shoulder_height + float(np.sum(np.asarray(self.link_lengths) * np.sin(phi)))
        return np.array([radial * np.cos(q[0]), radial * np.sin(q[0]), height])
