"""The onboard controller of the simulated vehicles (their "firmware"): position / velocity / attitude
targets -> the four motor commands, as PX4's or the Crazyflie's cascaded controllers do.

Cascade: position and velocity errors -> desired acceleration (PD, tilt-limited) -> thrust
direction and collective thrust -> attitude error -> angular acceleration (PD on attitude and
body rate) -> per-rotor thrust fractions through the X mixer -> rotor-speed setpoints. The
Crazyflie's rotors lag the setpoint by 0.15 s (first order); the controller predicts the rotor
speeds from its own past setpoints (no RPM sensor on a Crazyflie) and over-drives the setpoint
so the rotors follow with `tau_effective` instead (lead compensation), saturating at 0 and max.
Vehicle constants: the nominal Crazyflie 2.1 of "Learning to Fly in Seconds" (Eschmann et al.
2024), the `crazy_flie_old_reduced_inertia` parameters the simulator uses. The output is the
quadrotor env's motor action (0 = hover speed, -1 = 0 RPM, +1 = max RPM, piecewise linear in
thrust with the knee at the hover thrust fraction).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ROTOR_SIGNS = ((1, -1), (-1, -1), (-1, 1), (1, 1))  # rotor (x, y) / rotor_xy: 0 front-right, 1 back-right, ...
YAW_SIGNS = (-1, 1, -1, 1)  # reaction-torque direction of each rotor about body z


@dataclass(frozen=True)
class Vehicle:
    """Nominal Crazyflie 2.1 (learning-to-fly crazy_flie.h)."""

    mass: float = 0.027  # kg
    rotor_xy: float = 0.028  # m
    inertia: tuple[float, float, float] = (3.85e-6, 3.85e-6, 5.9675e-6)  # kg m^2
    max_thrust: float = 3.16e-10 * 21702.0**2  # N per rotor at max RPM (thrust constant * max_rpm^2)
    torque_coefficient: float = 0.005964552  # m, yaw torque per N of thrust
    motor_tau: float = 0.15  # s
    gravity: float = 9.81  # m/s^2

    @property
    def hover_thrust_fraction(self) -> float:
        return self.mass * self.gravity / (4 * self.max_thrust)


@dataclass(frozen=True)
class Gains:
    """Hand-tuned on the sim (real_robot/sim tests: settles from 0.5 m offsets, lands at the set speed)."""

    pos: float = 4.0  # 1/s^2, position error -> acceleration
    vel: float = 3.5  # 1/s, velocity error -> acceleration
    att: float = 150.0  # 1/s^2, attitude error (rad) -> angular acceleration
    rate: float = 22.0  # 1/s, body-rate error -> angular acceleration
    yaw: float = 0.3  # yaw gain relative to roll/pitch (yaw authority is ~30x weaker)
    max_tilt_deg: float = 25.0  # limit of the commanded tilt
    tau_effective: float = 0.04  # s, rotor response after lead compensation


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    w, x, y, z = q
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])  # fmt: skip


class FlightController:
    """Stateful (rotor-speed prediction); call `motor_action` once per physics step of `dt`."""

    def __init__(self, dt: float, vehicle: Vehicle = Vehicle(), gains: Gains = Gains()):
        self.dt, self.v, self.g = dt, vehicle, gains
        self.motor_estimate = np.full(4, math.sqrt(vehicle.hover_thrust_fraction))
        self._lag_gain = 1 - math.exp(-dt / vehicle.motor_tau)

    def reset(self, motor_speed: np.ndarray | None = None) -> None:
        self.motor_estimate[:] = math.sqrt(self.v.hover_thrust_fraction) if motor_speed is None else motor_speed

    def motor_action(self, state: dict[str, np.ndarray], target_pos: np.ndarray | None = None,
                     target_vel: np.ndarray | None = None, yaw: float = 0.0) -> np.ndarray:  # fmt: skip
        """Motor action [4] toward a position (and/or velocity) target, world frame z up."""
        g, v = self.g, self.v
        p, vel = state["position"], state["velocity"]
        acc = g.vel * ((np.zeros(3) if target_vel is None else target_vel) - vel)
        if target_pos is not None:
            acc = acc + g.pos * (target_pos - p)
        horizontal = np.linalg.norm(acc[:2])
        max_h = v.gravity * math.tan(math.radians(g.max_tilt_deg))
        if horizontal > max_h:
            acc[:2] *= max_h / horizontal
        acc[2] = np.clip(acc[2], -0.6 * v.gravity, 0.8 * v.gravity)
        return self.attitude_action(state, acc + np.array([0.0, 0.0, v.gravity]), yaw)

    def attitude_action(self, state: dict[str, np.ndarray], specific_force: np.ndarray, yaw: float) -> np.ndarray:
        """Motor action [4] that points the thrust along `specific_force` (m/s^2, world) at heading `yaw`."""
        g, v = self.g, self.v
        if not np.linalg.norm(specific_force) > 1e-6:  # no thrust asked (e.g. a zero-thrust setpoint): rotors off
            self.motor_estimate *= 1 - self._lag_gain
            return -np.ones(4)
        r = quat_to_matrix(state["quaternion"])
        z_body, z_des = r[:, 2], specific_force / np.linalg.norm(specific_force)
        collective = v.mass * max(float(specific_force @ z_body), 0.0) / (4 * v.max_thrust)
        error = r.T @ np.cross(z_body, z_des)  # rotation (body frame) taking z_body onto z_des
        yaw_error = math.remainder(yaw - math.atan2(r[1, 0], r[0, 0]), 2 * math.pi)
        alpha = g.att * np.array([error[0], error[1], g.yaw * yaw_error]) - g.rate * state["angular_velocity"]
        # X mixer: thrust-fraction offsets per unit angular acceleration about x, y, z
        arm = 4 * v.rotor_xy * v.max_thrust
        u = alpha * np.array([v.inertia[0] / arm, v.inertia[1] / arm, v.inertia[2] / (4 * v.torque_coefficient * v.max_thrust)])
        fractions = np.array([collective + u[0] * sy - u[1] * sx + u[2] * yw
                              for (sx, sy), yw in zip(ROTOR_SIGNS, YAW_SIGNS)])  # fmt: skip
        speed = np.sqrt(np.clip(fractions, 0.0, 1.0))
        setpoint = np.clip(self.motor_estimate + (speed - self.motor_estimate) * v.motor_tau / g.tau_effective, 0, 1)
        self.motor_estimate += (setpoint - self.motor_estimate) * self._lag_gain
        return thrust_to_action(setpoint**2, v.hover_thrust_fraction)


def thrust_to_action(fraction: np.ndarray, hover: float) -> np.ndarray:
    """Inverse of the quadrotor env's action map: thrust fraction f -> action (f = t(1 + a), a <= 0;
    f = t + (1 - t) a, a > 0; t the hover thrust fraction)."""
    return np.where(fraction <= hover, fraction / hover - 1.0, (fraction - hover) / (1.0 - hover)).clip(-1, 1)
