"""LeRobot follower arms (SO-100, SO-101, Koch) behind the robot interface and its safety layer.

Written to LeRobot 0.6.1's robot API (what scripts/lerobot_env.sh installs; checked against the real
classes by tests/real_robot/test_lerobot_real.py): `SO101Follower(SO101FollowerConfig(port=..., id=...,
calibration_dir=..., use_degrees=True))` from lerobot.robots.so_follower (SO-100 and SO-101 share one
class there; 0.4 had separate so100_follower / so101_follower modules), `KochFollower` from
lerobot.robots.koch_follower; `connect(calibrate)`, `is_calibrated`, `get_observation()` ->
{"<motor>.pos": float, "<camera>": HxWx3 uint8}, `send_action({"<motor>.pos": goal})` -> the goal
actually written, `disconnect()` (which disables torque: `disable_torque_on_disconnect` defaults to True).
Motors: shoulder_pan, shoulder_lift, elbow_flex, wrist_flex, wrist_roll (degrees from the calibrated
middle with use_degrees=True) and gripper (0-100 over its calibrated range). Here commands and
observations are `qpos` [6]: the five body joints in rad and the gripper opening as a fraction in [0, 1].
LeRobot's own `max_relative_target` is left off: our safety layer applies the step limit (relative to the
present position, as LeRobot does) and everything else. An arm that is not calibrated fails on connect
(LeRobot's calibration is interactive: run `lerobot-calibrate` first, or set calibrate=true at a terminal).
LeRobot cannot share this venv's torch (shared/ENVIRONMENT.md); it is imported on `connect`, so the
class is registered and configurable everywhere and fails with one clear message where it is absent.
The workspace check is off by default: LeRobot's calibrated zero pose is not the simulated arm's.
Link loss: LeRobot's buses raise ConnectionError when the motors do not answer (an unplugged port: pyserial's
SerialException), both OSErrors. A failed read gives the last reading flagged `link_lost` and a failed write
triggers the failsafe directly; the failsafe's hold is written if the bus answers again, and the servos keep
their last goal otherwise. Commands stay blocked until `clear_failsafe()`.
"""

from __future__ import annotations

import importlib
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch

from embodied.specs import Spec
from real_robot import safety as sf
from real_robot.robot import Robot, RobotConfig, RobotError
from real_robot.safety import SafetyConfig, fill_defaults

log = logging.getLogger(__name__)

LEROBOT_VERSION = "0.6.1"  # the version scripts/lerobot_env.sh installs and the real-class tests run against
MOTORS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
_JOINT_LIMIT = math.radians(150)  # rad; STS3215 / XL430 cover 360 deg, a calibrated SO-101 joint ~+-150 deg or less


def _lerobot_safety() -> SafetyConfig:
    return SafetyConfig(
        low=(-_JOINT_LIMIT,) * 5 + (0.0,), high=(_JOINT_LIMIT,) * 5 + (1.0,),
        max_step=0.2,  # rad (and gripper fraction) per command from the present position
        max_velocity=3.0,  # rad/s of command change; the STS3215's no-load speed is 4.8 rad/s (Feetech datasheet)
        max_command_age=0.1,
    )  # fmt: skip


def import_lerobot(module: str, user: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise RobotError(f"{user} needs LeRobot {LEROBOT_VERSION} ({module}), which is not importable here ({err}); "
                         "it runs in its own environment (Python 3.12: bash scripts/lerobot_env.sh; "
                         "shared/ENVIRONMENT.md)") from err


def build_lerobot_device(owner, **options: Any):
    """Build and connect `owner.lerobot_class` (a LeRobot robot or teleoperator) from `owner.config`'s port, id
    and calibration folder; an uncalibrated arm is disconnected again and refused with the command that fixes it."""
    cfg, name = owner.config, type(owner).__name__
    module = import_lerobot(owner.lerobot_module, name)
    device_config = getattr(module, owner.lerobot_class + "Config")(
        port=cfg.port, id=cfg.id, calibration_dir=Path(cfg.calibration_dir) if cfg.calibration_dir else None, **options)
    device = getattr(module, owner.lerobot_class)(device_config)
    device.connect(calibrate=cfg.calibrate)
    if not device.is_calibrated:
        device.disconnect()
        kind = "teleop" if owner.lerobot_type.endswith("_leader") else "robot"
        raise RobotError(f"{name} on {cfg.port} (id {cfg.id!r}) is not calibrated: run `lerobot-calibrate "
                         f"--{kind}.type={owner.lerobot_type} --{kind}.port={cfg.port} --{kind}.id={cfg.id}` "
                         "or connect once with calibrate=true at a terminal")  # fmt: skip
    return device


@dataclass(frozen=True)
class LeRobotArmConfig(RobotConfig):
    """A LeRobot follower arm on a serial port."""

    control_hz: float = 30.0  # LeRobot records at 30 fps by default
    safety: SafetyConfig = field(default_factory=SafetyConfig)  # unset limits: _lerobot_safety()
    port: str = "/dev/ttyACM0"  # the arm's USB serial port
    id: str = "follower"  # LeRobot's calibration id (its calibration file is named after it)
    calibration_dir: str = ""  # folder of LeRobot's calibration files; "" = LeRobot's default (under HF_LEROBOT_HOME)
    calibrate: bool = False  # run LeRobot's interactive calibration on connect when uncalibrated

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "safety", fill_defaults(self.safety, _lerobot_safety()))


class LeRobotArm(Robot):
    Config = LeRobotArmConfig
    lerobot_module = ""  # e.g. "lerobot.robots.so_follower"
    lerobot_class = ""  # e.g. "SO101Follower" (its config class is this + "Config")
    lerobot_type = ""  # e.g. "so101_follower": LeRobot's --robot.type name
    action_key = "qpos"
    # LeRobot's calibrated zero pose, not arm_reach's: deploy refuses a policy whose joint angles mean otherwise
    qpos_meaning = "rad from the calibrated middle, shoulder_pan..wrist_roll; gripper opening [0, 1]"
    observation_spec = {"qpos": Spec((6,), meaning=qpos_meaning)}
    action_spec = Spec((6,), torch.float32, meaning=qpos_meaning)

    def __init__(self, config: LeRobotArmConfig = LeRobotArmConfig()):
        super().__init__(config)
        self.arm = None

    def _connect(self) -> None:
        self.arm = build_lerobot_device(self, use_degrees=True)
        if self._read().get("link_lost"):
            self._disconnect()
            raise RobotError(f"{type(self).__name__} on {self.config.port}: the motors do not answer")

    def _read(self) -> dict[str, Any]:
        try:
            raw = self.arm.get_observation()
        except OSError as err:
            log.warning("%s: reading the motors failed: %s", type(self).__name__, err)
            last = self._measured if self._measured is not None else np.zeros(6)
            return {"qpos": last.astype(np.float32), "link_lost": True}
        qpos = np.array([math.radians(raw[f"{m}.pos"]) for m in MOTORS[:5]] + [raw["gripper.pos"] / 100.0])
        self._measured = qpos
        obs = {"qpos": qpos.astype(np.float32)}
        obs.update({f"images/{k}": v for k, v in raw.items() if not k.endswith(".pos")})
        return obs

    def _measure(self) -> np.ndarray | None:
        """Present_Position read now (as LeRobot's own send_action reads it before applying max_relative_target),
        not the last observation's, and without the cameras."""
        try:
            present = self.arm.bus.sync_read("Present_Position")
        except OSError as err:  # the command cannot be checked, so it is not written: that write failed
            self.failsafe(f"link lost: writing the motors failed: reading their present position first: {err}", sf.LINK)
            return None
        return np.array([math.radians(present[m]) for m in MOTORS[:5]] + [present["gripper"] / 100.0])

    def _write(self, command: np.ndarray) -> None:
        goal = {f"{m}.pos": math.degrees(float(q)) for m, q in zip(MOTORS[:5], command[:5])}
        goal["gripper.pos"] = 100.0 * float(command[5])
        try:
            self.arm.send_action(goal)
        except OSError as err:
            self.failsafe(f"link lost: writing the motors failed: {err}", sf.LINK)

    def _failsafe(self, reason: str) -> None:
        self._write(self._read()["qpos"].astype(np.float64))  # hold the present position (or the last one read)

    def _disconnect(self) -> None:
        if self.arm is not None:
            try:
                self.arm.disconnect()  # LeRobot disables torque first
            except OSError as err:
                log.warning("%s: disconnect failed, torque may still be on: %s", type(self).__name__, err)
            self.arm = None


class SO100Arm(LeRobotArm):
    lerobot_module, lerobot_class, lerobot_type = "lerobot.robots.so_follower", "SO100Follower", "so100_follower"


class SO101Arm(LeRobotArm):
    lerobot_module, lerobot_class, lerobot_type = "lerobot.robots.so_follower", "SO101Follower", "so101_follower"


class KochArm(LeRobotArm):
    lerobot_module, lerobot_class, lerobot_type = "lerobot.robots.koch_follower", "KochFollower", "koch_follower"

