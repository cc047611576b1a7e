"""Property-based: random, adversarial and malformed commands at every driver; the simulated hardware
must never receive anything outside the limits, and rejected commands must never reach it."""

import contextlib
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from real_robot.arms.sim_arm import SimulatedArm, SimulatedArmConfig
from real_robot.drones.crazyflie import CrazyflieConfig, CrazyflieDrone
from real_robot.drones.mavlink import MavlinkDrone, MavlinkDroneConfig
from real_robot.sim.fake_crazyflie import FakeCrazyflie
from real_robot.sim.mavlink_vehicle import MavlinkVehicleConfig, MavlinkVehicleSim

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


DRIVERS = {"sim_arm": sim_arm, "mavlink_actuator": lambda: mavlink("actuator"),
           "mavlink_position": lambda: mavlink("position"), "crazyflie": crazyflie}  # fmt: skip

finite_or_not = st.one_of(st.floats(-1e6, 1e6), st.sampled_from([np.nan, np.inf, -np.inf, 1e300, -1e300, 0.0]))


def commands(dim):
    return st.one_of(
        hnp.arrays(np.float64, st.just((dim,)), elements=finite_or_not),  # right shape, any values
        hnp.arrays(np.float64, st.just((dim,)), elements=st.floats(-2, 2)),  # near the limits
        hnp.arrays(np.float64, st.sampled_from([(dim - 1,), (dim + 1,), (1, dim), (), (0,)]), elements=st.floats(-1, 1)),
        st.lists(st.floats(allow_nan=True), max_size=dim + 1), st.text(max_size=4), st.none(),
    )


@pytest.mark.parametrize("name", list(DRIVERS))
def test_nothing_outside_the_limits_reaches_the_hardware(name):
    with DRIVERS[name]() as (robot, hardware_log):
        dim, low, high = robot.action_spec.shape[0], robot.safety.low, robot.safety.high

        @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
        @given(batch=st.lists(st.tuples(commands(dim), st.floats(0, 0.5)), min_size=1, max_size=6))
        def check(batch):
            robot.clear_failsafe()
            before, passed = len(hardware_log()), 0
            for command, age in batch:
                obs = robot.get_observation()
                sent = robot.send_action(command, stamp=obs["timestamp"] - age)
                if sent is not None:
                    passed += 1
                    assert age <= robot.config.safety.max_command_age
                    assert sent.shape == (dim,) and np.isfinite(sent).all()
            deadline = time.monotonic() + 1.0
            while len(hardware_log()) < before + passed and time.monotonic() < deadline:
                time.sleep(0.005)  # UDP: let the vehicle read what was sent
            received = hardware_log()[before:]
            assert len(received) == passed  # a rejected command never reached the hardware
            for values, _ in received:
                assert np.isfinite(values).all()
                assert np.all(values >= low - 1e-5) and np.all(values <= high + 1e-5)  # float32 on the wire

        check()
