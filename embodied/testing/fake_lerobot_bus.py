"""FAKE LeRobot motor buses: simulated servos behind LeRobot's REAL robot and teleoperator classes.

    with fake_motor_buses():          # LeRobot's SO-100/101 and Koch followers and leaders build these buses
        arm = SO101Follower(SO101FollowerConfig(port="fake", id="arm", calibration_dir=folder))
        arm.connect(calibrate=False)  # the real class: configure(), torque, get_observation(), send_action()
        arm.bus.positions["shoulder_pan"] = 30.0    # the bus is a FakeFeetechBus: move a joint by hand

Runs only where LeRobot 0.6.1 is installed (the separate environment of scripts/lerobot_env.sh; without it,
fake_lerobot.py fakes the arm classes too). `FakeFeetechBus` / `FakeDynamixelBus` replace `FeetechMotorsBus` /
`DynamixelMotorsBus` (lerobot/motors/{motors_bus,feetech/feetech,dynamixel/dynamixel}.py) with the same
constructor and the public methods those classes call, with the real signatures and behaviour: the servos,
registers, positions and link of fake_lerobot.ServoBus, with LeRobot's own MotorCalibration and connection
errors, and register names looked up in the real control table of each motor's model (an unknown name raises
KeyError, as `get_address`); Feetech's EEPROM lock and calibration check.
NOT reproduced: the wire protocol, ticks and their rounding, sign encodings, the handshake and firmware
checks, raw (normalize=False) position access, motor setup and the interactive calibration steps.
"""

from __future__ import annotations

import contextlib
import importlib
from unittest import mock

from lerobot.motors import MotorCalibration
from lerobot.motors.dynamixel import DynamixelMotorsBus
from lerobot.motors.feetech import FeetechMotorsBus
from lerobot.motors.motors_bus import get_address
from lerobot.utils.errors import DeviceAlreadyConnectedError, DeviceNotConnectedError

from embodied.testing.fake_lerobot import ServoBus


class FakeMotorsBus(ServoBus):
    """What FeetechMotorsBus and DynamixelMotorsBus share; `real` is the bus class faked."""

    real: type
    calibration_type = MotorCalibration
    not_connected_error, already_connected_error = DeviceNotConnectedError, DeviceAlreadyConnectedError

    def __init__(self, port: str, motors: dict, calibration: dict | None = None, **kwargs):
        super().__init__(port, motors, calibration, **kwargs)
        self.model_ctrl_table = self.real.model_ctrl_table
        self.model_resolution_table = self.real.model_resolution_table

    def _check(self, data_name: str, motor: str, normalize: bool) -> None:
        get_address(self.model_ctrl_table, self.motors[motor].model, data_name)  # KeyError as the real bus
        super()._check(data_name, motor, normalize)


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
    """For DynamixelMotorsBus (XL330 / XL430: Koch); its calibration check is ServoBus's."""

    real = DynamixelMotorsBus


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
