"""A FAKE LeRobot 0.6.1 follower-arm API, for environments without LeRobot (.venv), and the simulated servos
behind both LeRobot fakes.

    with fake_lerobot():               # `import lerobot.robots.so_follower` etc. now give this module's fakes
        arm = registry.build("robot", "so101", {"port": "fake", "calibration_dir": folder})
        arm.connect()                  # our driver, unchanged, on this module's SOFollower over a ServoBus
        arm.arm.bus.goal_log           # every Goal_Position write: (time.monotonic(), {motor: value})

Where LeRobot is installed, drive its REAL classes instead (fake_lerobot_bus.py: only the buses faked, on
`ServoBus`); `fake_lerobot()` refuses to shadow it. Faked, with LeRobot 0.6.1's module paths, names,
signatures, defaults and behaviour (lerobot/robots/{robot,config,utils}.py, robots/so_follower/,
robots/koch_follower/, motors/motors_bus.py, utils/{decorators,errors}.py):
- `lerobot.robots.so_follower`: SOFollower (= SO100Follower = SO101Follower), SOFollowerConfig,
  SOFollowerRobotConfig (= SO100FollowerConfig = SO101FollowerConfig); `lerobot.robots.koch_follower`:
  KochFollower, KochFollowerConfig (use_degrees defaults to False there); `lerobot.robots`: Robot, RobotConfig;
- `Robot(config)`: id, the calibration folder (config.calibration_dir or $HF_LEROBOT_CALIBRATION/robots/<name>,
  created) and `<id>.json` loaded when present, `_save_calibration()`; `connect(calibrate=True)` (bus,
  calibration when asked and needed, configure()), `is_calibrated`, `get_observation()` -> {"<motor>.pos":
  float}, `send_action({"<motor>.pos": goal})` -> the goals written (capped by `max_relative_target` as
  `ensure_safe_goal_position`), `disconnect()` (torque off when `disable_torque_on_disconnect`); the
  connection checks raise DeviceNotConnectedError / DeviceAlreadyConnectedError (ConnectionErrors);
- `lerobot.motors`: Motor, MotorCalibration, MotorNormMode; `lerobot.utils.errors`.
NOT faked: cameras (a config with cameras is refused), the interactive `calibrate()` (which reads the
keyboard in LeRobot), motor setup, draccus' config registry (`RobotConfig.type`), the leader arms, and, on
the bus, the wire protocol, ticks and the control tables (register names are not checked here; they are
against the real tables in fake_lerobot_bus.py). tests/real_robot/test_lerobot_real.py checks this fake's names,
fields, defaults, signatures and messages against the real LeRobot.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.machinery
import importlib.util
import json
import os
import sys
import time
import types
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from pathlib import Path
from unittest import mock

from real_robot.arms.lerobot_arm import LEROBOT_VERSION

POSITIONS = ("Present_Position", "Goal_Position")
FACTORY = {"Homing_Offset": 0, "Min_Position_Limit": 0, "Max_Position_Limit": 4095}  # 12-bit servos, full turn
# units per read: the STS3215's no-load speed, 4.8 rad/s = 275 deg/s (Feetech datasheet; lerobot_arm.py), at 30 reads/s
SPEED = 9.0
# a calibration as lerobot-calibrate leaves it: body joints over a half turn around the middle, wrist_roll a full turn
RANGES = {"shoulder_pan": (1024, 3072), "shoulder_lift": (1024, 3072), "elbow_flex": (1024, 3072),
          "wrist_flex": (1024, 3072), "wrist_roll": (0, 4095), "gripper": (2000, 3000)}  # fmt: skip


# ---- lerobot.utils.errors, lerobot.motors ------------------------------------------------------------------
class DeviceNotConnectedError(ConnectionError):
    def __init__(self, message="This device is not connected. Try calling `connect()` first."):
        self.message = message
        super().__init__(self.message)


class DeviceAlreadyConnectedError(ConnectionError):
    def __init__(self, message="This device is already connected. Try not calling `connect()` twice."):
        self.message = message
        super().__init__(self.message)


class MotorNormMode(str, Enum):
    RANGE_0_100 = "range_0_100"
    RANGE_M100_100 = "range_m100_100"
    DEGREES = "degrees"


@dataclass
class MotorCalibration:
    id: int
    drive_mode: int
    homing_offset: int
    range_min: int
    range_max: int


@dataclass
class Motor:
    id: int
    model: str
    norm_mode: MotorNormMode
    motor_type_str: str | None = None
    recv_id: int | None = None


def connected(expected: bool):
    """LeRobot's check_if_not_connected (expected=True) / check_if_already_connected (False), raising the
    owner's error classes (this module's, or LeRobot's own on fake_lerobot_bus's buses)."""

    def decorate(method):
        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            if self.is_connected != expected:
                if expected:
                    raise self.not_connected_error(f"{type(self).__name__} is not connected. Run `.connect()` first.")
                raise self.already_connected_error(f"{type(self).__name__} is already connected.")
            return method(self, *args, **kwargs)

        return wrapper

    return decorate


# ---- the simulated servos ----------------------------------------------------------------------------------
class ServoBus:
    """Position servos behind the MotorsBus methods LeRobot's arms call, with their signatures
    (`connect(handshake)`, `disconnect(disable_torque)`, `read`/`write`/`sync_read`/`sync_write(..., *,
    normalize=True, num_retry=0)`, torque, `configure_motors`, calibration registers, `is_calibrated`).
    Present_Position and Goal_Position are kept in the bus's normalized units (DEGREES: degrees from the middle
    of the calibrated range; RANGE_0_100 / RANGE_M100_100: percent of it), goals clamped as the real
    `_unnormalize` clamps them; without a calibration they raise RuntimeError, as `_normalize` does. The
    registers start calibrated with the calibration the bus is built with (as after `lerobot-calibrate`), else
    at factory values. Where torque is on, each Present_Position read moves every motor toward its goal by at
    most `speed` units (per read, not per second: deterministic); with torque off a motor stays where it is put
    (`positions[motor] = value` is a hand moving a leader arm). `link_up = False` is a cut cable: every transfer
    raises ConnectionError, as the real bus does when no status packet comes back."""

    calibration_type: type = MotorCalibration
    not_connected_error: type = DeviceNotConnectedError
    already_connected_error: type = DeviceAlreadyConnectedError

    def __init__(self, port: str, motors: dict, calibration: dict | None = None, **kwargs):  # Feetech: protocol_version
        self.port, self.motors, self.calibration = port, motors, calibration or {}
        self.speed = SPEED
        self.link_up = True
        self._open = False
        self.registers = {m: dict(FACTORY, Torque_Enable=0) for m in motors}  # raw values, by register name
        for motor, cal in self.calibration.items():  # calibrated: the motors hold what the file says
            self.registers[motor].update(Homing_Offset=cal.homing_offset, Min_Position_Limit=cal.range_min,
                                         Max_Position_Limit=cal.range_max, Drive_Mode=cal.drive_mode)  # fmt: skip
        self.positions = dict.fromkeys(motors, 0.0)  # Present_Position, normalized units
        self.goals: dict[str, float] = {}  # Goal_Position, normalized units (unset: the motor holds)
        self.writes: list[tuple[str, str, float]] = []  # every write(data_name, motor, value), in order
        self.goal_log: list[tuple[float, dict[str, float]]] = []  # every Goal_Position write as asked, unclamped
        self.present_log: list[dict[str, float]] = []  # Present_Position when each goal_log entry was written

    @property
    def is_connected(self) -> bool:
        return self._open

    @connected(False)
    def connect(self, handshake: bool = True) -> None:
        self._open = True

    @connected(True)
    def disconnect(self, disable_torque: bool = True) -> None:
        if disable_torque:
            self.disable_torque(num_retry=5)
        self._open = False

    def _motors(self, motors) -> list[str]:
        return list(self.motors) if motors is None else [motors] if isinstance(motors, str) else list(motors)

    def _check(self, data_name: str, motor: str, normalize: bool) -> None:
        if not self.link_up:
            raise ConnectionError(f"Failed to access '{data_name}' on id_={self.motors[motor].id}. "
                                  "[TxRxResult] There is no status packet!")  # fmt: skip
        if data_name in POSITIONS and not normalize:
            raise NotImplementedError(f"{type(self).__name__} keeps positions normalized only")
        if data_name in POSITIONS and not self.calibration:
            raise RuntimeError(f"{self} has no calibration registered.")  # the real _normalize's message

    def _clamp(self, motor: str, value: float) -> float:
        mode = self.motors[motor].norm_mode.value  # LeRobot's enum or this module's: the same values
        if mode == MotorNormMode.RANGE_0_100.value:
            return min(100.0, max(0.0, value))
        if mode == MotorNormMode.RANGE_M100_100.value:
            return min(100.0, max(-100.0, value))
        return value

    def _move(self) -> None:
        for motor, goal in self.goals.items():
            if self.registers[motor]["Torque_Enable"]:
                here = self.positions[motor]
                self.positions[motor] = here + min(self.speed, max(-self.speed, goal - here))

    def _store(self, data_name: str, motor: str, value) -> None:
        self.writes.append((data_name, motor, value))
        if data_name == "Goal_Position":
            self.goals[motor] = self._clamp(motor, float(value))
        elif data_name == "Present_Position":
            raise ValueError("Present_Position is read-only")
        else:
            self.registers[motor][data_name] = int(value)

    @connected(True)
    def read(self, data_name: str, motor: str, *, normalize: bool = True, num_retry: int = 0):
        self._check(data_name, motor, normalize)
        if data_name == "Present_Position":
            self._move()
            return self.positions[motor]
        if data_name == "Goal_Position":
            return self.goals.get(motor, self.positions[motor])
        return self.registers[motor].get(data_name, 0)

    @connected(True)
    def write(self, data_name: str, motor: str, value, *, normalize: bool = True, num_retry: int = 0) -> None:
        self.sync_write(data_name, {motor: value}, normalize=normalize, num_retry=num_retry)

    @connected(True)
    def sync_read(self, data_name: str, motors=None, *, normalize: bool = True, num_retry: int = 0) -> dict:
        names = self._motors(motors)
        for motor in names:
            self._check(data_name, motor, normalize)
        if data_name == "Present_Position":
            self._move()
            return {m: self.positions[m] for m in names}
        return {m: self.read(data_name, m, normalize=normalize) for m in names}

    @connected(True)
    def sync_write(self, data_name: str, values, *, normalize: bool = True, num_retry: int = 0) -> None:
        values = values if isinstance(values, dict) else dict.fromkeys(self.motors, values)
        for motor in values:
            self._check(data_name, motor, normalize)
        if data_name == "Goal_Position":
            self.goal_log.append((time.monotonic(), dict(values)))
            self.present_log.append(dict(self.positions))  # motors move only on reads: exactly where they are
        for motor, value in values.items():
            self._store(data_name, motor, value)

    def enable_torque(self, motors=None, num_retry: int = 0) -> None:
        for motor in self._motors(motors):
            self.write("Torque_Enable", motor, 1, num_retry=num_retry)

    def disable_torque(self, motors=None, num_retry: int = 0) -> None:
        for motor in self._motors(motors):
            self.write("Torque_Enable", motor, 0, num_retry=num_retry)

    @contextlib.contextmanager
    def torque_disabled(self, motors=None):
        self.disable_torque(motors)
        try:
            yield
        finally:
            self.enable_torque(motors)

    def configure_motors(self, return_delay_time: int = 0) -> None:
        for motor in self.motors:
            self.write("Return_Delay_Time", motor, return_delay_time)

    @property
    def is_calibrated(self) -> bool:  # dynamixel.py: the cached calibration equals the motors'
        return self.calibration == self.read_calibration()

    def read_calibration(self) -> dict:
        return {motor: self.calibration_type(id=m.id, drive_mode=int(self.registers[motor].get("Drive_Mode", 0)),
                                             homing_offset=self.registers[motor]["Homing_Offset"],
                                             range_min=self.registers[motor]["Min_Position_Limit"],
                                             range_max=self.registers[motor]["Max_Position_Limit"])
                for motor, m in self.motors.items()}  # fmt: skip

    def write_calibration(self, calibration_dict: dict, cache: bool = True) -> None:
        for motor, cal in calibration_dict.items():
            self.write("Homing_Offset", motor, cal.homing_offset)
            self.write("Min_Position_Limit", motor, cal.range_min)
            self.write("Max_Position_Limit", motor, cal.range_max)
        if cache:
            self.calibration = calibration_dict

    def __repr__(self) -> str:
        return f"{type(self).__name__}(port={self.port!r})"


# ---- lerobot.robots ----------------------------------------------------------------------------------------
@dataclass(kw_only=True)
class RobotConfig:
    id: str | None = None  # distinguishes robots of one type; names the calibration file
    calibration_dir: Path | None = None


class Robot:
    config_class: type
    name: str
    not_connected_error, already_connected_error = DeviceNotConnectedError, DeviceAlreadyConnectedError

    def __init__(self, config: RobotConfig):
        self.robot_type = self.name
        self.id = config.id
        home = Path(os.getenv("HF_LEROBOT_HOME", Path(os.getenv("HF_HOME", "~/.cache/huggingface")) / "lerobot"))
        default = Path(os.getenv("HF_LEROBOT_CALIBRATION", home.expanduser() / "calibration")).expanduser()
        self.calibration_dir = config.calibration_dir if config.calibration_dir else default / "robots" / self.name
        self.calibration_dir.mkdir(parents=True, exist_ok=True)
        self.calibration_fpath = self.calibration_dir / f"{self.id}.json"
        self.calibration: dict[str, MotorCalibration] = {}
        if self.calibration_fpath.is_file():
            self._load_calibration()

    def __str__(self) -> str:
        return f"{self.id} {self.__class__.__name__}"

    def __enter__(self):
        self.connect()
        return self

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        self.disconnect()

    def _load_calibration(self, fpath: Path | None = None) -> None:
        with open(self.calibration_fpath if fpath is None else fpath) as f:
            self.calibration = {motor: MotorCalibration(**cal) for motor, cal in json.load(f).items()}

    def _save_calibration(self, fpath: Path | None = None) -> None:
        with open(self.calibration_fpath if fpath is None else fpath, "w") as f:
            json.dump({motor: dataclasses.asdict(cal) for motor, cal in self.calibration.items()}, f, indent=4)


def ensure_safe_goal_position(goal_present_pos: dict[str, tuple[float, float]],
                              max_relative_target: float | dict[str, float]) -> dict[str, float]:  # fmt: skip
    """robots/utils.py: each goal within max_relative_target of the present position (its warning log left out)."""
    if isinstance(max_relative_target, float):
        diff_cap = dict.fromkeys(goal_present_pos, max_relative_target)
    elif isinstance(max_relative_target, dict):
        if not set(goal_present_pos) == set(max_relative_target):
            raise ValueError("max_relative_target keys must match those of goal_present_pos.")
        diff_cap = max_relative_target
    else:
        raise TypeError(max_relative_target)
    return {key: present + max(-diff_cap[key], min(goal - present, diff_cap[key]))
            for key, (goal, present) in goal_present_pos.items()}  # fmt: skip


class FakeFollower(Robot):
    """What SOFollower and KochFollower share in LeRobot 0.6.1 (there: two copies of the same methods)."""

    models: tuple[str, ...]  # servo model per motor, shoulder_pan .. gripper
    read_retries = False  # SOFollower passes num_retry=config.num_read_retries to its reads

    def __init__(self, config):
        super().__init__(config)
        self.config = config
        if config.cameras:
            raise NotImplementedError("the fake LeRobot has no cameras (embodied/testing/fake_lerobot.py)")
        body = MotorNormMode.DEGREES if config.use_degrees else MotorNormMode.RANGE_M100_100
        names = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
        self.bus = ServoBus(port=self.config.port, motors={
            m: Motor(i + 1, model, MotorNormMode.RANGE_0_100 if m == "gripper" else body)
            for i, (m, model) in enumerate(zip(names, self.models))}, calibration=self.calibration)  # fmt: skip
        self.cameras = {}

    @cached_property
    def observation_features(self) -> dict:
        return {f"{motor}.pos": float for motor in self.bus.motors}

    @cached_property
    def action_features(self) -> dict:
        return {f"{motor}.pos": float for motor in self.bus.motors}

    @property
    def is_connected(self) -> bool:
        return self.bus.is_connected

    @connected(False)
    def connect(self, calibrate: bool = True) -> None:
        self.bus.connect()
        if not self.is_calibrated and calibrate:
            self.calibrate()
        self.configure()

    @property
    def is_calibrated(self) -> bool:
        return self.bus.is_calibrated

    def calibrate(self) -> None:
        raise NotImplementedError("LeRobot's calibration is interactive (keyboard prompts): not faked")

    @connected(True)
    def get_observation(self) -> dict:
        retries = {"num_retry": self.config.num_read_retries} if self.read_retries else {}
        return {f"{motor}.pos": val for motor, val in self.bus.sync_read("Present_Position", **retries).items()}

    @connected(True)
    def send_action(self, action: dict) -> dict:
        goal_pos = {key.removesuffix(".pos"): val for key, val in action.items() if key.endswith(".pos")}
        if self.config.max_relative_target is not None:
            retries = {"num_retry": self.config.num_read_retries} if self.read_retries else {}
            present_pos = self.bus.sync_read("Present_Position", **retries)
            goal_present_pos = {key: (g_pos, present_pos[key]) for key, g_pos in goal_pos.items()}
            goal_pos = ensure_safe_goal_position(goal_present_pos, self.config.max_relative_target)
        self.bus.sync_write("Goal_Position", goal_pos)
        return {f"{motor}.pos": val for motor, val in goal_pos.items()}

    @connected(True)
    def disconnect(self):
        self.bus.disconnect(self.config.disable_torque_on_disconnect)


@dataclass
class SOFollowerConfig:
    port: str  # the arm's serial port
    disable_torque_on_disconnect: bool = True
    max_relative_target: float | dict[str, float] | None = None  # cap on |goal - present| per motor, or None
    cameras: dict = field(default_factory=dict)
    use_degrees: bool = True
    position_p_coefficient: int = 16
    position_i_coefficient: int = 0
    position_d_coefficient: int = 32
    num_read_retries: int = 2


@dataclass
class SOFollowerRobotConfig(RobotConfig, SOFollowerConfig):
    pass


class SOFollower(FakeFollower):
    config_class, name = SOFollowerRobotConfig, "so_follower"
    models, read_retries = ("sts3215",) * 6, True

    def configure(self) -> None:
        with self.bus.torque_disabled():
            self.bus.configure_motors()
            for motor in self.bus.motors:
                self.bus.write("Operating_Mode", motor, 0)  # feetech OperatingMode.POSITION
                self.bus.write("P_Coefficient", motor, self.config.position_p_coefficient)
                self.bus.write("I_Coefficient", motor, self.config.position_i_coefficient)
                self.bus.write("D_Coefficient", motor, self.config.position_d_coefficient)
                if motor == "gripper":
                    self.bus.write("Max_Torque_Limit", motor, 500)
                    self.bus.write("Protection_Current", motor, 250)
                    self.bus.write("Overload_Torque", motor, 25)


@dataclass
class KochFollowerConfig(RobotConfig):
    port: str  # the arm's serial port
    disable_torque_on_disconnect: bool = True
    max_relative_target: float | dict[str, float] | None = None  # cap on |goal - present| per motor, or None
    cameras: dict = field(default_factory=dict)
    use_degrees: bool = False


class KochFollower(FakeFollower):
    config_class, name = KochFollowerConfig, "koch_follower"
    models = ("xl430-w250",) * 2 + ("xl330-m288",) * 4

    def configure(self) -> None:
        with self.bus.torque_disabled():
            self.bus.configure_motors()
            for motor in self.bus.motors:
                if motor != "gripper":
                    self.bus.write("Operating_Mode", motor, 4)  # dynamixel OperatingMode.EXTENDED_POSITION
            self.bus.write("Operating_Mode", "gripper", 5)  # CURRENT_POSITION
            self.bus.write("Position_P_Gain", "elbow_flex", 1500)
            self.bus.write("Position_I_Gain", "elbow_flex", 0)
            self.bus.write("Position_D_Gain", "elbow_flex", 600)


# ---- installing the fake -----------------------------------------------------------------------------------
MODULES = {
    "lerobot": {"__version__": LEROBOT_VERSION},
    "lerobot.utils": {},
    "lerobot.utils.errors": {"DeviceNotConnectedError": DeviceNotConnectedError,
                             "DeviceAlreadyConnectedError": DeviceAlreadyConnectedError},
    "lerobot.motors": {"Motor": Motor, "MotorCalibration": MotorCalibration, "MotorNormMode": MotorNormMode},
    "lerobot.robots": {"Robot": Robot, "RobotConfig": RobotConfig},
    "lerobot.robots.so_follower": {"SOFollower": SOFollower, "SO100Follower": SOFollower, "SO101Follower": SOFollower,
                                   "SOFollowerConfig": SOFollowerConfig, "SOFollowerRobotConfig": SOFollowerRobotConfig,
                                   "SO100FollowerConfig": SOFollowerRobotConfig,
                                   "SO101FollowerConfig": SOFollowerRobotConfig},
    "lerobot.robots.koch_follower": {"KochFollower": KochFollower, "KochFollowerConfig": KochFollowerConfig},
}  # fmt: skip


@contextlib.contextmanager
def fake_lerobot():
    """Within: `import lerobot...` (the modules of MODULES) gives this fake. Refused where LeRobot is installed."""
    if "lerobot" not in sys.modules and importlib.util.find_spec("lerobot") is not None:
        raise RuntimeError("LeRobot is installed here: drive its real classes (fake_lerobot_bus.fake_motor_buses())")
    modules = {}
    for name, attrs in MODULES.items():
        module = types.ModuleType(name, f"FAKE {name} of LeRobot {LEROBOT_VERSION} (embodied/testing/fake_lerobot.py)")
        module.__dict__.update(attrs)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(modules[parent], child, module)
        modules[name] = module
    with mock.patch.dict(sys.modules, modules):
        yield


def save_calibration(module: str, cls: str, folder: str, device_id: str) -> None:
    """Write the calibration file of `device_id` (the RANGES, as lerobot-calibrate leaves them) with the robot or
    teleoperator class's own writer: LeRobot's where it is installed, within `fake_lerobot()` the fake's."""
    mod = importlib.import_module(module)
    device = getattr(mod, cls)(getattr(mod, cls + "Config")(port="unused", id=device_id, calibration_dir=Path(folder)))
    calibration_type = importlib.import_module("lerobot.motors").MotorCalibration
    device.calibration = {m: calibration_type(id=i + 1, drive_mode=0, homing_offset=0, range_min=lo, range_max=hi)
                          for i, (m, (lo, hi)) in enumerate(RANGES.items())}  # fmt: skip
    device._save_calibration()
