"""A LeRobot leader arm (SO-100, SO-101, Koch) as a teleop device that drives the matching follower.

    leader = registry.build("teleop", "so101_leader", {"port": "/dev/ttyACM1", "id": "leader"})
    leader.connect()
    action, events = leader.get_action()   # qpos [6] or None (the policy is in control), TAKEOVER / RELEASE

The action has the layout of `real_robot.arms.lerobot_arm.LeRobotArm`'s: the five body joints in rad
and the gripper opening as a fraction in [0, 1], so an SO-101 leader drives an SO-101 follower
directly, as LeRobot's `lerobot-teleoperate` feeds `leader.get_action()` to `follower.send_action()`.
Both arms count joint angles from the middle of their calibrated ranges, so calibrate the two the same
way. Written to LeRobot 0.6.1: lerobot.teleoperators.so_leader's `SO101Leader(SO101LeaderConfig(port, id,
calibration_dir))` reads degrees (use_degrees=True by default); lerobot.teleoperators.koch_leader's
`KochLeader` reads -100..100 over each joint's calibrated range, converted here to angles with the
calibration. LeRobot is imported on `connect` (it needs its own environment); LeRobot's `configure` leaves
the leader's motors torque-free, so a hand moves them. Let go, the leader stays only as far as its gears
hold it: a joint sagging by more than `takeover_threshold` reads as a takeover.

Takeover: the leader rests while the policy drives the follower. Moving any joint more than
`takeover_threshold` (rad; gripper: fraction) from where the leader rested when the policy last took
control hands control to the operator (TAKEOVER); holding the leader still (every joint within
`still_threshold` over `release_steps` calls) hands it back (RELEASE) and the leader's pose becomes the
new rest. A new episode gives control back to the policy. This follows HIL-SERL's automatic leader
intervention in LeRobot's gym_manipulator (huggingface/lerobot@56bc8b70,
src/lerobot/scripts/rl/gym_manipulator.py, `GearedLeaderAutomaticControlWrapper`: the leader, torque on
with a P gain lowered to 16 so a hand can push it, tracks the follower; take over when the tracking error
jumps (variance of the last 2 errors > intervention_threshold), release when it settles (variance of the
last 4 < release_threshold)), without the torque-on tracking: that needs the follower's pose inside the
device. So when the operator takes over, the follower is pulled from its pose to the leader's, paced by
the follower's safety layer (`max_step` per command). LeRobot 0.6.1 dropped leader-arm interventions: its
gym_manipulator accepts only teleoperators with `get_teleop_events` (gamepad, keyboard).
A leader arm has no buttons: label success / failure with another device.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from embodied.config import check
from real_robot.arms.lerobot_arm import MOTORS, build_lerobot_device
from real_robot.teleop.base import RELEASE, TAKEOVER, Teleop, TeleopConfig

TICKS_PER_TURN = 4096  # XL330 / XL430 / STS3215 (MODEL_RESOLUTION in lerobot/motors/*/tables.py)


@dataclass(frozen=True)
class LeaderArmConfig(TeleopConfig):
    """A LeRobot leader arm on a serial port; `low`/`high` clip its joints (rad), the gripper is clipped to [0, 1]."""

    action_dim: int = 6  # the follower's qpos: five joints and the gripper
    low: float = -math.pi
    high: float = math.pi
    port: str = "/dev/ttyACM1"  # the leader's USB serial port (the follower is usually on ttyACM0)
    id: str = "leader"  # LeRobot's calibration id (its calibration file is named after it)
    calibration_dir: str = ""  # folder of LeRobot's calibration files; "" = LeRobot's default
    calibrate: bool = False  # run LeRobot's interactive calibration on connect when uncalibrated
    # 0.1 rad = 5.7 deg, ~65 encoder ticks: far above sensor noise (1 tick = 0.09 deg), a deliberate move
    takeover_threshold: float = 0.1
    still_threshold: float = 0.01  # rad (~7 ticks): a leader moving less than this is not being moved
    release_steps: int = 30  # calls held still to hand back control (1 s at LeRobot's 30 fps); 0 = never

    def __post_init__(self):
        super().__post_init__()
        check(self.action_dim == 6, f"teleop.action_dim={self.action_dim}: a leader arm drives a 6-dim qpos action")
        check(not self.scale, "teleop.scale does not apply to a leader arm (its joints map one to one)")
        check(0 < self.still_threshold < self.takeover_threshold,
              f"need 0 < teleop.still_threshold ({self.still_threshold}) < teleop.takeover_threshold "
              f"({self.takeover_threshold})")  # fmt: skip
        check(self.release_steps >= 0, f"teleop.release_steps={self.release_steps} must be >= 0")


class LeaderArm(Teleop):
    Config = LeaderArmConfig
    lerobot_module = ""  # e.g. "lerobot.teleoperators.so_leader"
    lerobot_class = ""  # e.g. "SO101Leader" (its config class is this + "Config")
    lerobot_type = ""  # e.g. "so101_leader": LeRobot's --teleop.type name

    def __init__(self, config: LeaderArmConfig = LeaderArmConfig()):
        super().__init__(config)
        self.device = None  # the LeRobot teleoperator
        self.active = False
        self.rest: np.ndarray | None = None  # the leader's pose when the policy last took control
        self.recent: deque[np.ndarray] = deque(maxlen=max(config.release_steps, 1))

    def connect(self) -> None:
        self.device = build_lerobot_device(self)
        super().connect()

    def disconnect(self) -> None:
        if self.device is not None:
            self.device.disconnect()
            self.device = None
        super().disconnect()

    def read(self) -> np.ndarray:
        """The leader's pose in the follower's action layout: float32 [6], joints in rad, gripper in [0, 1]."""
        raw = self.device.get_action()  # {"<motor>.pos": value in the bus's normalized units}
        qpos = np.array([self._to_follower(m, raw[f"{m}.pos"]) for m in MOTORS])
        qpos[:5] = np.clip(qpos[:5], self.config.low, self.config.high)
        qpos[5] = np.clip(qpos[5], 0.0, 1.0)
        return qpos.astype(np.float32)

    def _to_follower(self, motor: str, value: float) -> float:
        mode = self.device.bus.motors[motor].norm_mode.value
        if mode == "range_0_100":  # the gripper, as the follower's
            return value / 100.0
        if mode == "degrees":  # from the calibrated middle, as the follower's use_degrees=True
            return math.radians(value)
        # range_m100_100 (Koch leaders): -100..100 spans [range_min, range_max]; LeRobot's DEGREES counts
        # (ticks - middle) * 360 / (TICKS_PER_TURN - 1) (MotorsBus._normalize, lerobot/motors/motors_bus.py)
        cal = self.device.calibration[motor]
        return math.radians(value / 200.0 * (cal.range_max - cal.range_min) * 360.0 / (TICKS_PER_TURN - 1))

    def get_action(self) -> tuple[np.ndarray | None, list[str]]:
        cfg, qpos, events = self.config, self.read(), []
        if self.rest is None:
            self.rest = qpos
        if not self.active and np.abs(qpos - self.rest).max() > cfg.takeover_threshold:
            self.active = True
            self.recent.clear()
            events.append(TAKEOVER)
        if self.active and cfg.release_steps:
            self.recent.append(qpos)
            spread = np.ptp(np.stack(self.recent), axis=0).max()
            if len(self.recent) == cfg.release_steps and spread < cfg.still_threshold:
                self.active, self.rest = False, qpos
                events.append(RELEASE)
        return (qpos if self.active else None), events

    def episode_start(self, mask=None) -> None:
        """The policy starts every episode in control; the leader's pose then is its rest."""
        self.active, self.rest = False, None
        self.recent.clear()


class SO100LeaderArm(LeaderArm):
    lerobot_module, lerobot_class, lerobot_type = "lerobot.teleoperators.so_leader", "SO100Leader", "so100_leader"


class SO101LeaderArm(LeaderArm):
    lerobot_module, lerobot_class, lerobot_type = "lerobot.teleoperators.so_leader", "SO101Leader", "so101_leader"


class KochLeaderArm(LeaderArm):
    lerobot_module, lerobot_class, lerobot_type = "lerobot.teleoperators.koch_leader", "KochLeader", "koch_leader"
