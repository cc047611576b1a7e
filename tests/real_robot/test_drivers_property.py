"""Property-based: random, adversarial and malformed commands (command_property.py) at every driver and setpoint
mode; the simulated hardware must never receive anything outside the limits or off the geometry (unit attitude
quaternions within the tilt and turn limits, position paths clear of keep-out boxes), malformed commands and bad
stamps are rejected, and rejected commands never reach it. The default suite runs a small version per driver; the
slow test fires >= 100,000 commands through all of them (FUZZ_COMMANDS overrides the total). (The watchdog and link
loss: each driver's own tests; LeRobot arms on LeRobot's real classes: test_lerobot_real.py.)"""

import contextlib
import functools
import os
import time

import numpy as np
import pytest

from real_robot.arms.sim_arm import SimulatedArm, SimulatedArmConfig
from real_robot.drones.crazyflie import CrazyflieConfig, CrazyflieDrone
from real_robot.drones.mavlink import MavlinkDrone, MavlinkDroneConfig
from real_robot.safety import SafetyConfig
from embodied.testing.fake_crazyflie import FakeCrazyflie
from real_robot.sim.mavlink_vehicle import MavlinkVehicleConfig, MavlinkVehicleSim
from tests.real_robot.command_property import fire_commands
from tests.real_robot.fake_arms import LEROBOT_ARMS, lerobot_arm, qpos

# 2 Hz: the watchdog (0.875 s) stays out of the way between examples; it has its own tests.
# A pillar beside the start (the drones hover at the origin): position paths toward +x must go around it
KEEP_OUT = SafetyConfig(keep_out=(((0.2, -0.2, -2.0), (0.5, 0.2, 2.0)),))


class Log:
    """The hardware's record in command_property's terms, converting only entries not seen before (a list of
    10,000 setpoints is read after every batch)."""

    def __init__(self, raw, convert):
        self.raw, self.convert, self.done = raw, convert, []

    def __call__(self):
        raw = self.raw()
        self.done += [self.convert(entry) for entry in raw[len(self.done):]]
        return self.done


@contextlib.contextmanager
def sim_arm():
    arm = SimulatedArm(SimulatedArmConfig(control_hz=2))
    arm.connect()
    try:  # with where the arm was when each goal arrived: the step limit is checked against that
        yield arm, Log(lambda: list(zip(arm.hardware.received, arm.hardware.arrivals)),
                       lambda e: (e[0][1], "goal", e[1]))  # fmt: skip
    finally:
        arm.disconnect()


# what SET_POSITION_TARGET_LOCAL_NED / SET_ACTUATOR / SET_ATTITUDE carried, in each mode's command units
MAVLINK_VALUES = {"actuator": lambda v: v, "position": lambda v: v[:3], "velocity": lambda v: v[3:6],
                  "attitude": lambda v: v}  # fmt: skip


@contextlib.contextmanager
def mavlink(mode):
    with MavlinkVehicleSim(MavlinkVehicleConfig()) as vehicle:
        safety = KEEP_OUT if mode == "position" else SafetyConfig()
        drone = MavlinkDrone(MavlinkDroneConfig(url=f"udpout:127.0.0.1:{vehicle.port}", control_hz=2, mode=mode,
                                                safety=safety))  # fmt: skip
        drone.connect()
        try:
            yield drone, Log(lambda: list(vehicle.received), lambda e: (MAVLINK_VALUES[mode](e[2]), e[1]))
        finally:
            drone.disconnect()


@contextlib.contextmanager
def crazyflie():
    with FakeCrazyflie() as fake:
        drone = CrazyflieDrone(CrazyflieConfig(uri=fake.uri, control_hz=2, safety=KEEP_OUT))
        drone.connect()
        try:  # position setpoints only: the failsafe's descent (velocity, stop) is not a command
            yield drone, Log(lambda: [e for e in fake.received if e[1] == "position"], lambda e: (e[2][:3], e[1]))
        finally:
            drone.disconnect()


@contextlib.contextmanager
def lerobot(name):
    with lerobot_arm(name, control_hz=2) as (arm, bus):  # our driver on the fake LeRobot: its Goal_Position writes
        # with Present_Position when each goal was written (the fake's motors move only when read: exact)
        yield arm, Log(lambda: list(zip(bus.goal_log, bus.present_log)),
                       lambda e: (qpos(e[0][1]), "goal", (qpos(e[1]), 0.0)))  # fmt: skip


DRIVERS = {"sim_arm": sim_arm, **{f"mavlink_{m}": functools.partial(mavlink, m) for m in MAVLINK_VALUES},
           "crazyflie": crazyflie, **{name: functools.partial(lerobot, name) for name in LEROBOT_ARMS}}  # fmt: skip


@pytest.mark.parametrize("name", list(DRIVERS))
def test_nothing_outside_the_limits_reaches_the_hardware(name):
    with DRIVERS[name]() as (robot, hardware_log):
        tally = fire_commands(robot, hardware_log)
    assert tally["sent"] > 0 and tally["rejected"] > 0, tally  # both sides of the property were exercised


@pytest.mark.slow
def test_a_hundred_thousand_commands_reach_the_hardware_safely():
    """>= 100,000 commands (FUZZ_COMMANDS) spread over every driver, in batches of 32-64 per example."""
    total, per_driver = int(os.environ.get("FUZZ_COMMANDS", 100_000)), {}
    examples = total // len(DRIVERS) // 40 + 1  # batches average ~45 commands
    for name, driver in DRIVERS.items():
        start = time.monotonic()
        with driver() as (robot, hardware_log):
            tally = fire_commands(robot, hardware_log, max_examples=examples, batch_size=64, min_batch=32)
            violations = dict(robot.safety.counts.most_common())
        per_driver[name] = (tally["sent"] + tally["rejected"], tally["sent"], time.monotonic() - start, violations)
        assert tally["sent"] > 0 and tally["rejected"] > 0
    fired = sum(n for n, *_ in per_driver.values())
    for name, (n, sent, seconds, violations) in per_driver.items():
        print(f"{name}: {n} commands ({sent} passed, clipped or not), {seconds:.1f} s; violations {violations}")
    print(f"total: {fired} commands, 0 unsafe, {sum(v[2] for v in per_driver.values()):.1f} s")
    assert fired >= total
