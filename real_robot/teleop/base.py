"""The teleoperation interface: a device that may take over from the policy.

    device = registry.build("teleop", "keyboard", {"action_dim": 4})
    device.connect()
    action, events = device.get_action()   # action: float32 [A] in the task's action box, or None
    device.disconnect()                    #   (None = the human is not in control this step)

`events` are the labels the operator pressed since the last call (`TAKEOVER`, `RELEASE`,
`SUCCESS`, `FAILURE`, `REWIND`, `QUIT`). Raw device axes go through `AxisMapping`: a
deadzone (readings within it are zero, the rest rescaled so the output is continuous at its
edge), a per-axis scale and sign, and a clip to the action box.

`command(obs)` is what the intervention arbiter calls: it returns the action for every env of
a batch and which envs the operator controls. A human device drives one env (num_envs=1); a
scripted operator (`real_robot/teleop/scripted.py`) may drive a whole batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from embodied.config import check
from embodied.keys import FAILURE_EVENT as FAILURE  # the events are the core's contract (embodied/keys.py)
from embodied.keys import QUIT, RELEASE, REWIND, TAKEOVER
from embodied.keys import SUCCESS_EVENT as SUCCESS

EVENTS = (TAKEOVER, RELEASE, SUCCESS, FAILURE, REWIND, QUIT)


@dataclass(frozen=True)
class TeleopConfig:
    """What every device has: how its axes map onto the task's action vector."""

    action_dim: int = 4  # A: length of the task's action vector
    deadzone: float = 0.1  # |axis| below this reads as 0 (stick / puck drift; LeRobot's gamepad uses 0.1)
    scale: tuple[float, ...] = ()  # per-action gain on the normalized axis; () = 1 for every dimension
    low: float = -1.0  # action box the output is clipped to (arm_reach: [-1, 1])
    high: float = 1.0

    def __post_init__(self):
        check(self.action_dim >= 1, f"teleop.action_dim={self.action_dim} must be >= 1")
        check(0.0 <= self.deadzone < 1.0, f"teleop.deadzone={self.deadzone} must be in [0, 1)")
        check(not self.scale or len(self.scale) == self.action_dim,
              f"teleop.scale has {len(self.scale)} entries; give {self.action_dim} or none")  # fmt: skip
        check(self.low < self.high, f"teleop.low={self.low} must be < teleop.high={self.high}")


class AxisMapping:
    """Normalized device axes [-1, 1] -> an action: deadzone, scale, clip."""

    def __init__(self, config: TeleopConfig):
        self.config = config
        self.scale = np.asarray(config.scale or (1.0,) * config.action_dim, np.float32)

    def __call__(self, axes: np.ndarray) -> np.ndarray:
        axes = np.asarray(axes, np.float32)
        if axes.shape != (self.config.action_dim,):
            raise ValueError(f"device axes have shape {axes.shape}, the action has ({self.config.action_dim},)")
        dz = self.config.deadzone
        mag = np.clip((np.abs(axes) - dz) / (1.0 - dz), 0.0, 1.0)  # continuous at the deadzone edge
        return np.clip(np.sign(axes) * mag * self.scale, self.config.low, self.config.high).astype(np.float32)


class Teleop:
    """Base class of every device; subclasses implement `get_action` (and connect/disconnect)."""

    Config = TeleopConfig

    def __init__(self, config: TeleopConfig):
        self.config = config
        self.mapping = AxisMapping(config)
        self.connected = False

    def connect(self) -> None:
        self.connected = True

    def get_action(self) -> tuple[np.ndarray | None, list[str]]:
        """(action [A] or None when the human is not in control, events since the last call)."""
        raise NotImplementedError

    def disconnect(self) -> None:
        self.connected = False

    def command(self, obs: Any, num_envs: int = 1) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
        """(action [N, A], active bool [N], events) for the arbiter; a human device drives env 0 only."""
        if num_envs != 1:
            raise ValueError(f"{type(self).__name__} drives one env; the session has num_envs={num_envs}")
        action, events = self.get_action()
        active = action is not None
        act = torch.as_tensor(action if active else np.zeros(self.config.action_dim, np.float32)).reshape(1, -1)
        return act, torch.tensor([active]), events

    def episode_start(self, mask: torch.Tensor | None = None) -> None:
        """Episodes begin in the envs of `mask` [N] (None: all); a scripted operator resets its counters."""

    def __enter__(self) -> Teleop:
        self.connect()
        return self

    def __exit__(self, *exc) -> None:
        self.disconnect()
