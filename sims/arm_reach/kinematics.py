"""Kinematics of a 4-joint arm shaped like the SO-101, batched in torch.

Joints: base yaw (about +z), then shoulder, elbow and wrist pitch, all three
about the same horizontal axis, so the arm above the base is a planar 3-link
chain swung around by the yaw. Angles follow our own convention, not the
URDF's: all zeros is the arm stretched horizontally along +x, positive pitch
lifts a link (elevation), and each pitch angle is relative to the previous
link. The world frame sits on the table under the yaw axis, z up.

Dimensions are read off TheRobotStudio's SO-101 URDF
(github.com/TheRobotStudio/SO-ARM100, Simulation/SO101/so101_new_calib.urdf),
rounded, with its few-millimetre sideways offsets dropped:
- shoulder-lift axis 0.149 m above the table (shoulder_pan z 0.0949 +
  shoulder_lift 0.0542) and 0.030 m in front of the yaw axis (shoulder_lift x);
- upper arm 0.116 m (elbow_flex origin: hypot(0.11257, 0.028));
- forearm 0.135 m (wrist_flex origin: hypot(0.1349, 0.0052));
- wrist pitch axis to the gripper's tip frame 0.159 m (wrist_roll origin 0.0611
  + gripperframe 0.0981).
Base-yaw and wrist limits are the URDF's (shoulder_pan +-1.92, wrist_flex
+-1.66 rad). The URDF's shoulder and elbow ranges (+-1.75, +-1.69 rad) sit about
a different zero pose; ours are illustrative: the upper arm stays between just
below horizontal and just past vertical (-0.20..1.90 rad) and the elbow bends
up to 149 deg down or 17 deg up (-2.60..0.30 rad). There are no collisions:
the arm may pass through the table and itself.
"""

from __future__ import annotations

import torch

JOINT_NAMES = ("base_yaw", "shoulder_pitch", "elbow_pitch", "wrist_pitch")
NUM_JOINTS = len(JOINT_NAMES)
SHOULDER_HEIGHT = 0.149  # m, table to shoulder-pitch axis
SHOULDER_OFFSET = 0.030  # m, yaw axis to shoulder-pitch axis, horizontally
LINK_LENGTHS = (0.116, 0.135, 0.159)  # m, upper arm, forearm, wrist to gripper tip
REACH = SHOULDER_OFFSET + sum(LINK_LENGTHS)  # m, horizontal reach with the arm stretched
JOINT_LOWER = (-1.92, -0.20, -2.60, -1.66)  # rad
JOINT_UPPER = (1.92, 1.90, 0.30, 1.66)  # rad
HOME_QPOS = (0.0, 1.3, -1.8, 0.0)  # rad, a folded pose with the gripper ~12 cm above the table


def chain_points(qpos: torch.Tensor) -> torch.Tensor:
    """Points along the chain, qpos [..., 4] -> [..., 4, 3] in metres.

    Rows: shoulder-pitch axis, elbow, wrist, gripper tip (the end effector).
    Closed form: in the vertical plane at angle `yaw`, link i points at the
    cumulative elevation phi_i = q_1 + ... + q_i.
    """
    yaw, pitch = qpos[..., 0], qpos[..., 1:]
    phi = torch.cumsum(pitch, dim=-1)  # [..., 3] absolute link elevations
    lengths = qpos.new_tensor(LINK_LENGTHS)
    # radial distance from the yaw axis and height of each joint along the chain
    radial = SHOULDER_OFFSET + torch.cumsum(lengths * torch.cos(phi), dim=-1)
    height = SHOULDER_HEIGHT + torch.cumsum(lengths * torch.sin(phi), dim=-1)
    radial = torch.cat([torch.full_like(radial[..., :1], SHOULDER_OFFSET), radial], dim=-1)
    height = torch.cat([torch.full_like(height[..., :1], SHOULDER_HEIGHT), height], dim=-1)
    cos_yaw, sin_yaw = torch.cos(yaw)[..., None], torch.sin(yaw)[..., None]
    return torch.stack([radial * cos_yaw, radial * sin_yaw, height], dim=-1)


def forward_kinematics(qpos: torch.Tensor) -> torch.Tensor:
    """End-effector (gripper tip) position, qpos [..., 4] -> [..., 3] in metres."""
    return chain_points(qpos)[..., -1, :]


def jacobian(qpos: torch.Tensor) -> torch.Tensor:
    """d(end effector)/d(qpos), qpos [..., 4] -> [..., 3, 4], closed form.

    Yaw moves the tip on a circle of the tip's radial distance; pitch joint k
    moves every link from k on, all within the vertical plane of the yaw.
    """
    yaw, pitch = qpos[..., 0], qpos[..., 1:]
    phi = torch.cumsum(pitch, dim=-1)
    lengths = qpos.new_tensor(LINK_LENGTHS)
    radial_terms, height_terms = lengths * torch.cos(phi), lengths * torch.sin(phi)
    # suffix sums: joint k moves links k..3
    d_radial = -torch.flip(torch.cumsum(torch.flip(height_terms, [-1]), -1), [-1])  # [..., 3]
    d_height = torch.flip(torch.cumsum(torch.flip(radial_terms, [-1]), -1), [-1])
    radial = SHOULDER_OFFSET + radial_terms.sum(-1)
    cos_yaw, sin_yaw = torch.cos(yaw), torch.sin(yaw)
    d_yaw = torch.stack([-radial * sin_yaw, radial * cos_yaw, torch.zeros_like(radial)], dim=-1)
    d_pitch = torch.stack([d_radial * cos_yaw[..., None], d_radial * sin_yaw[..., None], d_height], dim=-2)
    return torch.cat([d_yaw[..., None], d_pitch], dim=-1)
