"""LeRobot arms and leader arms: registered and configurable everywhere; here driven on a fake LeRobot 0.6.1
(embodied/testing/fake_lerobot.py; malformed commands: test_drivers_property.py), against its real classes in
test_lerobot_real.py."""

import importlib.util
import math
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from embodied import registry
from embodied.config import ConfigError
from real_robot.arms.lerobot_arm import MOTORS
from real_robot.robot import RobotError
from real_robot.teleop.base import RELEASE, TAKEOVER
from real_robot.teleop.leader_arm import LeaderArm, LeaderArmConfig
from tests.real_robot.fake_arms import LEROBOT_ARMS, lerobot_arm, qpos

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


def wait_for_failsafe(arm, seconds: float = 2.0) -> None:
    deadline = time.monotonic() + seconds
    while arm.failsafe_reason is None and time.monotonic() < deadline:
        time.sleep(0.005)
    # the watchdog sets the reason, then writes its hold, under this lock: a test that restores the link next must not
    # race the hold's write (a hold due to fail on the cut link was written after it came back: 4 writes, not 3)
    with arm._io:
        pass


@pytest.mark.parametrize("name", LEROBOT_ARMS)
def test_watchdog_holds_the_present_position_within_two_periods(name):
    # 10 Hz: 125 ms timeout (1.25 periods), leaving 75 ms for the thread to wake and act on a loaded machine
    with lerobot_arm(name, control_hz=10, safety={"watchdog_periods": 1.25}) as (arm, bus):
        obs = arm.get_observation()
        target = obs["qpos"] + np.array([0.2, 0, 0, 0, 0, 0.1], np.float32)  # 11.5 deg: more than one read's travel
        assert arm.send_action(target, stamp=obs["timestamp"]) is not None
        commanded_at, goals = bus.goal_log[-1]
        wait_for_failsafe(arm)
        assert arm.failsafe_reason.startswith("no command for") and arm.safety.counts["watchdog"] == 1
        hold_at, hold = bus.goal_log[-1]
        assert hold_at - commanded_at <= 2 * arm.period  # the hold reached the motors within two control periods
        # the hold is where the arm was (one read of 9 deg toward the goal), not the goal it was still moving to
        assert hold["shoulder_pan"] == pytest.approx(9.0) and goals["shoulder_pan"] == pytest.approx(11.459, abs=1e-3)
        np.testing.assert_allclose(arm.get_observation()["qpos"], qpos(hold), atol=1e-6)  # and it stays there
        assert arm.send_action(target) is None and bus.goal_log[-1][0] == hold_at  # latched until cleared
        arm.clear_failsafe()
        obs = arm.get_observation()
        assert arm.send_action(obs["qpos"], stamp=obs["timestamp"]) is not None


@pytest.mark.parametrize("name", LEROBOT_ARMS)
def test_link_loss_on_write_fails_safe_and_nothing_is_written(name):
    with lerobot_arm(name, safety={"watchdog_periods": 20}) as (arm, bus):  # the watchdog out of the way
        obs = arm.get_observation()
        written = len(bus.goal_log)
        bus.link_up = False  # the cable is pulled after this reading
        assert arm.send_action(obs["qpos"], stamp=obs["timestamp"]) is None  # not "sent": the write failed
        assert arm.failsafe_reason.startswith("link lost: writing the motors failed") and arm.safety.counts["link"] == 1
        bus.link_up = True  # the cable back: commands stay blocked until the operator clears the failsafe
        obs = arm.get_observation()
        assert arm.send_action(obs["qpos"], stamp=obs["timestamp"]) is None and len(bus.goal_log) == written
        arm.clear_failsafe()
        obs = arm.get_observation()
        assert arm.send_action(obs["qpos"], stamp=obs["timestamp"]) is not None and len(bus.goal_log) == written + 1


@pytest.mark.parametrize("name", LEROBOT_ARMS)
def test_link_loss_on_read_fails_safe_and_the_watchdog_survives_it(name):
    def command() -> np.ndarray | None:
        obs = arm.get_observation()
        return arm.send_action(obs["qpos"], stamp=obs["timestamp"])

    with lerobot_arm(name, control_hz=10, safety={"watchdog_periods": 1.25}) as (arm, bus):
        hold = arm._failsafe

        def slow_hold(reason: str) -> None:  # the hold written 50 ms after the reason is set, as on a stalled host:
            # a test that restored the link before the hold was tried would see it written (wait_for_failsafe waits)
            time.sleep(0.05)
            hold(reason)

        arm._failsafe = slow_hold
        before = arm.get_observation()
        bus.link_up = False
        obs = arm.get_observation()  # the last reading, flagged: the robot fails safe (the hold cannot be written)
        assert obs["link_lost"] and np.array_equal(obs["qpos"], before["qpos"])
        assert arm.failsafe_reason == "link lost: no telemetry" and arm.safety.counts["link"] == 1
        assert arm.send_action(obs["qpos"], stamp=obs["timestamp"]) is None and bus.goal_log == []
        bus.link_up = True
        arm.clear_failsafe()
        assert command() is not None
        bus.link_up = False  # and no more commands: the watchdog's hold fails on the dead link
        wait_for_failsafe(arm)
        assert arm.failsafe_reason.startswith("no command for") and len(bus.goal_log) == 1
        bus.link_up = True
        arm.clear_failsafe()
        assert len(bus.goal_log) == 1  # that hold was tried on the cut link (the test waited for it), not written
        assert command() is not None
        wait_for_failsafe(arm)  # the watchdog thread survived the failed hold: it fires, and holds, again
        assert arm.failsafe_reason.startswith("no command for") and len(bus.goal_log) == 3
        bus.link_up = False
    assert not arm.connected  # disconnecting with the link down: LeRobot cannot turn torque off; we still let go


def test_clearing_waits_for_a_hold_still_being_written():
    """The watchdog sets the failsafe reason, then writes the hold. An operator clearing in between (the link back,
    the hold's transfer already failing) must not be re-latched by that failure afterwards (a CI race, once)."""
    with lerobot_arm("so101", safety={"watchdog_periods": 20}) as (arm, bus):
        started, finish = threading.Event(), threading.Event()
        real_write = bus.sync_write

        def slow_failing_write(data_name, values, **kw):
            if data_name == "Goal_Position" and not bus.link_up:
                started.set()
                finish.wait(2.0)  # the transfer times out after the cable is back
            return real_write(data_name, values, **kw)

        bus.sync_write = slow_failing_write
        bus.link_up = False
        holder = threading.Thread(target=arm.failsafe, args=("no command for 250.0 ms", "watchdog"))
        holder.start()
        assert started.wait(2.0) and arm.failsafe_reason.startswith("no command for")
        bus.link_up = True
        threading.Timer(0.05, lambda: (setattr(bus, "link_up", False), finish.set())).start()  # the write fails
        arm.clear_failsafe()  # waits for the failed hold, then clears
        holder.join(2.0)
        bus.link_up = True
        assert finish.is_set() and arm.failsafe_reason is None and arm.safety.counts["link"] == 0  # not re-latched
        obs = arm.get_observation()
        assert arm.send_action(obs["qpos"], stamp=obs["timestamp"]) is not None


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
