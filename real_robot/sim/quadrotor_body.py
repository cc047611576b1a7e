"""A quadrotor rigid body for simulated hardware: the registered quadrotor env's physics, one vehicle.

The env (default `quadrotor_hover`) is built by name through the registry with randomization,
crash limits and time limit switched off, and driven only through the VecEnv contract: `step`
with the env's motor action (4 rotor setpoints in [-1, 1], 0 = hover speed of the nominal
vehicle, piecewise linear in thrust, see sims/quadrotor/env.py) and `get_state` / `set_state`
(named blocks "position", "velocity", "quaternion", "angular_velocity", "motor_speed",
"specific_force": the accelerometer's body-z reading in g).
World frame: z up, body x forward, y left (FLU), as the sim. The sim's world is free space, so
a flat ground is added here: at `ground_z` the vehicle stops, levels and counts as landed.
A disturbance preset (push, gust, payload, motor, all, mix: sims/quadrotor/disturbance.py) is the env's own,
built in with `disturbance` and acting through the env's step. The env draws it per episode, and the body's
one episode never ends, so the preset stays inert (its "none" rows) until `disturb` starts it: then one
episode's draws for a flight of the given length, seeded, with the push and the gust onset counted from then.
"""

from __future__ import annotations

import numpy as np
import torch

from embodied import registry
from sims.quadrotor import disturbance as presets

# switch off what a training env randomizes or ends episodes on: the hardware is one nominal vehicle
_HARDWARE_PARAMS = {
    "init_pos": 0.0, "init_vel": 0.0, "init_ang_vel": 0.0, "init_max_tilt_deg": 0.0, "init_max_yaw_deg": 0.0,
    "dr_mass": 0.0, "dr_thrust": 0.0, "dr_motor_tau": 0.0,
    "max_pos": 1e4, "max_speed": 1e4, "max_ang_vel": 1e4, "episode_s": 1e6,
}  # fmt: skip


class QuadrotorBody:
    """One simulated quadrotor; `step(action)` advances `dt` seconds."""

    def __init__(self, env: str = "quadrotor_hover", start=(0.0, 0.0, 0.0), ground_z: float = -1.0,
                 disturbance: str = "none"):  # fmt: skip
        self.disturbance = disturbance
        self.env = registry.build("env", env, {**_HARDWARE_PARAMS, "disturbance": disturbance}, num_envs=1)
        self.dt = float(self.env.config.dt)
        self.ground_z = ground_z
        self.env.reset(seed=0)
        if disturbance != "none":
            self._set_disturbance(presets.episode_rows("none", 0, 1))  # inert until `disturb`
        self.crashed = False
        self.landed = False
        self.place(start)

    def place(self, position, velocity=(0.0, 0.0, 0.0)) -> None:
        """Put the vehicle at rest (level, rotors at hover speed) at `position`."""
        s = self.env.get_state()
        s["position"][0] = torch.tensor(position, dtype=torch.float32)
        s["velocity"][0] = torch.tensor(velocity, dtype=torch.float32)
        s["angular_velocity"][0] = 0.0
        s["quaternion"][0] = torch.tensor([1.0, 0.0, 0.0, 0.0])
        self.env.set_state(s)
        self.landed = position[2] <= self.ground_z

    def disturb(self, seed: int, steps: int) -> torch.Tensor:
        """Start the preset now, drawn for a flight of `steps` physics steps; returns its rows (disturbance.py)."""
        rows = presets.episode_rows(self.disturbance, seed, steps)
        if self.disturbance != "none":  # "none": the env has no disturbance rows (the nominal env, bit for bit)
            self._set_disturbance(rows)
        return rows

    def _set_disturbance(self, rows: torch.Tensor) -> None:
        s = self.env.get_state()
        s["disturbance"][0] = rows
        s["step"][0] = 0  # the env's clock of the push and the gust onset
        self.env.set_state(s)

    def state(self) -> dict[str, np.ndarray]:
        s = self.env.get_state()
        return {k: s[k][0].numpy().astype(np.float64) for k in
                ("position", "velocity", "quaternion", "angular_velocity", "motor_speed", "specific_force")}  # fmt: skip

    def step(self, action: np.ndarray) -> None:
        _, _, terminated, _, _ = self.env.step(torch.as_tensor(action, dtype=torch.float32).view(1, 4))
        if bool(terminated[0]):  # only a NaN state ends an episode with the limits above
            self.crashed = True
        s = self.env.get_state()
        z = float(s["position"][0, 2])
        self.landed = z <= self.ground_z
        if self.landed:  # ground contact: stop, level, keep the rotor speeds
            s["position"][0, 2] = self.ground_z
            s["velocity"][0] = 0.0
            s["angular_velocity"][0] = 0.0
            s["quaternion"][0] = torch.tensor([1.0, 0.0, 0.0, 0.0])
            self.env.set_state(s)


def describe(rows: torch.Tensor, dt: float) -> str:
    """The drawn disturbance rows [ROWS] in words, for the vehicle's log."""
    d = presets  # the row layout
    fmt = lambda v: "(" + ", ".join(f"{float(x):.2f}" for x in v) + ")"  # noqa: E731
    parts = []
    if rows[d.PUSH_STEP] >= 0:
        parts.append(f"push at {float(rows[d.PUSH_STEP]) * dt:.2f} s: dv {fmt(rows[d.PUSH_DV])} m/s, "
                     f"dw {fmt(rows[d.PUSH_DW])} rad/s")  # fmt: skip
    if rows[d.DRAG] > 0:
        parts.append(f"gust from {float(rows[d.GUST_STEP]) * dt:.2f} s: wind {fmt(rows[d.WIND])} m/s")
    if rows[d.MASS] != 1:
        parts.append(f"payload: mass x{float(rows[d.MASS]):.3f}, inertia x{float(rows[d.INERTIA]):.3f}")
    if rows[d.TAU] != 1:
        parts.append(f"motor: thrust x{fmt(rows[d.ROTOR_KF])}, time constant x{float(rows[d.TAU]):.3f}")
    return "; ".join(parts) or "nothing (none, or mix drew none)"
