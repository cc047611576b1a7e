"""The safety layer on its own: hand-worked cases and properties over arbitrary commands; and through a robot where
the hole was between the two (the present state, the watchdog's deadline)."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from embodied.config import ConfigError
from real_robot.arms.sim_arm import SimulatedArm, SimulatedArmConfig
from real_robot.safety import SafetyConfig, SafetyLayer, Watchdog, segment_hits_box
from tests.real_robot.command_property import MATRIX

LOW, HIGH = (-1.0, -2.0, 0.0), (1.0, 2.0, 0.5)


def layer(**kw) -> SafetyLayer:
    return SafetyLayer(SafetyConfig(low=LOW, high=HIGH, **kw), shape=(3,))


def test_hand_worked_clipping_and_rejection():
    s = layer(max_step=0.25, max_command_age=0.1)
    d = s.filter([5.0, -5.0, 0.2], now=10.0)  # first command: no reference, absolute limits only
    assert d.command.tolist() == [1.0, -2.0, 0.2] and s.counts["limit"] == 1
    d = s.filter([0.0, -2.0, 0.2], now=10.01)  # 1.0 -> 0.0 is a step of 1 > 0.25: clipped to 0.75
    assert d.command.tolist() == [0.75, -2.0, 0.2] and s.counts["step"] == 1
    d = s.filter([0.5, -2.0, 0.2], now=10.02, measured=np.array([0.6, -1.9, 0.3]))  # step refers to the measurement
    assert d.command.tolist() == pytest.approx([0.5, -2.0, 0.2])
    assert s.filter([np.nan, 0, 0], now=10.03).command is None and s.counts["nonfinite"] == 1
    assert s.filter([np.inf, 0, 0], now=10.03).command is None and s.counts["nonfinite"] == 2
    assert s.filter([0, 0], now=10.03).command is None and s.counts["shape"] == 1
    assert s.filter("abc", now=10.03).command is None and s.counts["shape"] == 2
    assert s.filter([0, 0, 0.1], now=10.5, stamp=10.3).command is None and s.counts["stale"] == 1  # 200 ms old
    assert s.filter([0, 0, 0.1], now=10.5, stamp=10.45).command is not None


def test_what_is_not_real_numbers_is_rejected_not_cast():
    s = layer()
    for command in (["0.1", "0", "0"], np.array([0.1 + 1j, 0, 0]), [True, False, True], [10**400] * 3,
                    np.array(["2020-01-01"] * 3, "datetime64[D]"), [0.1, None, 0]):  # fmt: skip
        assert s.filter(command, now=1.0).command is None
    assert s.counts["shape"] == 6
    assert s.filter([0, 1, 0], now=1.0).command.tolist() == [0, 1, 0]  # integers are real numbers


def test_velocity_limit_scales_with_elapsed_time():
    s = layer(max_velocity=2.0)
    s.filter([0.0, 0.0, 0.0], now=1.0)
    assert s.filter([1.0, 0.0, 0.0], now=1.1).command[0] == pytest.approx(0.2)  # 2 rad/s * 0.1 s
    s = layer(max_velocity=1.0, max_step=0.25)
    s.filter([0.0, 0.0, 0.0], now=1.0)
    # the arm measured 0.8 rad away from its last goal: no command is within 0.25 of it and 0.1 of the goal
    assert s.filter([0.5, 0.0, 0.0], now=1.1, measured=np.array([0.8, 0.0, 0.0])).command is None


def test_latch_blocks_until_cleared():
    s = layer()
    s.latch("emergency stop")
    assert s.filter([0, 0, 0], now=1.0).command is None and s.counts["latched"] == 1
    s.clear()
    assert s.filter([0, 0, 0], now=1.0).command is not None


def test_workspace_rejects_commands_whose_end_effector_leaves_the_box():
    s = SafetyLayer(SafetyConfig(workspace_low=(-1, -1, 0), workspace_high=(1, 1, 1)), (3,), forward_kinematics=lambda q: q)
    assert s.filter([0.5, 0.5, 0.5], now=0).command is not None
    assert s.filter([0.5, 0.5, -0.1], now=0).command is None and s.counts["workspace"] == 1


def test_monitor_geofence_and_speed():
    s = SafetyLayer(SafetyConfig(geofence_low=(-1, -1, -1), geofence_high=(1, 1, 1), max_speed=2.0), (4,))
    assert s.monitor(np.zeros(3), np.zeros(3)) is None
    assert "outside the fence" in s.monitor(np.array([0, 0, 1.5]), np.zeros(3))
    assert "speed" in s.monitor(np.zeros(3), np.array([2.0, 1.0, 0.0]))
    assert "speed" in s.monitor(np.zeros(3), np.array([np.nan, 0.0, 0.0]))  # NaN telemetry fails safe


def test_bad_configs_are_named():
    with pytest.raises(ConfigError, match="safety.low has 2 entries"):
        SafetyConfig(low=(0, 0), high=(1, 1, 1))
    with pytest.raises(ConfigError, match="watchdog_periods"):
        SafetyConfig(watchdog_periods=25)


values = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(-1e30, 1e30))
commands = st.one_of(
    hnp.arrays(np.float64, st.sampled_from([(3,), (2,), (4,), (3, 1), (), (0,)]), elements=values),
    st.lists(values, max_size=5), st.text(max_size=3), st.none(),
)


@settings(max_examples=400, deadline=None)
@given(cmds=st.lists(st.tuples(commands, st.floats(0, 0.3), st.booleans()), min_size=1, max_size=20))
def test_nothing_outside_the_limits_ever_passes(cmds):
    s = layer(max_step=0.3, max_velocity=5.0, max_command_age=0.1)
    now, last = 100.0, None
    for cmd, age, measured in cmds:
        now += 0.01
        ref = np.array([0.0, 0.0, 0.25]) if measured else None
        d = s.filter(cmd, now=now, stamp=now - age, measured=ref)
        if d.command is None:
            continue
        out = d.command
        assert out.shape == (3,) and np.isfinite(out).all() and age <= 0.1
        assert np.all(out >= LOW) and np.all(out <= HIGH)
        reference = ref if ref is not None else last
        if reference is not None:
            assert np.all(np.abs(out - reference) <= 0.3 + 1e-9)
        if last is not None:
            assert np.all(np.abs(out - last) <= 5.0 * (now - last_time) + 1e-9)
        last, last_time = out, now


# ---- issue 15: geometry, stamps, tensors, the present state, the watchdog's deadline ---------------------------


def test_stamps_in_the_future_infinite_or_mistyped_are_rejected():
    s = layer(max_command_age=0.1)
    for stamp in (11.0, 10.0 + 2e-3, np.inf, -np.inf, np.nan, 10**400, "10.0", b"10", True, 1j, [10.0],
                  torch.tensor(10.0), np.datetime64(10, "s")):  # fmt: skip
        assert s.filter([0, 0, 0.1], now=10.0, stamp=stamp).command is None, stamp
    assert s.counts["stale"] == 13
    for stamp in (10.0 + 5e-4, 9.95, np.float32(9.95), 10):  # within the tolerance, fresh, numpy floats, ints
        assert s.filter([0, 0, 0.1], now=10.0, stamp=stamp).command is not None, stamp


def test_tensors_are_read_as_values_and_nothing_raises():
    s = layer()
    grad = torch.tensor([0.5, -1.0, 0.25], requires_grad=True) * 1.0  # a policy's output, with a grad_fn
    strided = torch.tensor([0.5, 9.0, -1.0, 9.0, 0.25, 9.0])[::2]  # not contiguous
    for command in (grad, strided, grad.half(), grad.bfloat16(), torch.tensor([1, -1, 0]),
                    np.ma.masked_array([0.5, -1.0, 0.25]), np.float16([0.5, -1.0, 0.25])):  # fmt: skip
        expected = np.asarray(command.detach().double() if isinstance(command, torch.Tensor) else command, float)
        assert s.filter(command, now=1.0).command.tolist() == pytest.approx(expected.tolist()), command
    for command in (torch.tensor(0.5), torch.zeros(3, dtype=torch.bool), torch.zeros(3, dtype=torch.complex64),
                    torch.zeros(3, device="meta"), torch.zeros(3).to_sparse(), torch.zeros(1, 3),
                    np.ma.masked_array([0.5, 0.0, 0.1], mask=[False, True, False]), MATRIX(3),
                    [torch.tensor(0.1, requires_grad=True)] * 3, np.longdouble([1e4000, 0, 0])):  # fmt: skip
        assert s.filter(command, now=1.0).command is None, command
    assert s.counts["shape"] == 9 and s.counts["nonfinite"] == 1


def test_a_non_unit_quaternion_is_rejected_not_clipped_into_one():
    c = SafetyConfig(low=(-1.0,) * 4 + (0.0,), high=(1.0,) * 4 + (0.9,), quaternion_slice=(0, 4),
                     max_tilt=math.radians(45))  # fmt: skip
    s = SafetyLayer(c, (5,))
    # norm 2: entry-wise clipping to [-1, 1] would have made it (1, 0, 0, 0), and MAVLink's thrust 4x
    assert s.filter([2.0, 0, 0, 0, 0.5], now=1.0).command is None and s.counts["geometry"] == 1
    assert s.filter([0.0, 0, 0, 0, 0.5], now=1.0).command is None and s.counts["geometry"] == 2
    out = s.filter([1.01, 0, 0, 0, 0.5], now=1.0).command  # within the tolerance: normalised
    assert out.tolist() == pytest.approx([1.0, 0, 0, 0, 0.5])
    tilt = math.radians(50)  # about x: body z 50 deg from world z
    assert s.filter([math.cos(tilt / 2), math.sin(tilt / 2), 0, 0, 0.5], now=1.0).command is None
    tilt = math.radians(40)
    assert s.filter([math.cos(tilt / 2), 0, math.sin(tilt / 2), 0, 0.5], now=1.0).command is not None


def test_attitude_turns_at_most_max_rotation_step_per_command():
    s = SafetyLayer(SafetyConfig(quaternion_slice=(0, 4), max_rotation_step=0.2), (5,))
    s.filter([1.0, 0, 0, 0, 0.5], now=1.0)
    yaw = math.pi / 2  # a quarter turn about z, asked in one step: slerped to 0.2 rad about z
    out = s.filter([-math.cos(yaw / 2), 0, 0, -math.sin(yaw / 2), 0.5], now=1.01).command  # -q: the same rotation
    assert out.tolist() == pytest.approx([math.cos(0.1), 0, 0, math.sin(0.1), 0.5]) and s.counts["geometry"] == 1
    with pytest.raises(ConfigError, match="max_step / max_velocity act per entry"):
        SafetyLayer(SafetyConfig(quaternion_slice=(0, 4), max_velocity=1.0), (5,))


def test_segment_hits_box_hand_worked():
    lo, hi = (0.2, -0.2, -1.0), (0.5, 0.2, 1.0)
    hits = lambda a, b: segment_hits_box(np.array(a, float), np.array(b, float), lo, hi)  # noqa: E731
    assert hits([0, 0, 0], [1, 0, 0])  # straight through: both ends outside
    assert hits([0, 0.4, 0], [0.4, 0, 0])  # cuts the corner (enters at x = 0.2, y = 0.2)
    assert not hits([0, 0.5, 0], [0.5, 0.3, 0])  # passes beside it
    assert not hits([0, 0, 0], [0.19, 0, 0]) and hits([0, 0, 0], [0.2, 0, 0])  # closed box: touching is inside
    assert not hits([0.3, 0, 1.5], [0.3, 0, 3.0])  # above it (parallel to z, outside its z slab)


def test_a_position_whose_path_crosses_a_keep_out_box_is_rejected():
    c = SafetyConfig(low=(-2.0,) * 3, high=(2.0,) * 3, max_step=1.5, position_slice=(0, 3),
                     keep_out=[[[0.2, -0.2, -2.0], [0.5, 0.2, 2.0]]])  # YAML lists  # fmt: skip
    s = SafetyLayer(c, (3,))
    here = np.zeros(3)
    assert s.filter([1.0, 0.0, 0.0], now=1.0, measured=here).command is None and s.counts["keep_out"] == 1
    assert s.filter([0.3, 0.0, 0.0], now=1.0, measured=here).command is None  # ends inside
    assert s.filter([0.0, 1.0, 0.0], now=1.0, measured=here).command is not None  # sideways: clear
    assert s.filter([1.0, 1.0, 0.0], now=1.0, measured=np.array([0.0, 1.0, 0.0])).command is not None  # around it
    # the step limit clips first, and the clipped target's path is what is checked: (1.7, 0, 0) -> (0.7, 0, 0)
    assert s.filter([1.7, 0.0, 0.0], now=1.0, measured=np.array([-0.8, 0.0, 0.0])).command is None
    assert "inside a keep-out" in s.monitor(np.array([0.3, 0.0, 0.0]), None)
    with pytest.raises(ConfigError, match="keep_out needs a position_slice"):
        SafetyLayer(SafetyConfig(keep_out=[[[0, 0, 0], [1, 1, 1]]]), (3,))


def test_a_non_finite_measurement_rejects_the_command():
    s = layer(max_step=0.25)  # a NaN bound would have clipped the command to NaN
    assert s.filter([0.5, 0.0, 0.2], now=1.0, measured=np.array([np.nan, 0.0, 0.2])).command is None
    assert s.counts["nonfinite"] == 1


def test_the_step_limit_refers_to_the_present_position_not_the_last_observation():
    """Several commands on one observation: the arm moved on (here by hand, to make it exact) since it was read."""
    arm = SimulatedArm(SimulatedArmConfig(safety=SafetyConfig(watchdog_periods=20)))
    arm.connect()
    try:
        seen = arm.get_observation()["qpos"].astype(np.float64)
        moved = seen + np.array([0.15, 0.0, 0.0, 0.0])
        state = arm.hardware.env.get_state()
        state["qpos"][0] = torch.as_tensor(moved, dtype=state["qpos"].dtype)
        arm.hardware.env.set_state(state)
        arm.hardware.goal = moved  # the servo holds there
        sent = arm.send_action(seen - np.array([0.5, 0.0, 0.0, 0.0]))  # 0.2 below the last observation: 0.35 away
        assert sent[0] == pytest.approx(moved[0] - 0.2, abs=1e-5)
        assert np.abs(arm.hardware.received[-1][1] - arm.hardware.qpos()).max() <= 0.2 + 1e-5
    finally:
        arm.disconnect()


def test_a_tensor_that_requires_grad_is_sent_not_raised():
    arm = SimulatedArm(SimulatedArmConfig(safety=SafetyConfig(watchdog_periods=20)))
    arm.connect()
    try:
        q = torch.tensor(arm.get_observation()["qpos"], requires_grad=True)
        sent = arm.send_action(q * 1.0)
        assert sent is not None and np.allclose(sent, q.detach().numpy())
    finally:
        arm.disconnect()


def test_watchdog_poll_fires_once_per_missed_deadline():
    last, fired = [10.0], []
    w = Watchdog(0.035, lambda: last[0], fired.append)  # not started: the clock is driven here
    assert w.poll(10.03) == pytest.approx(10.035) and not fired
    assert w.poll(10.036) is None and len(fired) == 1 and w.fired_at == 10.036
    assert w.poll(10.5) is None and len(fired) == 1  # once
    last[0] = 11.0  # commands resumed (after the operator cleared the failsafe)
    assert w.poll(11.01) == pytest.approx(11.035) and w.fired_at is None


def test_a_command_after_the_deadline_fails_safe_though_the_thread_slept():
    arm = SimulatedArm(SimulatedArmConfig(control_hz=50))
    arm.connect()
    try:
        arm._watchdog.stop()  # a thread that never wakes (a loaded machine, at worst)
        assert arm.send_action(arm.get_observation()["qpos"]) is not None
        n = len(arm.hardware.received)
        arm.safety.last_time -= 1.0  # the last command 1 s ago: 35 ms was the deadline
        assert arm.send_action(arm.get_observation()["qpos"]) is None
        assert arm.failsafe_kind == "watchdog" and arm.failsafe_reason.startswith("no command for")
        assert len(arm.hardware.received) == n + 1  # not the command: the hold
    finally:
        arm.disconnect()
