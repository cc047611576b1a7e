"""FAKE LeRobot motor buses: simulated servos behind LeRobot's REAL robot and teleoperator classes.

    with fake_motor_buses():          # LeRobot's SO-100/101 and Koch followers and leaders build these buses
        arm = SO101Follower(SO101FollowerConfig(port="fake", id="arm", calibration_dir=folder))
        arm.connect(calibrate=False)  # the real class: configure(), torque, get_observation(), send_action()
        arm.bus.positions["shoulder_pan"] = 30.0    # the bus is a FakeFeetechBus: move a joint by hand

Runs only where LeRobot 0.6.1 is installed (the separate environment of scripts/lerobot_env.sh).
`FakeFeetechBus` / `FakeDynamixelBus` replace `FeetechMotorsBus` / `DynamixelMotorsBus`
(lerobot/motors/{motors_bus,feetech/feetech,dynamixel/dynamixel}.py) with the same constructor and
the public methods those classes call, with the real signatures and behaviour:
- `connect(handshake)`, `disconnect(disable_torque)` (torque off first, as the real one), `is_connected`;
  LeRobot's own connection decorators raise DeviceAlreadyConnectedError / DeviceNotConnectedError;
- `read`/`write`/`sync_read`/`sync_write(..., *, normalize=True, num_retry=0)`: register names are
  looked up in the real control table of each motor's model (an unknown name raises KeyError, as
  `get_address`). Present_Position and Goal_Position are kept in the bus's normalized units (DEGREES:
  degrees from the middle of the calibrated range; RANGE_0_100 / RANGE_M100_100: percent of it), goals
  clamped as the real `_unnormalize` clamps them; without a calibration they raise RuntimeError, as
  `_normalize` does;
- `enable_torque`/`disable_torque`/`torque_disabled()`, `configure_motors()`, and the calibration
  registers (Homing_Offset, Min/Max_Position_Limit, Drive_Mode) behind `read_calibration`,
  `write_calibration` and `is_calibrated` (Feetech: same motors, ranges and offsets; Dynamixel: equal).
The motors' registers start as calibrated with the calibration the bus is built with (as after
`lerobot-calibrate`, which writes the file and the motors), else at factory values (uncalibrated).
Where torque is on, each Present_Position read moves every motor toward its goal by at most `speed`
units (per read, not per second: deterministic); with torque off a motor stays where it is put
(`positions[motor] = value` is a hand moving a leader arm).
NOT reproduced: the wire protocol, ticks and their rounding, sign encodings, the handshake and firmware
checks, raw (normalize=False) position access, motor setup and the interactive calibration steps.
"""

from __future__ import annotations

import contextlib
import importlib
from unittest import mock

from lerobot.motors import MotorCalibration, MotorNormMode
from lerobot.motors.dynamixel import DynamixelMotorsBus
from lerobot.motors.feetech import FeetechMotorsBus
from lerobot.motors.motors_bus import get_address
from lerobot.utils.decorators import check_if_already_connected, check_if_not_connected

POSITIONS = ("Present_Position", "Goal_Position")
FACTORY = {"Homing_Offset": 0, "Min_Position_Limit": 0, "Max_Position_Limit": 4095}  # 12-bit servos, full turn
# units per read: the STS3215's no-load speed, 4.8 rad/s = 275 deg/s (Feetech datasheet; lerobot_arm.py), at 30 reads/s
SPEED = 9.0


class FakeMotorsBus:
    """What FeetechMotorsBus and DynamixelMotorsBus share; `real` is the bus class faked."""

    real: type

    def __init__(self, port: str, motors: dict, calibration: dict | None = None, **kwargs):  # Feetech: protocol_version
        self.port, self.motors, self.calibration = port, motors, calibration or {}
        self.model_ctrl_table = self.real.model_ctrl_table
        self.model_resolution_table = self.real.model_resolution_table
        self.speed = SPEED
        self._open = False
        self.registers = {m: dict(FACTORY, Torque_Enable=0) for m in motors}  # raw values, by register name
        for motor, cal in self.calibration.items():  # calibrated: the motors hold what the file says
            self.registers[motor].update(Homing_Offset=cal.homing_offset, Min_Position_Limit=cal.range_min,
                                         Max_Position_Limit=cal.range_max, Drive_Mode=cal.drive_mode)  # fmt: skip
        self.positions = dict.fromkeys(motors, 0.0)  # Present_Position, normalized units
        self.goals: dict[str, float] = {}  # Goal_Position, normalized units (unset: the motor holds)
        self.writes: list[tuple[str, str, float]] = []  # every write(data_name, motor, value), in order

    @property
    def is_connected(self) -> bool:
        return self._open

    @check_if_already_connected
    def connect(self, handshake: bool = True) -> None:
        self._open = True

    @check_if_not_connected
    def disconnect(self, disable_torque: bool = True) -> None:
        if disable_torque:
            self.disable_torque(num_retry=5)
        self._open = False

    def _motors(self, motors) -> list[str]:
        return list(self.motors) if motors is None else [motors] if isinstance(motors, str) else list(motors)

    def _check(self, data_name: str, motor: str, normalize: bool) -> None:
        get_address(self.model_ctrl_table, self.motors[motor].model, data_name)  # KeyError as the real bus
        if data_name in POSITIONS and not normalize:
            raise NotImplementedError(f"{type(self).__name__} keeps positions normalized only")
        if data_name in POSITIONS and not self.calibration:
            raise RuntimeError(f"{self} has no calibration registered.")  # the real _normalize's message

    def _clamp(self, motor: str, value: float) -> float:
        mode = self.motors[motor].norm_mode
        if mode is MotorNormMode.RANGE_0_100:
            return min(100.0, max(0.0, value))
        if mode is MotorNormMode.RANGE_M100_100:
            return min(100.0, max(-100.0, value))
        return value

    def _move(self) -> None:
        for motor, goal in self.goals.items():
            if self.registers[motor]["Torque_Enable"]:
                here = self.positions[motor]
                self.positions[motor] = here + min(self.speed, max(-self.speed, goal - here))

    @check_if_not_connected
    def read(self, data_name: str, motor: str, *, normalize: bool = True, num_retry: int = 0):
        self._check(data_name, motor, normalize)
        if data_name == "Present_Position":
            self._move()
            return self.positions[motor]
        if data_name == "Goal_Position":
            return self.goals.get(motor, self.positions[motor])
        return self.registers[motor].get(data_name, 0)

    @check_if_not_connected
    def write(self, data_name: str, motor: str, value, *, normalize: bool = True, num_retry: int = 0) -> None:
        self._check(data_name, motor, normalize)
        self.writes.append((data_name, motor, value))
        if data_name == "Goal_Position":
            self.goals[motor] = self._clamp(motor, float(value))
        elif data_name == "Present_Position":
            raise ValueError("Present_Position is read-only")
        else:
            self.registers[motor][data_name] = int(value)

    @check_if_not_connected
    def sync_read(self, data_name: str, motors=None, *, normalize: bool = True, num_retry: int = 0) -> dict:
        names = self._motors(motors)
        for motor in names:
            self._check(data_name, motor, normalize)
        if data_name == "Present_Position":
            self._move()
            return {m: self.positions[m] for m in names}
        return {m: self.read(data_name, m, normalize=normalize) for m in names}

    @check_if_not_connected
    def sync_write(self, data_name: str, values, *, normalize: bool = True, num_retry: int = 0) -> None:
        values = values if isinstance(values, dict) else dict.fromkeys(self.motors, values)
        for motor, value in values.items():
            self.write(data_name, motor, value, normalize=normalize)

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

    def read_calibration(self) -> dict[str, MotorCalibration]:
        return {motor: MotorCalibration(id=m.id, drive_mode=int(self.registers[motor].get("Drive_Mode", 0)),
                                        homing_offset=self.registers[motor]["Homing_Offset"],
                                        range_min=self.registers[motor]["Min_Position_Limit"],
                                        range_max=self.registers[motor]["Max_Position_Limit"])
                for motor, m in self.motors.items()}  # fmt: skip

    def write_calibration(self, calibration_dict: dict[str, MotorCalibration], cache: bool = True) -> None:
        for motor, cal in calibration_dict.items():
            self.write("Homing_Offset", motor, cal.homing_offset)
            self.write("Min_Position_Limit", motor, cal.range_min)
            self.write("Max_Position_Limit", motor, cal.range_max)
        if cache:
            self.calibration = calibration_dict

    def __repr__(self) -> str:
        return f"{type(self).__name__}(port={self.port!r})"


class FakeFeetechBus(FakeMotorsBus):
    """For FeetechMotorsBus (STS3215: SO-100, SO-101)."""

    real = FeetechMotorsBus

    @property
    def is_calibrated(self) -> bool:  # feetech.py: same motors, same ranges and homing offsets (protocol 0)
        motors = self.read_calibration()
        return set(motors) == set(self.calibration) and all(
            (c.range_min, c.range_max, c.homing_offset) == (self.calibration[m].range_min,
             self.calibration[m].range_max, self.calibration[m].homing_offset) for m, c in motors.items())  # fmt: skip

    def configure_motors(self, return_delay_time=0, maximum_acceleration=254, acceleration=254) -> None:
        super().configure_motors(return_delay_time)
        for motor in self.motors:
            self.write("Maximum_Acceleration", motor, maximum_acceleration)
            self.write("Acceleration", motor, acceleration)

    def read_calibration(self) -> dict[str, MotorCalibration]:
        cal = super().read_calibration()
        for c in cal.values():
            c.drive_mode = 0  # the Feetech bus reports drive mode 0 always
        return cal

    def disable_torque(self, motors=None, num_retry: int = 0) -> None:
        for motor in self._motors(motors):  # Feetech also unlocks the EEPROM ("Lock" 0) and relocks on enable
            self.write("Torque_Enable", motor, 0, num_retry=num_retry)
            self.write("Lock", motor, 0, num_retry=num_retry)

    def enable_torque(self, motors=None, num_retry: int = 0) -> None:
        for motor in self._motors(motors):
            self.write("Torque_Enable", motor, 1, num_retry=num_retry)
            self.write("Lock", motor, 1, num_retry=num_retry)


class FakeDynamixelBus(FakeMotorsBus):
    """For DynamixelMotorsBus (XL330 / XL430: Koch)."""

    real = DynamixelMotorsBus

    @property
    def is_calibrated(self) -> bool:  # dynamixel.py: the cached calibration equals the motors'
        return self.calibration == self.read_calibration()


# where LeRobot 0.6.1's arms name their bus class
BUS_SITES = {
    "lerobot.robots.so_follower.so_follower": ("FeetechMotorsBus", FakeFeetechBus),
    "lerobot.teleoperators.so_leader.so_leader": ("FeetechMotorsBus", FakeFeetechBus),
    "lerobot.robots.koch_follower.koch_follower": ("DynamixelMotorsBus", FakeDynamixelBus),
    "lerobot.teleoperators.koch_leader.koch_leader": ("DynamixelMotorsBus", FakeDynamixelBus),
}


@contextlib.contextmanager
def fake_motor_buses():
    """Within: LeRobot's SO-100/101 and Koch followers and leaders build fake buses instead of opening a port."""
    with contextlib.ExitStack() as stack:
        for module, (name, fake) in BUS_SITES.items():
            stack.enter_context(mock.patch.object(importlib.import_module(module), name, fake))
        yield
