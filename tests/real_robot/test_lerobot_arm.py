"""LeRobot arms: registered and configurable everywhere; driven only where LeRobot is importable."""

import importlib.util

import pytest

from embodied import registry
from real_robot.robot import RobotError

HAS_LEROBOT = importlib.util.find_spec("lerobot") is not None


@pytest.mark.parametrize("name", ["so100", "so101", "koch"])
def test_registered_with_safety_defaults(name):
    arm = registry.build("robot", name, {"port": "/dev/null", "safety": {"max_step": 0.1}})
    assert arm.config.safety.max_step == 0.1 and arm.safety.high[-1] == 1.0  # the other limits kept
    assert arm.action_spec.shape == (6,)


@pytest.mark.skipif(HAS_LEROBOT, reason="LeRobot is installed: the missing-package message cannot be shown")
def test_missing_lerobot_is_one_clear_error():
    with pytest.raises(RobotError, match="needs LeRobot .*own environment"):
        registry.build("robot", "so101", {"port": "/dev/null"}).connect()


@pytest.mark.hardware
@pytest.mark.skipif(not HAS_LEROBOT, reason="needs LeRobot 0.4 (its own environment, see shared/ENVIRONMENT.md)")
def test_so101_on_real_hardware():
    """With an SO-101 on /dev/ttyACM0: read, hold the present position, disconnect."""
    arm = registry.build("robot", "so101", {"port": "/dev/ttyACM0"})
    arm.connect()
    try:
        obs = arm.get_observation()
        assert arm.send_action(obs["qpos"], stamp=obs["timestamp"]) is not None
    finally:
        arm.disconnect()
