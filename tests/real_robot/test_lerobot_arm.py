"""LeRobot arms and leader arms: registered and configurable everywhere; driven only where LeRobot is importable
(against its real classes: test_lerobot_real.py)."""

import importlib.util
import math
from types import SimpleNamespace

import numpy as np
import pytest

from embodied import registry
from embodied.config import ConfigError
from real_robot.arms.lerobot_arm import MOTORS
from real_robot.robot import RobotError
from real_robot.teleop.base import RELEASE, TAKEOVER
from real_robot.teleop.leader_arm import LeaderArm, LeaderArmConfig

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
@pytest.mark.skipif(not HAS_LEROBOT, reason="needs LeRobot 0.6.1 (its own environment, see shared/ENVIRONMENT.md)")
def test_so101_on_real_hardware():
    """With an SO-101 on /dev/ttyACM0: read, hold the present position, disconnect."""
    arm = registry.build("robot", "so101", {"port": "/dev/ttyACM0"})
    arm.connect()
    try:
        obs = arm.get_observation()
        assert arm.send_action(obs["qpos"], stamp=obs["timestamp"]) is not None
    finally:
        arm.disconnect()


# ---- leader arms (teleop) ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["so100_leader", "so101_leader", "koch_leader"])
def test_leader_registered(name):
    leader = registry.build("teleop", name, {"port": "/dev/null", "takeover_threshold": 0.2})
    assert leader.config.action_dim == 6 and leader.config.takeover_threshold == 0.2


def test_leader_config_validation():
    with pytest.raises(ConfigError, match="6-dim qpos"):
        LeaderArmConfig(action_dim=4)
    with pytest.raises(ConfigError, match="still_threshold"):
        LeaderArmConfig(still_threshold=0.2, takeover_threshold=0.1)
    with pytest.raises(ConfigError, match="scale does not apply"):
        LeaderArmConfig(scale=(1.0,) * 6)


@pytest.mark.skipif(HAS_LEROBOT, reason="LeRobot is installed: the missing-package message cannot be shown")
def test_leader_missing_lerobot_is_one_clear_error():
    with pytest.raises(RobotError, match="SO101LeaderArm needs LeRobot .*own environment"):
        registry.build("teleop", "so101_leader", {"port": "/dev/null"}).connect()


def test_leader_takeover_rule_on_a_stub():
    """The rule alone (the real SO101Leader: tests/real_robot/test_lerobot_real.py): degrees in, rad out."""
    degrees = SimpleNamespace(norm_mode=SimpleNamespace(value="degrees"))
    percent = SimpleNamespace(norm_mode=SimpleNamespace(value="range_0_100"))
    pose = dict.fromkeys(MOTORS, 0.0)
    leader = LeaderArm(LeaderArmConfig(release_steps=3))
    motors = {**dict.fromkeys(MOTORS[:5], degrees), "gripper": percent}
    leader.device = SimpleNamespace(bus=SimpleNamespace(motors=motors),
                                    get_action=lambda: {f"{m}.pos": v for m, v in pose.items()})  # fmt: skip
    assert leader.get_action() == (None, [])  # the rest pose
    pose["wrist_flex"] = 5.0  # 0.087 rad < 0.1
    assert leader.get_action() == (None, [])
    pose["gripper"] = 11.0  # a fraction 0.11 from rest
    action, events = leader.get_action()
    assert events == [TAKEOVER]
    np.testing.assert_allclose(action, [0, 0, 0, math.radians(5), 0, 0.11], atol=1e-6)
    assert leader.get_action()[1] == [] and leader.get_action() == (None, [RELEASE])  # 3 reads still
    pose["wrist_flex"] = 0.0  # 5 deg from the new rest: below the threshold
    assert leader.get_action() == (None, [])
