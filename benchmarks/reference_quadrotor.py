"""Plain eager reference of the quadrotor hover task: the same model, RK4
integrator, action map, reward, termination and success rule as
`sims.quadrotor.QuadrotorHoverEnv`, written the straightforward way: batch-first
tensors [N, ...] in physical units (RPM, kg), quaternion helper functions, a
Python loop over the four rotors, fresh tensors everywhere, and an auto-reset
that indexes the finished envs. It is the baseline of bench_quadrotor_sim.py
and an independent check of the fused implementation (same trajectory from the
same state and actions); its resets draw different random numbers.
"""

from __future__ import annotations

import math

import torch
from tensordict import TensorDict

from sims.quadrotor.dynamics import CrazyflieParams
from sims.quadrotor.env import HoverConfig


def quat_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Hamilton product of [N, 4] quaternions (w, x, y, z)."""
    aw, ax, ay, az = a.unbind(1)
    bw, bx, by, bz = b.unbind(1)
    return torch.stack([
        aw * bw - ax * bx - ay * by - az * bz,
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
    ], dim=1)  # fmt: skip


def quat_to_matrix(q: torch.Tensor) -> torch.Tensor:
    """[N, 4] unit quaternions -> [N, 3, 3] rotation matrices (body -> world)."""
    w, x, y, z = q.unbind(1)
    return torch.stack([
        torch.stack([w * w + x * x - y * y - z * z, 2 * (x * y - w * z), 2 * (x * z + w * y)], 1),
        torch.stack([2 * (x * y + w * z), w * w - x * x + y * y - z * z, 2 * (y * z - w * x)], 1),
        torch.stack([2 * (x * z - w * y), 2 * (y * z + w * x), w * w - x * x - y * y + z * z], 1),
    ], dim=1)  # fmt: skip


class ReferenceHoverEnv:
    """Batch of hovering Crazyflies; step(action [N, 4]) -> obs, reward, terminated, truncated, info."""

    def __init__(self, config: HoverConfig, num_envs: int = 1, device: torch.device | str = "cpu"):
        self.config, self.num_envs, self.device = config, num_envs, torch.device(device)
        self.params = p = CrazyflieParams()
        self.max_episode_steps = round(config.episode_s / config.dt)
        self.hold_steps = round(config.success_hold_s / config.dt)
        self.rotor_pos = torch.tensor([[sx * p.rotor_xy, sy * p.rotor_xy, 0.0] for sx, sy in p.ROTOR_SIGNS], device=device)
        self.yaw_dir = torch.tensor(p.YAW_SIGNS, dtype=torch.float32, device=device)
        self.inertia = torch.tensor(p.inertia, device=device)
        self.gravity = torch.tensor([0.0, 0.0, -p.gravity], device=device)
        self.generator = torch.Generator(device=device).manual_seed(0)
        n = num_envs
        zeros = lambda *shape: torch.zeros(*shape, device=device)  # noqa: E731
        self.pos, self.vel, self.omega, self.quat, self.rpm = zeros(n, 3), zeros(n, 3), zeros(n, 3), zeros(n, 4), zeros(n, 4)
        self.mass, self.kf, self.tau, self.dr_scale = zeros(n), zeros(n), zeros(n), zeros(n, 3)
        self.target, self.prev_action = zeros(n, 3), zeros(n, 4)
        self.step_count = torch.zeros(n, dtype=torch.long, device=device)
        self.hold = torch.zeros(n, dtype=torch.long, device=device)
        self.reset_envs(torch.arange(n, device=device))

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        """Take over a `QuadrotorHoverEnv.get_state()` snapshot (converted to physical units)."""
        p = self.params
        self.pos, self.vel, self.omega = state["position"].clone(), state["velocity"].clone(), state["angular_velocity"].clone()
        self.quat, self.rpm = state["quaternion"].clone(), state["motor_speed"] * p.max_rpm
        self.dr_scale = state["dr_scale"].clone()
        self.mass = p.mass * self.dr_scale[:, 0]
        self.kf = p.thrust_coefficient * self.dr_scale[:, 1]
        self.tau = p.motor_time_constant * self.dr_scale[:, 2]
        self.step_count, self.hold = state["step"].clone(), state["progress"].clone()
        self.target, self.prev_action = state["target"].clone(), state["prev_action"].clone()

    def reset_envs(self, ids: torch.Tensor) -> None:
        c, p, k = self.config, self.params, len(ids)

        def uniform(low, high, *shape):
            return low + (high - low) * torch.rand(k, *shape, generator=self.generator, device=self.device)

        self.pos[ids] = uniform(-c.init_pos, c.init_pos, 3)
        self.vel[ids] = uniform(-c.init_vel, c.init_vel, 3)
        self.omega[ids] = uniform(-c.init_ang_vel, c.init_ang_vel, 3)
        tilt = uniform(0, math.radians(c.init_max_tilt_deg))
        azimuth = uniform(0, 2 * math.pi)
        yaw = uniform(-math.radians(c.init_max_yaw_deg), math.radians(c.init_max_yaw_deg))
        zero = torch.zeros_like(tilt)
        q_yaw = torch.stack([torch.cos(yaw / 2), zero, zero, torch.sin(yaw / 2)], 1)
        axis_x, axis_y = torch.cos(azimuth), torch.sin(azimuth)
        q_tilt = torch.stack([torch.cos(tilt / 2), axis_x * torch.sin(tilt / 2), axis_y * torch.sin(tilt / 2), zero], 1)
        self.quat[ids] = quat_mul(q_tilt, q_yaw)
        self.rpm[ids] = p.hover_fraction * p.max_rpm
        ranges = [c.dr_mass, c.dr_thrust, c.dr_motor_tau]
        self.dr_scale[ids] = torch.stack([uniform(1 - r, 1 + r) for r in ranges], 1)
        self.mass[ids] = p.mass * self.dr_scale[ids, 0]
        self.kf[ids] = p.thrust_coefficient * self.dr_scale[ids, 1]
        self.tau[ids] = p.motor_time_constant * self.dr_scale[ids, 2]
        self.target[ids] = 0.0
        self.prev_action[ids] = 0.0
        self.step_count[ids] = 0
        self.hold[ids] = 0

    def derivatives(self, pos, vel, quat, omega, rpm, rpm_cmd):
        """Time derivatives of (pos, vel, quat, omega, rpm)."""
        p, n = self.params, pos.shape[0]
        thrust = self.kf[:, None] * rpm**2  # [N, 4], N
        force_body = torch.zeros(n, 3, device=self.device)
        torque_body = torch.zeros(n, 3, device=self.device)
        for i in range(4):
            rotor_force = torch.zeros(n, 3, device=self.device)
            rotor_force[:, 2] = thrust[:, i]
            force_body = force_body + rotor_force
            torque_body = torque_body + torch.linalg.cross(self.rotor_pos[i].expand(n, 3), rotor_force, dim=1)
            torque_body[:, 2] = torque_body[:, 2] + self.yaw_dir[i] * p.torque_coefficient * thrust[:, i]
        rotation = quat_to_matrix(quat)
        acc = (rotation @ force_body.unsqueeze(2)).squeeze(2) / self.mass[:, None] + self.gravity
        gyroscopic = torch.linalg.cross(omega, self.inertia * omega, dim=1)
        omega_dot = (torque_body - gyroscopic) / self.inertia
        omega_quat = torch.cat([torch.zeros(n, 1, device=self.device), omega], dim=1)
        quat_dot = 0.5 * quat_mul(quat, omega_quat)
        rpm_dot = (rpm_cmd - rpm) / self.tau[:, None]
        return vel, acc, quat_dot, omega_dot, rpm_dot

    def physics_step(self, rpm_cmd: torch.Tensor) -> None:
        """Classic RK4 over the state (pos, vel, quat, omega, rpm) with the command held."""
        dt = self.config.dt
        state = (self.pos, self.vel, self.quat, self.omega, self.rpm)
        k1 = self.derivatives(*state, rpm_cmd)
        k2 = self.derivatives(*[s + dt / 2 * k for s, k in zip(state, k1)], rpm_cmd)
        k3 = self.derivatives(*[s + dt / 2 * k for s, k in zip(state, k2)], rpm_cmd)
        k4 = self.derivatives(*[s + dt * k for s, k in zip(state, k3)], rpm_cmd)
        new = [s + dt / 6 * (a + 2 * b + 2 * c + d) for s, a, b, c, d in zip(state, k1, k2, k3, k4)]
        self.pos, self.vel, quat, self.omega, self.rpm = new
        self.quat = quat / quat.norm(dim=1, keepdim=True)

    def step(self, action: torch.Tensor):
        c, p = self.config, self.params
        action = action.clamp(-1.0, 1.0)
        hover_thrust = p.hover_fraction**2  # of max thrust; actions are piecewise linear in thrust around it
        thrust = torch.where(action < 0, hover_thrust * (1 + action), hover_thrust + action * (1 - hover_thrust))
        rpm_cmd = p.max_rpm * torch.sqrt(thrust)
        self.physics_step(rpm_cmd)
        self.step_count = self.step_count + 1

        distance = (self.pos - self.target).norm(dim=1)
        speed = self.vel.norm(dim=1)
        rate = self.omega.norm(dim=1)
        tilt = 1 - quat_to_matrix(self.quat)[:, 2, 2]
        within = (self.pos.norm(dim=1) <= c.max_pos) & (speed <= c.max_speed) & (rate <= c.max_ang_vel)
        crash = ~within
        reward = (
            c.alive_bonus - c.w_pos * distance - c.w_vel * speed - c.w_ang_vel * rate - c.w_tilt * tilt
            - c.w_action * (action**2).mean(1) - c.w_smooth * ((action - self.prev_action) ** 2).mean(1)
            - c.crash_penalty * crash.float()
        )  # fmt: skip
        in_tolerance = (distance < c.success_radius) & (speed < c.success_speed)
        self.hold = torch.where(in_tolerance, self.hold + 1, torch.zeros_like(self.hold))
        success = (self.hold >= self.hold_steps) & ~crash
        self.prev_action = action
        truncated = (self.step_count >= self.max_episode_steps) & ~crash
        done = crash | truncated
        final_obs = self.observe()
        done_ids = done.nonzero().squeeze(1)
        if len(done_ids) > 0:
            self.reset_envs(done_ids)
        return self.observe(), reward, crash, truncated, {"final_obs": final_obs, "success": success}

    def observe(self) -> TensorDict:
        c, p = self.config, self.params
        rotation = quat_to_matrix(self.quat).reshape(-1, 9)
        state = torch.cat([self.pos - self.target, self.vel, self.omega, rotation, self.prev_action], dim=1)
        ranges = torch.tensor([c.dr_mass, c.dr_thrust, c.dr_motor_tau], device=self.device)
        dr = torch.where(ranges > 0, (self.dr_scale - 1) / ranges.clamp(min=1e-12), torch.zeros_like(self.dr_scale))
        privileged = torch.cat([
            2 * self.rpm / p.max_rpm - 1, dr,
            (self.step_count.float() / self.max_episode_steps)[:, None], (self.hold.float() / self.hold_steps)[:, None],
        ], dim=1)  # fmt: skip
        return TensorDict({"state": state, "privileged": privileged}, batch_size=[self.num_envs])
