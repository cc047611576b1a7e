"""The simulated arm behind the robot interface: real-time servos, safety, watchdog hold, emergency stop."""

import time

import numpy as np
import pytest
import torch

from embodied import registry
from real_robot.arms.sim_arm import JOINT_LOWER, JOINT_UPPER, SimulatedArm, SimulatedArmConfig
from real_robot.robot import Robot, RobotError
from real_robot.robot_env import RobotEnv, RobotEnvConfig
from real_robot.safety import SafetyConfig


def test_drivers_cannot_bypass_the_safety_layer():
    with pytest.raises(TypeError, match="overrides \\['send_action'\\]"):
        type("Sneaky", (Robot,), {"send_action": lambda self, a: None})
    with pytest.raises(RobotError, match="not connected"):
        SimulatedArm().send_action(np.zeros(4))


def test_servo_tracks_a_goal_in_real_time_and_steps_are_limited():
    arm = registry.build("robot", "sim_arm", {"control_hz": 20, "safety": {"watchdog_periods": 10}})  # slack for a loaded CI box
    env = RobotEnv(arm, RobotEnvConfig(control_hz=20, max_episode_steps=1000))
    env.reset()
    start = env.robot_obs["qpos"].copy()
    goal = start + np.array([0.4, 0.2, -0.2, 0.3])
    t0 = time.monotonic()
    sent = []
    for _ in range(16):  # 0.8 s
        obs, *_ , info = env.step(torch.tensor(goal, dtype=torch.float32).unsqueeze(0))
        sent.append(info["sent"])
    elapsed = time.monotonic() - t0
    # every command was clipped to 0.2 rad from the measured position, then the goal was reached
    steps = [np.abs(s - q).max() for s, q in zip(sent, [start] + [None] * 15) if q is not None]
    assert steps[0] <= 0.2 + 1e-6 and arm.safety.counts["step"] >= 1
    assert np.abs(env.robot_obs["qpos"] - goal).max() < 0.02
    assert 0.7 < elapsed < 1.6  # ran at (about) the control rate
    t = env.timing()
    assert t["achieved_hz"] == pytest.approx(20, rel=0.25)
    env.close()


def test_watchdog_holds_within_two_periods_and_estop_latches():
    # 10 Hz: 125 ms timeout (1.25 periods), leaving 75 ms for the thread to wake and act on a loaded machine
    arm = SimulatedArm(SimulatedArmConfig(control_hz=10, safety=SafetyConfig(watchdog_periods=1.25)))
    arm.connect()
    try:
        q = arm.get_observation()["qpos"]
        for i in range(5):
            obs = arm.get_observation()
            arm.send_action(q + 0.05 * (i + 1) * np.array([1, 0, 0, 0]), stamp=obs["timestamp"])
            time.sleep(0.02)  # well inside the 75 ms timeout, also on a loaded machine
        last_command_time = arm.hardware.received[-1][0]
        time.sleep(0.3)
        hold_time, hold = arm.hardware.received[-1]
        assert arm.failsafe_reason.startswith("no command for")
        assert hold_time - last_command_time <= 2 * arm.period  # the watchdog acted within two control periods
        assert np.allclose(hold, arm.hardware.qpos(), atol=0.05)  # a hold at the present position
        assert arm.send_action(q) is None  # latched until the operator clears it
        arm.clear_failsafe()
        assert arm.send_action(arm.get_observation()["qpos"]) is not None
        arm.emergency_stop()
        n = len(arm.hardware.received)
        assert arm.send_action(q) is None and len(arm.hardware.received) == n
        assert arm.safety.counts["estop"] == 1
    finally:
        arm.disconnect()


def test_the_watchdog_arms_on_the_first_command_tried_even_when_none_passes():
    """A loop whose every command is rejected (a policy that does not fit the robot) writes nothing: the watchdog
    counts from its first try and holds the arm, instead of never arming (it used to count from a passed command)."""
    arm = SimulatedArm(SimulatedArmConfig(control_hz=20))
    arm.connect()
    try:
        wrong = np.zeros(7)  # a 7-joint command for the 4-joint arm: rejected every time
        assert arm.send_action(wrong, stamp=arm.get_observation()["timestamp"]) is None
        deadline = time.monotonic() + 10.0  # the watchdog's timeout is 87.5 ms; 10 s only bounds a failing test
        while arm.failsafe_reason is None and time.monotonic() < deadline:
            arm.send_action(wrong, stamp=arm.get_observation()["timestamp"])
            time.sleep(0.01)
        assert arm.failsafe_kind == "watchdog" and arm.safety.counts["shape"] >= 1
        with arm._io:  # the watchdog sets the reason, then writes its hold, under this lock
            assert len(arm.hardware.received) == 1  # the hold, nothing else
        arm.resume()  # a clear re-arms from the next try, not from the old one
        assert arm.failsafe_reason is None and arm._last_command_time() is None
    finally:
        arm.disconnect()


def test_limits_are_the_joint_limits():
    arm = SimulatedArm()
    assert arm.safety.low.tolist() == list(JOINT_LOWER) and arm.safety.high.tolist() == list(JOINT_UPPER)


def test_resume_acknowledges_only_the_watchdogs_hold():
    """After a pause of the caller's own: the watchdog's hold is cleared and the watchdog waits for the next
    command (it cannot fire in between); an emergency stop or a workspace breach stays latched."""
    arm = SimulatedArm(SimulatedArmConfig(control_hz=10, safety=SafetyConfig(watchdog_periods=1.25)))
    arm.connect()
    try:
        arm.send_action(arm.get_observation()["qpos"])
        time.sleep(0.3)  # the pause: the watchdog holds
        assert arm.failsafe_kind == "watchdog"
        arm.resume()
        assert arm.failsafe_reason is None
        time.sleep(0.3)  # no command yet: nothing to go stale
        assert arm.failsafe_reason is None and arm.send_action(arm.get_observation()["qpos"]) is not None
        for latch in (arm.emergency_stop, lambda: arm.failsafe("workspace breach", "workspace")):
            latch()
            reason = arm.failsafe_reason
            arm.resume()
            assert arm.failsafe_reason == reason and arm.send_action(arm.get_observation()["qpos"]) is None
            arm.clear_failsafe()
    finally:
        arm.disconnect()
