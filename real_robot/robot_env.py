"""A robot as a `VecEnv` with num_envs=1, stepped at a fixed control rate.

    env = RobotEnv(robot, RobotEnvConfig(control_hz=100, max_episode_steps=1000))
    obs, _ = env.reset()                                   # connects the robot
    obs, reward, terminated, truncated, info = env.step(action)   # action [1, A]
    env.timing()    # achieved rate, latency and jitter (p50 / p99)

`step` writes the command (through the robot's safety layer), waits for the next tick of a
fixed-rate clock (deadlines k * period from the start, so lateness does not accumulate) and
reads the next observation. An `Adapter` maps robot observations to the policy's observation
and the policy's action to a robot command; the default concatenates the robot's arrays into
`state` and passes actions through. A real robot pays no reward: reward is 0 unless the adapter
computes one. An episode terminates when the robot enters a failsafe; the next episode starts
where the robot is (a real robot cannot be teleported).
Timing: latency = command written - observation read (policy + transport); jitter = |tick
interval - period|.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from embodied import keys
from embodied.config import check
from embodied.envs import StepResult, VecEnv
from embodied.specs import Spec
from real_robot.robot import Robot


@dataclass(frozen=True)
class RobotEnvConfig:
    control_hz: float = 50.0  # ticks per second of the control loop
    max_episode_steps: int = 1000  # truncate after this many ticks
    spin_s: float = 0.0005  # busy-wait the last this-many seconds before a tick (sleep overshoots by ~0.1 ms)

    def __post_init__(self):
        check(0 < self.control_hz <= 2000, f"control_hz={self.control_hz} must be in (0, 2000]")
        check(self.max_episode_steps >= 1, f"max_episode_steps={self.max_episode_steps} must be >= 1")
        check(self.spin_s >= 0, f"spin_s={self.spin_s} must be >= 0")


class Adapter:
    """Default mapping: `state` = the robot's float observations concatenated; actions pass through."""

    def __init__(self, robot: Robot):
        self.keys = [k for k, s in robot.observation_spec.items() if s.dtype == torch.float32 and len(s.shape) == 1]
        dim = sum(robot.observation_spec[k].shape[0] for k in self.keys)
        self.observation_spec = {keys.STATE: Spec((dim,))}
        self.action_spec = robot.action_spec

    def reset(self, robot_obs: dict[str, Any], seed: int | None = None) -> None:
        """A new episode; `seed` (the env's reset(seed)) seeds whatever the adapter draws itself."""

    def observe(self, robot_obs: dict[str, Any]) -> dict[str, torch.Tensor]:
        parts = [np.asarray(robot_obs[k], np.float32).reshape(-1) for k in self.keys]
        return {keys.STATE: torch.from_numpy(np.concatenate(parts))}

    def action(self, action: torch.Tensor) -> np.ndarray:
        return action.detach().cpu().numpy().reshape(self.action_spec.shape)

    def sent(self, command: np.ndarray | None) -> None:
        pass

    def reward(self, robot_obs: dict[str, Any]) -> tuple[float, bool]:
        """(reward, success) of the latest observation; a robot has neither by default."""
        return 0.0, False


class RobotEnv(VecEnv):
    """`robot` as a VecEnv with num_envs=1 at `config.control_hz`."""

    def __init__(self, robot: Robot, config: RobotEnvConfig = RobotEnvConfig(), adapter: Adapter | None = None):
        self.robot, self.config = robot, config
        self.adapter = adapter or Adapter(robot)
        self.num_envs, self.device = 1, torch.device("cpu")
        self.observation_spec = self.adapter.observation_spec
        self.action_spec = self.adapter.action_spec
        self.max_episode_steps = config.max_episode_steps
        self.period = 1.0 / config.control_hz
        self.robot_obs: dict[str, Any] = {}
        self.last_sent: np.ndarray | None = None
        self._steps, self._tick, self._t0 = 0, 0, 0.0
        self._ticks: list[float] = []  # when each observation was read
        self._latency: list[float] = []
        self.after_send = None  # optional callable run after the command is written, while waiting for the tick

    def _reset(self, seed: int | None, options: dict) -> tuple[TensorDict, dict]:
        if not self.robot.connected:
            self.robot.connect()
        self.robot_obs = self.robot.get_observation()
        self.adapter.reset(self.robot_obs, seed)
        self._steps, self._tick, self._t0 = 0, 0, self.robot_obs["timestamp"]
        self._ticks, self._latency = [self._t0], []
        return self._batch(self.adapter.observe(self.robot_obs)), {}

    def _step(self, action: torch.Tensor) -> StepResult:
        if tuple(action.shape) != (1, *self.action_spec.shape):
            raise ValueError(f"action must be [1, {', '.join(map(str, self.action_spec.shape))}], got {list(action.shape)}")
        command = self.adapter.action(action[0])
        self.last_sent = self.robot.send_action(command, stamp=self.robot_obs["timestamp"])
        self._latency.append(time.monotonic() - self.robot_obs["timestamp"])
        self.adapter.sent(self.last_sent)
        if self.after_send is not None:  # e.g. logging: off the observation -> command path
            self.after_send()
        self._wait_next_tick()
        self.robot_obs = self.robot.get_observation()
        self._ticks.append(self.robot_obs["timestamp"])
        self._steps += 1
        obs = self._batch(self.adapter.observe(self.robot_obs))
        reward, success = self.adapter.reward(self.robot_obs)
        terminated = self.robot.failsafe_reason is not None
        truncated = self._steps >= self.max_episode_steps and not terminated
        info = {"final_obs": obs.clone(), keys.SUCCESS: torch.tensor([success]), "sent": self.last_sent}
        if terminated or truncated:
            self._steps = 0
            self.adapter.reset(self.robot_obs)
            obs = self._batch(self.adapter.observe(self.robot_obs))
        return obs, torch.tensor([reward]), torch.tensor([terminated]), torch.tensor([truncated]), info

    def _wait_next_tick(self) -> None:
        self._tick += 1
        deadline = self._t0 + self._tick * self.period
        now = time.monotonic()
        if now > deadline:  # overran: skip to the next free tick instead of bursting to catch up
            self._tick = int((now - self._t0) / self.period) + 1
            deadline = self._t0 + self._tick * self.period
        if deadline - now > self.config.spin_s:
            time.sleep(deadline - now - self.config.spin_s)
        while time.monotonic() < deadline:
            pass

    def timing(self) -> dict[str, float]:
        """Achieved rate (Hz), latency and jitter (ms, p50 / p99) since the last reset."""
        ticks = np.asarray(self._ticks)
        if len(ticks) < 3:
            return {}
        dt = np.diff(ticks)
        jitter = np.abs(dt - self.period) * 1e3
        lat = np.asarray(self._latency) * 1e3
        return {"target_hz": 1 / self.period, "achieved_hz": float(len(dt) / (ticks[-1] - ticks[0])),
                "latency_p50_ms": float(np.percentile(lat, 50)), "latency_p99_ms": float(np.percentile(lat, 99)),
                "jitter_p50_ms": float(np.percentile(jitter, 50)), "jitter_p99_ms": float(np.percentile(jitter, 99)),
                "missed_ticks": int(np.sum(dt > 1.5 * self.period))}  # fmt: skip

    def _batch(self, obs: dict[str, torch.Tensor]) -> TensorDict:
        return TensorDict({k: v.unsqueeze(0) for k, v in obs.items()}, batch_size=[1])

    def close(self) -> None:
        self.robot.disconnect()
