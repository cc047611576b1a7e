"""Batched Panda kinematics in numpy, from the same link table as the MJCF.

    frames = joint_frames(qpos)             # qpos [N, 7] -> Frames (world frame)
    frames.tcp, frames.rot                  # [N, 3] tool centre point, [N, 3, 3] hand rotation
    jacobian(frames)                        # [N, 6, 7]: linear rows, then angular rows
    dq = dls_ik(frames, dpos, rot_target)   # joint step moving the tcp by dpos [N, 3]

Computing the tool pose from joint angles here keeps the end-effector control mode
and the observations batched: no per-env calls into MuJoCo. numpy rather than torch
because these are a few dozen tiny array operations per step, where numpy's
per-call cost is a fraction of torch's. The test suite checks both against
MuJoCo's `site_xpos` and `mj_jacSite`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sims.mujoco import scene

DLS_DAMPING = 0.02  # m: bounds joint steps near singularities (Buss 2004, "Introduction to IK with DLS", sec. 5)


def _quat_to_mat(q) -> np.ndarray:
    w, x, y, z = np.asarray(q, dtype=np.float64) / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


_LINK = np.zeros((7, 4, 4))  # each body's homogeneous transform in its parent: (L_i, P_i); the base's in the world
_LINK[:, :3, :3] = np.stack([_quat_to_mat(q) for _, _, q in scene.LINKS])
_LINK[:, :3, 3], _LINK[:, 3, 3] = np.array([p for _, p, _ in scene.LINKS], dtype=np.float64), 1.0
_LINK[0, :3, 3] += np.array(scene.BASE_POS, dtype=np.float64)
_HAND_ROT = _quat_to_mat(scene.HAND_QUAT)
_TCP_POS = np.array(scene.HAND_POS, dtype=np.float64) + np.array([0.0, 0.0, scene.TCP_OFFSET])


class Frames(NamedTuple):
    axes: np.ndarray  # [N, 7, 3] joint axes (world)
    origins: np.ndarray  # [N, 7, 3] joint origins (world)
    tcp: np.ndarray  # [N, 3] tool centre point
    rot: np.ndarray  # [N, 3, 3] hand rotation (columns: hand axes in world)


def joint_frames(qpos: np.ndarray) -> Frames:
    """Forward kinematics of qpos [N, 7] (rad) along the MJCF's body chain.

    Body i sits at P_i, turned by L_i, in its parent, and its joint turns it about its own z
    axis: its frame is parent @ (L_i Rz(q_i), P_i). The seven local transforms are built in one
    go as 4x4 homogeneous matrices, leaving one batched product per joint, written in place.
    """
    n = qpos.shape[0]
    cos, sin = np.cos(qpos)[:, :, None], np.sin(qpos)[:, :, None]  # [N, 7, 1]
    local = np.empty((n, 7, 4, 4))
    x, y = _LINK[:, :, 0], _LINK[:, :, 1]  # [7, 4]: the x and y columns of each (L_i, P_i)
    local[..., 0], local[..., 1], local[..., 2:] = cos * x + sin * y, cos * y - sin * x, _LINK[:, :, 2:]
    world = np.empty((n, 7, 4, 4))
    world[:, 0] = local[:, 0]  # the base's parent is the world
    for i in range(1, 7):
        np.matmul(world[:, i - 1], local[:, i], out=world[:, i])
    hand = world[:, 6, :3]  # [N, 3, 4]
    # Rz(q_i) keeps the z axis: joint i turns about its body's z, through its body's origin
    return Frames(world[:, :, :3, 2], world[:, :, :3, 3], hand[:, :, :3] @ _TCP_POS + hand[:, :, 3],
                  hand[:, :, :3] @ _HAND_ROT)  # fmt: skip


def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a x b over the last axis (np.cross's axis shuffling costs more than the arithmetic here)."""
    a0, a1, a2, b0, b1, b2 = a[..., 0], a[..., 1], a[..., 2], b[..., 0], b[..., 1], b[..., 2]
    return np.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], -1)


def jacobian(frames: Frames) -> np.ndarray:
    """Geometric Jacobian [N, 6, 7] of the tcp: revolute joint i contributes z_i x (p - o_i) and z_i."""
    linear = _cross(frames.axes, frames.tcp[:, None, :] - frames.origins)  # [N, 7, 3]
    return np.concatenate([linear, frames.axes], axis=-1).transpose(0, 2, 1)


def rotation_error(rot: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Small-angle rotation vector [N, 3] taking rot [N, 3, 3] toward target [3, 3].

    0.5 * sum_k r_k x t_k over the frame axes (Siciliano et al., "Robotics", eq. 3.85).
    """
    return 0.5 * _cross(rot.transpose(0, 2, 1), target.T[None]).sum(-2)


def dls_ik(frames: Frames, dpos: np.ndarray, rot_target: np.ndarray, rot_gain: float = 0.5) -> np.ndarray:
    """Joint step [N, 7] moving the tcp by dpos [N, 3] while turning toward rot_target [3, 3].

    Damped least squares, dq = J^T (J J^T + lambda^2 I)^-1 e (Wampler 1986; Buss 2004).
    """
    jac = jacobian(frames)
    error = np.concatenate([dpos, rot_gain * rotation_error(frames.rot, rot_target)], -1)
    jac_t = jac.transpose(0, 2, 1)
    solve = np.linalg.solve(jac @ jac_t + DLS_DAMPING**2 * np.eye(6), error[:, :, None])
    return (jac_t @ solve)[:, :, 0]
