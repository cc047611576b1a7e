"""Helpers shared by the LeRobot arm tests: our drivers (so100, so101, koch) on a calibrated fake arm. In .venv: the
FAKE LeRobot 0.6.1 of embodied/testing/fake_lerobot.py; in the LeRobot environment (lerobot_arms_side.py): LeRobot's
real classes over fake motor buses (embodied/testing/fake_lerobot_bus.py)."""

import contextlib
import importlib.util
import math
import tempfile

import numpy as np

from embodied import registry
from real_robot.arms.lerobot_arm import MOTORS
from embodied.testing.fake_lerobot import fake_lerobot, save_calibration

LEROBOT_ARMS = ("so100", "so101", "koch")
CLASSES = {"so100": ("lerobot.robots.so_follower", "SO100Follower"),
           "so101": ("lerobot.robots.so_follower", "SO101Follower"),
           "koch": ("lerobot.robots.koch_follower", "KochFollower")}  # fmt: skip


def fake_arms():
    """LeRobot's real classes over fake buses where LeRobot is installed, else the fake LeRobot."""
    if importlib.util.find_spec("lerobot") is None:
        return fake_lerobot()
    from embodied.testing.fake_lerobot_bus import fake_motor_buses  # needs LeRobot

    return fake_motor_buses()


@contextlib.contextmanager
def lerobot_arm(name: str, **config):
    """Driver `name` from the registry, connected to a calibrated fake arm; yields (arm, its ServoBus)."""
    with tempfile.TemporaryDirectory() as folder, fake_arms():
        save_calibration(*CLASSES[name], folder, "follower")
        arm = registry.build("robot", name, {"port": f"fake-{name}", "calibration_dir": folder, **config})
        arm.connect()
        try:
            yield arm, arm.arm.bus
        finally:
            arm.disconnect()


def qpos(goals: dict[str, float]) -> np.ndarray:
    """A Goal_Position write (degrees; gripper percent) in the driver's units (rad; gripper fraction)."""
    return np.array([math.radians(goals[m]) for m in MOTORS[:5]] + [goals["gripper"] / 100.0])


def goals_written(bus) -> list[tuple[np.ndarray, str]]:
    """What reached the motors, as test_drivers_property's hardware logs list it."""
    return [(qpos(goals), "goal") for _, goals in bus.goal_log]
