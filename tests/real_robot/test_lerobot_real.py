"""Our LeRobot drivers against LeRobot 0.6.1's REAL classes: SO101Follower / SO100Follower / KochFollower under
`so101` / `so100` / `koch`, SO101Leader / KochLeader under `so101_leader` / `koch_leader`, with only the motor
buses faked (embodied/testing/fake_lerobot_bus.py); and the fake LeRobot that .venv's tests drive
(embodied/testing/fake_lerobot.py) checked against the real API. The scenario runs once in the separate LeRobot
environment (tests/real_robot/lerobot_arms_side.py, our package on PYTHONPATH: it needs only torch, numpy and
hypothesis there); these tests judge what it recorded. Slow: the first run builds the environment (~3.5 min)."""

import json
import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from real_robot.arms.lerobot_arm import MOTORS
from tests.real_robot.fake_arms import LEROBOT_ARMS

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
SIDE = REPO / "tests" / "real_robot" / "lerobot_arms_side.py"
MAX_STEP = 0.2  # the arms' default safety.max_step, rad (real_robot/arms/lerobot_arm.py)
SPEED = math.radians(9.0)  # the fake motors' speed per read (embodied/testing/fake_lerobot_bus.py)


@pytest.fixture(scope="module")
def recorded(lerobot_python, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lerobot_arms")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_LEROBOT_HOME": str(tmp / "home"), "HF_HUB_OFFLINE": "1"}
    run = subprocess.run([lerobot_python, str(SIDE), str(tmp / "calibration"), str(tmp / "out.json")],
                         capture_output=True, text=True, timeout=600, env=env, cwd=tmp)  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads((tmp / "out.json").read_text())


@pytest.mark.parametrize("name, lerobot_class, bus", [("so101", "SOFollower", "FakeFeetechBus"),
                                                      ("so100", "SOFollower", "FakeFeetechBus"),
                                                      ("koch", "KochFollower", "FakeDynamixelBus")])  # fmt: skip
def test_follower_through_our_driver(recorded, name, lerobot_class, bus):
    rec = recorded[name]
    # connect: LeRobot's own configure() ran (registers written, torque on)
    assert (rec["lerobot_class"], rec["bus"]) == (lerobot_class, bus)
    assert rec["torque"] == [1] * 6 and {"Operating_Mode", "Return_Delay_Time"} <= set(rec["written"])
    # observation: degrees -> rad, gripper percent -> fraction (positions set: pan 10 deg, elbow -20, gripper 30)
    np.testing.assert_allclose(rec["qpos"], [math.radians(10), 0, math.radians(-20), 0, 0, 0.3], atol=1e-6)
    # send_action through the safety layer: shoulder_pan asked +0.5 rad, clipped to max_step; the rest passes
    qpos, target, sent = (np.array(rec[k]) for k in ("qpos", "target", "sent"))
    np.testing.assert_allclose(sent, np.r_[qpos[0] + MAX_STEP, target[1:]], atol=1e-5)
    goals = [rec["goals"][m] for m in MOTORS]  # what LeRobot wrote to Goal_Position: degrees and percent
    np.testing.assert_allclose(goals, np.r_[np.degrees(sent[:5]), 100 * sent[5]], atol=1e-3)
    # the motors move toward the goal and reach it
    pan = [q[0] for q in rec["trajectory"]]
    assert pan[0] == pytest.approx(qpos[0] + SPEED, abs=1e-5) and pan[-1] == pytest.approx(sent[0], abs=1e-5)
    # no command for watchdog_periods: the failsafe holds where the arm is (not where it was commanded)
    assert rec["failsafe_reason"].startswith("no command for")
    start = rec["commanded_goals"]["shoulder_pan"] - math.degrees(MAX_STEP)  # where it was when commanded, deg
    hold = rec["hold_goals"]["shoulder_pan"]
    assert hold == pytest.approx(start + math.degrees(SPEED), abs=1e-3)  # moved for one read, then held there
    assert all(q == rec["after_failsafe"][0] for q in rec["after_failsafe"])
    assert rec["after_failsafe"][0][0] == pytest.approx(math.radians(hold), abs=1e-6)
    assert rec["sent_after_failsafe"] is None  # latched until clear_failsafe()
    # disconnect: LeRobot disables torque (disable_torque_on_disconnect) and closes the bus
    assert rec["connected_after"] is False and rec["torque_after"] == [0] * 6


def test_uncalibrated_arm_is_one_clear_error(recorded):
    assert "is not calibrated: run `lerobot-calibrate --robot.type=so101_follower --robot.port=fake-new " \
           "--robot.id=never_calibrated`" in recorded["uncalibrated"]  # fmt: skip


def test_so101_leader_drives_the_follower(recorded):
    rec = recorded["leader"]
    assert (rec["lerobot_class"], rec["bus"]) == ("SOLeader", "FakeFeetechBus")
    assert rec["torque"] == [0] * 6  # LeRobot's configure() leaves a leader limp for the hand
    pose = np.r_[np.radians([10, -20, 30, 0, 45]), 0.4]  # the pose set on its motors, in the follower's layout
    np.testing.assert_allclose(rec["read"], pose, atol=1e-6)
    # the follower (5 deg / 5 % away) is commanded exactly there: LeRobot's follower goals = the leader's readings
    np.testing.assert_allclose(rec["follower_sent"], pose, atol=1e-6)
    goals = [rec["follower_goals"][m] for m in MOTORS]
    np.testing.assert_allclose(goals, [10, -20, 30, 0, 45, 40], atol=1e-3)
    assert rec["connected_after"] is False


def test_leader_takeover_and_release(recorded):
    steps = recorded["leader"]["steps"]
    notes = [s[0] for s in steps]
    active = [s[1] is not None for s in steps]
    events = [s[2] for s in steps]
    assert notes[:4] == ["rest", "small move", "takeover", "operator moves"]
    assert active[:2] == [False, False] and events[:2] == [[], []]  # 3 deg from rest: the policy keeps control
    assert active[2] and events[2] == ["takeover"]  # 8 deg = 0.14 rad > takeover_threshold 0.1
    np.testing.assert_allclose(steps[2][1][0], math.radians(18), atol=1e-6)  # the action is the leader's pose
    assert steps[3][1][5] == pytest.approx(0.45, abs=1e-6)  # the operator opens the gripper
    # release_steps=5 reads within still_threshold (the read where it stopped + 4 held) hand control back
    assert active[4:7] == [True] * 3 and events[7] == ["release"] and not active[7] and not active[8]
    assert notes[9:11] == ["small move", "takeover"] and events[9:11] == [[], ["takeover"]]  # from the new rest
    assert notes[11] == "new episode" and not active[11] and events[11] == []  # an episode starts with the policy


def test_koch_leader_maps_range_to_angles(recorded):
    rec = recorded["koch_leader"]
    assert rec["torque"] == [0] * 5 + [1] and rec["goals"] == {"gripper": 50.0}  # LeRobot's spring-back trigger
    # -100..100 spans the calibrated range [1024, 3072] (wrist_roll [0, 4095]): 50 -> a quarter of 2048 ticks
    # from the middle = 512 * 360 / 4095 deg; LeRobot's DEGREES convention
    quarter = math.radians(512 * 360 / 4095)
    np.testing.assert_allclose(rec["read"], [quarter, -quarter, 2 * quarter, 0, math.radians(18), 0.5], atol=1e-6)


@pytest.mark.parametrize("name", LEROBOT_ARMS)
def test_malformed_commands_never_reach_the_real_classes_motors(recorded, name):
    """tests/real_robot/command_property.py (as test_drivers_property.py on the fake LeRobot) on the real classes."""
    assert recorded["command_property"][name] == "ok", recorded["command_property"][name]


@pytest.mark.parametrize("name", LEROBOT_ARMS)
def test_link_loss_through_the_real_classes_fails_safe(recorded, name):
    rec = recorded["link_loss"][name]
    assert rec["sent"] is None and rec["write_failsafe"].startswith("link lost: writing the motors failed")
    assert rec["link_lost"] and rec["read_failsafe"] == "link lost: no telemetry" and rec["links"] == 2
    assert rec["goal_writes"] == 0 and rec["connected_after"] is False


def test_the_fake_lerobot_follows_the_real_api(recorded):
    assert recorded["fake_api"] == []
