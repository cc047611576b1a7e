"""Property-based: random, adversarial and malformed commands at every driver; the simulated hardware
must never receive anything outside the limits, malformed commands are rejected, and rejected commands never
reach it. (The watchdog and link loss: each driver's own tests; LeRobot arms: test_lerobot_arm.py.)"""

import contextlib
import functools

import pytest

from real_robot.arms.sim_arm import SimulatedArm, SimulatedArmConfig
from real_robot.drones.crazyflie import CrazyflieConfig, CrazyflieDrone
from real_robot.drones.mavlink import MavlinkDrone, MavlinkDroneConfig
from real_robot.sim.fake_crazyflie import FakeCrazyflie
from real_robot.sim.mavlink_vehicle import MavlinkVehicleConfig, MavlinkVehicleSim
from tests.real_robot.command_property import fire_commands
from tests.real_robot.fake_arms import LEROBOT_ARMS, goals_written, lerobot_arm

# 2 Hz: the watchdog (0.75 s) stays out of the way between examples; it has its own tests


@contextlib.contextmanager
def sim_arm():
    arm = SimulatedArm(SimulatedArmConfig(control_hz=2))
    arm.connect()
    try:
        yield arm, lambda: [(g, "goal") for _, g in arm.hardware.received]
    finally:
        arm.disconnect()


@contextlib.contextmanager
def mavlink(mode):
    with MavlinkVehicleSim(MavlinkVehicleConfig()) as vehicle:
        drone = MavlinkDrone(MavlinkDroneConfig(url=f"udpout:127.0.0.1:{vehicle.port}", control_hz=2, mode=mode))
        drone.connect()
        try:
            yield drone, lambda: [(v if k == "actuator" else v[:3], k) for _, k, v in vehicle.received]
        finally:
            drone.disconnect()


@contextlib.contextmanager
def crazyflie():
    with FakeCrazyflie() as fake:
        drone = CrazyflieDrone(CrazyflieConfig(uri=fake.uri, control_hz=2))
        drone.connect()
        try:
            yield drone, lambda: [(v[:3], k) for _, k, v in fake.received if k != "stop"]
        finally:
            drone.disconnect()


@contextlib.contextmanager
def lerobot(name):
    with lerobot_arm(name, control_hz=2) as (arm, bus):  # our driver on the fake LeRobot: its Goal_Position writes
        yield arm, lambda: goals_written(bus)


DRIVERS = {"sim_arm": sim_arm, "mavlink_actuator": lambda: mavlink("actuator"),
           "mavlink_position": lambda: mavlink("position"), "crazyflie": crazyflie,
           **{name: functools.partial(lerobot, name) for name in LEROBOT_ARMS}}  # fmt: skip


@pytest.mark.parametrize("name", list(DRIVERS))
def test_nothing_outside_the_limits_reaches_the_hardware(name):
    with DRIVERS[name]() as (robot, hardware_log):
        tally = fire_commands(robot, hardware_log)
    assert tally["sent"] > 0 and tally["rejected"] > 0  # both sides of the property were exercised
