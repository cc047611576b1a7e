"""A simulated arm: position-controlled servos on the torch arm sim, advancing in real time.

The physics is a registered env (default `arm_reach`, num_envs=1) built by name through the
registry and driven only through the VecEnv contract (`step`, `get_state`, `set_state`), so
`real_robot` does not import `sims`. `SimulatedArmHardware` plays the servo bus: it holds the
latest goal position and, whenever it is read or written, first advances the sim by however
many physics steps of wall-clock time have passed, each a proportional velocity command toward
the goal (a position servo, saturating at the servo speed). It records every goal it receives and where
the arm was when it arrived, so tests can check that nothing outside the limits ever reached it.

Observations use the env's snapshot names: `qpos`, `qvel` [4] (rad, rad/s), and, because this
is a simulation, the scene the task needs (`ball_pos` [3, 3] m, `goal`, `template`): a real arm
would get these from perception.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from embodied import registry
from embodied.config import check
from embodied.specs import Spec
from real_robot.arms.geometry import ArmGeometry
from real_robot.robot import Robot, RobotConfig
from real_robot.safety import SafetyConfig, fill_defaults

# SO-101-like joint limits of the arm sim (sims/arm_reach/kinematics.py: base yaw and wrist from the
# SO-101 URDF, shoulder and elbow ranges illustrative), rad
JOINT_LOWER = (-1.92, -0.20, -2.60, -1.66)
JOINT_UPPER = (1.92, 1.90, 0.30, 1.66)


def _arm_safety() -> SafetyConfig:
    return SafetyConfig(
        low=JOINT_LOWER, high=JOINT_UPPER,
        max_step=0.2,  # rad from the present position per command (LeRobot's max_relative_target is a similar cap)
        max_velocity=2.0,  # rad/s of command change: above the 1.5 rad/s servo speed, so only errors trip it
        max_command_age=0.1,
        workspace_low=(-0.5, -0.5, 0.0), workspace_high=(0.5, 0.5, 0.6),  # m: never below the table top
    )  # fmt: skip


@dataclass(frozen=True)
class SimulatedArmConfig(RobotConfig):
    """A simulated 4-joint arm (position servos on the `env` sim)."""

    control_hz: float = 50.0  # LeRobot records and controls SO-100/101 at 30 fps by default; 50 Hz here
    safety: SafetyConfig = field(default_factory=_arm_safety)
    env: str = "arm_reach"  # registered env whose physics plays the hardware
    physics_hz: float = 100.0  # servo update rate (the sim's control_dt = 1 / physics_hz)
    servo_speed: float = 1.5  # rad/s at saturation (arm_reach's max_joint_velocity; STS3215 no-load 4.8 rad/s)
    servo_gain: float = 20.0  # 1/s: commanded speed = gain * (goal - position), saturating at servo_speed
    seed: int = 0  # scene of the simulated world (ball placement)

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "safety", fill_defaults(self.safety, _arm_safety()))
        check(self.physics_hz >= self.control_hz, "physics_hz must be >= control_hz")
        check(self.servo_speed > 0 and self.servo_gain > 0, "servo_speed and servo_gain must be > 0")


class SimulatedArmHardware:
    """The servo bus of the simulated arm; thread-safe; advances with wall-clock time."""

    max_catch_up = 200  # physics steps per access at most (a paused process does not replay minutes)

    def __init__(self, config: SimulatedArmConfig):
        self.config, self.dt = config, 1.0 / config.physics_hz
        self.env = registry.build("env", config.env, {"control_dt": self.dt, "max_joint_velocity": config.servo_speed,
                                                       "max_episode_steps": 10**9, "hold_steps": 10**9 - 1})  # fmt: skip
        self.env.reset(seed=config.seed)
        self.goal = self.qpos().copy()
        self.received: list[tuple[float, np.ndarray]] = []  # every goal written: (time, goal)
        # for each goal: (qpos when it arrived, rad the servo may have moved since the bus was last accessed)
        self.arrivals: list[tuple[np.ndarray, float]] = []
        self._lock = threading.Lock()
        self._t = time.monotonic()

    def qpos(self) -> np.ndarray:
        return self.env.get_state()["qpos"][0].numpy().astype(np.float64)

    def advance(self) -> int:
        """Catch the sim up to now; returns the physics steps taken."""
        with self._lock:
            now = time.monotonic()
            steps = int((now - self._t) / self.dt)
            self._t += steps * self.dt
            for _ in range(min(steps, self.max_catch_up)):
                error = torch.from_numpy(self.goal - self.qpos()).float()
                action = (self.config.servo_gain * error / self.config.servo_speed).clamp(-1, 1)
                self.env.step(action.unsqueeze(0))
            return steps

    def write_goal(self, goal: np.ndarray | None) -> None:
        """Take a new goal (None: hold the present position). The receive time is taken before the sim
        catches up to it: catching up is the simulator's bookkeeping, not bus latency."""
        received = time.monotonic()
        moved = min(self.advance(), self.max_catch_up) * self.dt * self.config.servo_speed
        with self._lock:
            present = self.qpos()
            goal = present if goal is None else goal
            self.received.append((received, goal.copy()))
            self.arrivals.append((present, moved))
            self.goal = goal.astype(np.float64)

    def read(self) -> dict[str, Any]:
        self.advance()
        with self._lock:
            s = self.env.get_state()
        return {"qpos": s["qpos"][0].numpy(), "qvel": s["qvel"][0].numpy(), "ball_pos": s["ball_pos"][0].numpy(),
                "goal": s["goal"][0].numpy(), "template": s["template"][0].numpy()}  # fmt: skip


class SimulatedArm(Robot):
    """`Robot` over `SimulatedArmHardware`: commands are goal joint positions [4], rad."""

    Config = SimulatedArmConfig
    simulated = True
    action_key = "qpos"  # deploy: the training env's joint positions after a step are the goal to send
    # meanings as the arm_reach env's snapshot declares them (its physics plays this hardware): deploy checks them
    qpos_meaning = "rad, arm_reach joints (0 = stretched along +x)"
    observation_spec = {"qpos": Spec((4,), meaning=qpos_meaning), "qvel": Spec((4,), meaning="rad/s, arm_reach joints"),
                        "ball_pos": Spec((3, 3), meaning="m, arm base z-up; red, green, blue"),
                        "goal": Spec((), torch.int64, meaning="index of the goal ball: red, green, blue"),
                        "template": Spec((), torch.int64, meaning="index of the instruction template")}  # fmt: skip
    action_spec = Spec((4,), torch.float32, min(JOINT_LOWER), max(JOINT_UPPER), meaning=qpos_meaning)

    def __init__(self, config: SimulatedArmConfig = SimulatedArmConfig()):
        self.geometry = ArmGeometry()
        super().__init__(config, forward_kinematics=self.geometry.forward_kinematics)
        self.hardware: SimulatedArmHardware | None = None

    def _connect(self) -> None:
        self.hardware = SimulatedArmHardware(self.config)

    def _read(self) -> dict[str, Any]:
        return self.hardware.read()

    def _measure(self) -> np.ndarray:
        self.hardware.advance()  # the servos' position now, not at the last observation
        return self.hardware.qpos()

    def _write(self, command: np.ndarray) -> None:
        self.hardware.write_goal(command)

    def _failsafe(self, reason: str) -> None:
        self.hardware.write_goal(None)  # hold where the arm is now

    def _disconnect(self) -> None:
        self.hardware = None


def servo_settle_time(config: SimulatedArmConfig, distance: float) -> float:
    """Seconds the simulated servo takes to cover `distance` rad at saturation (for tests and docs)."""
    return distance / config.servo_speed + math.log(100) / config.servo_gain
