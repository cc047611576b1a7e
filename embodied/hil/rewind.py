"""Rewind-and-correct (RaC, Dai et al. 2025, "RaC: Robot Learning for Long-Horizon Tasks by Scaling
Recovery and Correction"): when the policy heads for a failure, the operator rewinds to a state
before it went wrong and demonstrates the correction from there.

    rewinder = SnapshotRewinder(horizon=200)     # simulation: restore an exact env snapshot
    rewinder = TrajectoryRewinder(horizon=200)   # robot: drive back along the recorded joint path
    rewinder.record(env)                         # after reset and after every step
    obs, segment = rewinder.rewind(env, steps=20)

A simulation is rewound exactly with `env.get_state()` / `env.set_state()` (the torch sims keep
physics, targets, counters and generator in the snapshot). A real robot cannot be teleported:
`TrajectoryRewinder` sends the recorded positions back in reverse order through
`Robot.send_action`, so every command passes the safety layer (step and velocity limits,
workspace), waiting at each waypoint until the arm is within `tolerance` or `waypoint_timeout_s`
passed. The commands and observations of that drive are returned as the rewind segment, for the
session to record with its label. Snapshots never cross an episode boundary (`clear` on reset).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from embodied.envs import VecEnv


class SnapshotRewinder:
    def __init__(self, horizon: int = 200):
        if horizon < 1:
            raise ValueError(f"rewind horizon={horizon} must be >= 1")
        self.history: deque[dict[str, torch.Tensor]] = deque(maxlen=horizon + 1)

    def clear(self) -> None:
        self.history.clear()

    def record(self, env: VecEnv) -> None:
        self.history.append(env.get_state())

    def available(self) -> int:
        """Steps that can be rewound now."""
        return max(0, len(self.history) - 1)

    def rewind(self, env: VecEnv, steps: int) -> tuple[TensorDict, list[dict[str, Any]]]:
        """Restore the state `steps` steps ago (at most `available()`); no motion segment in a sim."""
        steps = min(steps, self.available())
        for _ in range(steps):
            self.history.pop()
        return env.set_state(self.history[-1]), []


class TrajectoryRewinder:
    def __init__(self, horizon: int = 200, key: str = "qpos", tolerance: float = 0.02, waypoint_timeout_s: float = 1.0):
        if horizon < 1 or tolerance <= 0 or waypoint_timeout_s <= 0:
            raise ValueError("rewind horizon must be >= 1, tolerance and waypoint_timeout_s > 0")
        self.key, self.tolerance, self.timeout = key, tolerance, waypoint_timeout_s
        self.history: deque[np.ndarray] = deque(maxlen=horizon + 1)

    def clear(self) -> None:
        self.history.clear()

    def record(self, env) -> None:
        self.history.append(np.asarray(env.robot_obs[self.key], np.float64).copy())

    def available(self) -> int:
        return max(0, len(self.history) - 1)

    def rewind(self, env, steps: int) -> tuple[TensorDict, list[dict[str, Any]]]:
        """Drive `env.robot` (a RobotEnv's) back through the last `steps` recorded positions."""
        robot, period = env.robot, env.period
        steps = min(steps, self.available())
        segment, tick = [], time.monotonic()
        for _ in range(steps):
            self.history.pop()
            target = self.history[-1]
            deadline = time.monotonic() + self.timeout
            while True:
                obs = robot.get_observation()
                if np.max(np.abs(np.asarray(obs[self.key]) - target)) <= self.tolerance or time.monotonic() > deadline:
                    break
                sent = robot.send_action(target, stamp=obs["timestamp"])
                segment.append({"target": target.astype(np.float32), "sent": None if sent is None else sent,
                                self.key: np.asarray(obs[self.key], np.float32)})  # fmt: skip
                tick = max(tick + period, time.monotonic() - period)  # fixed rate; no burst after an overrun
                time.sleep(max(0.0, tick - time.monotonic()))
                if robot.failsafe_reason is not None:
                    raise RuntimeError(f"rewind stopped: the robot entered its failsafe ({robot.failsafe_reason})")
        env.robot_obs = robot.get_observation()
        obs = env.adapter.observe(env.robot_obs)
        return TensorDict({k: v.unsqueeze(0) for k, v in obs.items()}, batch_size=[1]), segment
