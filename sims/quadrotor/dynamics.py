"""Batched Crazyflie 2.x rigid-body dynamics in torch: per-rotor thrust and
reaction torque (X configuration), first-order motor lag, gravity, RK4 at 100 Hz.

Every constant comes from ONE source, the simulator of "Learning to Fly in
Seconds" (Eschmann, Albani, Loianno, RA-L 2024), github.com/arplaboratory/
learning-to-fly: the dynamics `crazy_flie_old_reduced_inertia` (file
include/learning_to_fly_in_seconds/simulator/parameters/dynamics/crazy_flie.h),
which its training setup src/parameters_dynamics.h selects together with
`integration dt {0.01}` and RK4 (`utils::integrators::rk4` in
simulator/operations_generic.h). The same file is in rl-tools/rl-tools as
parameters/dynamics/crazy_flie.h.

The state is stored component-major, x [STATE_DIM, N] float32 (one row per
component, one column per env): every component is then a contiguous row, and
row-wise ops vectorise ~5x better on CPU than strided columns of an [N, 17]
tensor (measured at N=65536), which matters because `step` is the hot loop.

Frames: world z up, body x forward, y left, z up (thrust along body +z).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# Rows of the state x [STATE_DIM, N].
POS = slice(0, 3)  # position, world frame, m
VEL = slice(3, 6)  # linear velocity, world frame, m/s
ANG_VEL = slice(6, 9)  # angular velocity, body frame, rad/s
QUAT = slice(9, 13)  # orientation body->world, unit quaternion (w, x, y, z)
MOTOR = slice(13, 17)  # rotor speeds as a fraction of max_rpm, in [0, 1]
STATE_DIM = 17


@dataclass(frozen=True)
class CrazyflieParams:
    """Nominal Crazyflie 2.1; every value from learning-to-fly `crazy_flie_old_reduced_inertia`."""

    mass: float = 0.027  # kg; "mass vehicle 0.027"
    rotor_xy: float = 0.028  # m; rotors at (+-0.028, +-0.028, 0), i.e. arm length 0.028*sqrt(2) = 0.0396 m
    inertia: tuple[float, float, float] = (3.85e-6, 3.85e-6, 5.9675e-6)  # kg m^2, diagonal "J"
    thrust_coefficient: float = 3.16e-10  # N/RPM^2; "thrust constants {0, 0, 3.16e-10}": thrust = k*rpm^2
    torque_coefficient: float = 0.005964552  # m; "torque constant": yaw reaction torque = k * thrust
    max_rpm: float = 21702.0  # RPM; "action limit {0, 21702}"
    motor_time_constant: float = 0.15  # s; "T, RPM time constant 0.15"
    gravity: float = 9.81  # m/s^2; "gravity {0, 0, -9.81}"

    # Rotor i sits at (x, y) = rotor_xy * ROTOR_SIGNS[i] and spins so that its
    # reaction torque about body z is YAW_SIGNS[i] * torque_coefficient * thrust_i
    # (rotor positions and "rotor torque directions" of the same file):
    # 0 front-right, 1 back-right, 2 back-left, 3 front-left.
    ROTOR_SIGNS = ((1, -1), (-1, -1), (-1, 1), (1, 1))
    YAW_SIGNS = (-1, 1, -1, 1)

    @property
    def max_thrust(self) -> float:
        """Thrust of one rotor at max_rpm, N (0.149 N: thrust-to-weight 2.25)."""
        return self.thrust_coefficient * self.max_rpm**2

    @property
    def hover_fraction(self) -> float:
        """Rotor speed / max_rpm that holds the nominal vehicle (0.667, learning-to-fly's "hovering_throttle_relative")."""
        return math.sqrt(self.mass * self.gravity / (4 * self.max_thrust))


def row_buffer(rows: int, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Zeros [rows, n] with rows n + 16 floats apart. With N a power of two, rows 4 KiB-multiples apart
    alias the same cache sets, and ops reading many rows at once (transposes, matmul packing) ran
    ~30% slower at N=65536 (measured)."""
    return torch.zeros(rows, n + 16, device=device)[:, :n]


def wrench_matrix(p: CrazyflieParams) -> torch.Tensor:
    """[4, 4] map from u = thrust_i / max_thrust to (thrust acceleration of the nominal mass, J^-1 torque).

    Torque of rotor i is r_i x (0, 0, T_i) + yaw_i k_m T_i e_z = (y_i T_i, -x_i T_i, yaw_i k_m T_i).
    """
    rows = [[p.max_thrust / p.mass] * 4, [], [], []]
    for (sx, sy), yaw in zip(p.ROTOR_SIGNS, p.YAW_SIGNS):
        rows[1].append(sy * p.rotor_xy * p.max_thrust / p.inertia[0])
        rows[2].append(-sx * p.rotor_xy * p.max_thrust / p.inertia[1])
        rows[3].append(yaw * p.torque_coefficient * p.max_thrust / p.inertia[2])
    return torch.tensor(rows, dtype=torch.float64).float()


# The rest of the derivative is bilinear in q and z = (wx, wy, wz, qw, qx, qy, qz)
# (the rows ANG_VEL+QUAT of x): one outer product q (x) z and one matmul give it.
# Each entry: (output row, q component, z component, coefficient).
_Q = {"w": 0, "x": 1, "y": 2, "z": 3}
_Z = {"wx": 0, "wy": 1, "wz": 2, "qw": 3, "qx": 4, "qy": 5, "qz": 6}
_BILINEAR_TERMS = [
    # rows 0-2: R e_z, the body z axis (thrust direction) in the world frame
    (0, "x", "qz", 2.0), (0, "w", "qy", 2.0),  # 2 (xz + wy)
    (1, "y", "qz", 2.0), (1, "w", "qx", -2.0),  # 2 (yz - wx)
    (2, "w", "qw", 1.0), (2, "x", "qx", -1.0), (2, "y", "qy", -1.0), (2, "z", "qz", 1.0),  # w2 - x2 - y2 + z2
    # rows 3-6: q_dot = 0.5 q (x) (0, w_body), the quaternion kinematics
    (3, "x", "wx", -0.5), (3, "y", "wy", -0.5), (3, "z", "wz", -0.5),
    (4, "w", "wx", 0.5), (4, "y", "wz", 0.5), (4, "z", "wy", -0.5),
    (5, "w", "wy", 0.5), (5, "x", "wz", -0.5), (5, "z", "wx", 0.5),
    (6, "w", "wz", 0.5), (6, "x", "wy", 0.5), (6, "y", "wx", -0.5),
]  # fmt: skip


def bilinear_coefficients() -> torch.Tensor:
    """[7, 28]: (R e_z, q_dot) = C @ vec(q (x) z)."""
    c = torch.zeros(7, 4, 7)
    for row, qi, zj, value in _BILINEAR_TERMS:
        c[row, _Q[qi], _Z[zj]] = value
    return c.view(7, 28)


def rotation_coefficients() -> torch.Tensor:
    """[9, 16]: the row-major rotation matrix R(q) = C @ vec(q (x) q) for a unit quaternion."""
    w, x, y, z = range(4)
    terms = [
        [(w, w, 1), (x, x, 1), (y, y, -1), (z, z, -1)], [(x, y, 2), (w, z, -2)], [(x, z, 2), (w, y, 2)],
        [(x, y, 2), (w, z, 2)], [(w, w, 1), (x, x, -1), (y, y, 1), (z, z, -1)], [(y, z, 2), (w, x, -2)],
        [(x, z, 2), (w, y, -2)], [(y, z, 2), (w, x, 2)], [(w, w, 1), (x, x, -1), (y, y, -1), (z, z, 1)],
    ]  # fmt: skip
    c = torch.zeros(9, 4, 4)
    for row, entries in enumerate(terms):
        for i, j, value in entries:
            c[row, i, j] = value
    return c.view(9, 16)


class QuadrotorDynamics:
    """Integrates a state x [STATE_DIM, N] in place, one RK4 step of `dt` per `step`.

    RK4, as in learning-to-fly: it is exact for free fall, 4th order for the
    rotation and the motor lag (local error ~(dt/tau)^5 / 120), and costs 4
    derivative evaluations. Semi-implicit Euler would cost a quarter, but at
    dt=0.01 it is off by 5 cm after 1 s of free fall and reaches 64.5% instead
    of 63.2% of a motor step after one time constant.
    All scratch is preallocated and all views are created once: on CPU each
    torch call costs microseconds, so `step` issues ~60 of them and no more.
    """

    def __init__(self, x: torch.Tensor, params: CrazyflieParams = CrazyflieParams(), dt: float = 0.01):
        if x.dim() != 2 or x.shape[0] != STATE_DIM or x.dtype != torch.float32:
            raise ValueError(f"x must be float32 [{STATE_DIM}, N], got {x.dtype} {list(x.shape)}")
        self.x, self.params, self.dt = x, params, dt
        n, dev = x.shape[1], x.device
        new = lambda rows: row_buffer(rows, n, dev)  # noqa: E731
        self._xs, self._k, self._acc = new(STATE_DIM), new(STATE_DIM), new(STATE_DIM)
        self._u, self._wrench, self._feat = new(4), new(4), new(28)
        self._w_perm, self._gyro, self._a_thrust = new(6), new(3), new(1)
        self._c_tau, self._neg_inv_tau, self._q2, self._qn = new(4), new(1), new(4), new(1)
        self._feat_3d = self._feat.view(4, 7, n)
        self._wrench_matrix = wrench_matrix(params).to(dev)
        self._bilinear = bilinear_coefficients().to(dev)
        self._rotation = rotation_coefficients().to(dev)
        jx, jy, jz = params.inertia
        # -J^-1 (w x J w) = c * (wy wz, wz wx, wx wy) for a diagonal J
        self._gyro_coef = torch.tensor([(jy - jz) / jx, (jz - jx) / jy, (jx - jy) / jz], device=dev).view(3, 1)
        self._perm = torch.tensor([1, 2, 0, 2, 0, 1], device=dev)
        self._gravity = torch.tensor([0.0, 0.0, -params.gravity], device=dev).view(3, 1)
        self._gravity_ext = new(3)  # gravity plus an external acceleration (sims/quadrotor/disturbance.py)
        self._at_x, self._at_xs = self._stage_views(x), self._stage_views(self._xs)
        k = self._k
        # q_dot goes to k[QUAT]; R e_z is parked in k[ANG_VEL] until omega_dot overwrites it
        self._k_rez_qdot, self._k_rez = k[ANG_VEL.start : QUAT.stop], k[ANG_VEL]
        self._k_pos, self._k_vel, self._k_ang, self._k_motor = k[POS], k[VEL], k[ANG_VEL], k[MOTOR]
        self._q = x[QUAT]

    @staticmethod
    def _stage_views(s: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q = s[QUAT]
        return s[VEL], s[ANG_VEL], q.unsqueeze(1), s[ANG_VEL.start : QUAT.stop].unsqueeze(0), s[MOTOR]

    def _derivative(self, views: tuple[torch.Tensor, ...], kf_scale: torch.Tensor, inv_mass_scale: torch.Tensor,
                    gravity: torch.Tensor, inv_inertia_scale: torch.Tensor | None):
        """Writes dx/dt at the stage state into self._k."""
        v, w, q_col, z_row, m = views
        torch.mul(m, m, out=self._u).mul_(kf_scale)  # thrust_i / nominal max thrust
        torch.mm(self._wrench_matrix, self._u, out=self._wrench)  # (a_thrust nominal, J^-1 tau)
        if inv_inertia_scale is not None:  # J scaled uniformly: the gyroscopic term below is unchanged
            self._wrench[1:].mul_(inv_inertia_scale)
        torch.mul(q_col, z_row, out=self._feat_3d)  # q_i * z_j
        torch.mm(self._bilinear, self._feat, out=self._k_rez_qdot)
        torch.mul(self._wrench[:1], inv_mass_scale, out=self._a_thrust)
        torch.addcmul(gravity, self._k_rez, self._a_thrust, out=self._k_vel)  # v_dot = R e_z T/m + g
        # Euler's equations, omega_dot = J^-1 (tau - w x J w); explicit products beat linalg.cross 4x
        torch.index_select(w, 0, self._perm, out=self._w_perm)
        torch.mul(self._w_perm[:3], self._w_perm[3:], out=self._gyro)
        torch.addcmul(self._wrench[1:], self._gyro, self._gyro_coef, out=self._k_ang)
        self._k_pos.copy_(v)
        torch.addcmul(self._c_tau, m, self._neg_inv_tau, out=self._k_motor)  # (cmd - m) / tau

    def step(self, motor_cmd: torch.Tensor, kf_scale: torch.Tensor, inv_mass_scale: torch.Tensor, inv_tau: torch.Tensor,
             inv_inertia_scale: torch.Tensor | None = None, ext_acc: torch.Tensor | None = None):
        """Advance x by dt. motor_cmd [4, N] rotor-speed setpoints in [0, 1] (fraction of max_rpm), held
        over the step; kf_scale [1, N] or per rotor [4, N], inv_mass_scale [1, N] multipliers of the nominal
        thrust coefficient and 1/mass; inv_tau [1, N] 1 / motor time constant, 1/s. Optional (disturbances):
        inv_inertia_scale [1, N] 1 / a multiplier of the inertia, ext_acc [3, N] an external acceleration
        (world, m/s^2) held over the step. Without them the step is the nominal one, op for op."""
        h, x, xs, acc, k = self.dt, self.x, self._xs, self._acc, self._k
        torch.mul(motor_cmd, inv_tau, out=self._c_tau)
        torch.neg(inv_tau, out=self._neg_inv_tau)
        g = self._gravity if ext_acc is None else torch.add(self._gravity, ext_acc, out=self._gravity_ext)
        args = (kf_scale, inv_mass_scale, g, inv_inertia_scale)
        self._derivative(self._at_x, *args)  # k1
        torch.add(x, k, alpha=h / 6, out=acc)
        torch.add(x, k, alpha=h / 2, out=xs)
        self._derivative(self._at_xs, *args)  # k2
        acc.add_(k, alpha=h / 3)
        torch.add(x, k, alpha=h / 2, out=xs)
        self._derivative(self._at_xs, *args)  # k3
        acc.add_(k, alpha=h / 3)
        torch.add(x, k, alpha=h, out=xs)
        self._derivative(self._at_xs, *args)  # k4
        torch.add(acc, k, alpha=h / 6, out=x)
        # Back onto the unit sphere (as learning-to-fly's post_integration). Motor speeds need no
        # clamp: for a constant setpoint RK4 contracts them toward it by 1 - z + z^2/2 - z^3/6 + z^4/24
        # in (0, 1) for z = dt/tau < 1, so they stay between the old speed and the setpoint.
        torch.mul(self._q, self._q, out=self._q2)
        torch.sum(self._q2, 0, keepdim=True, out=self._qn)
        self._q.mul_(self._qn.rsqrt_())

    def rotation_matrix(self, q: torch.Tensor, out: torch.Tensor, scratch: torch.Tensor) -> torch.Tensor:
        """Row-major R(q) [9, k] (body -> world) of unit quaternions q [4, k] into out; scratch [16, k]."""
        torch.mul(q.unsqueeze(1), q.unsqueeze(0), out=scratch.view(4, 4, -1))
        return torch.mm(self._rotation, scratch, out=out)
