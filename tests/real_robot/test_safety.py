"""The safety layer on its own: hand-worked cases and properties over arbitrary commands."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from embodied.config import ConfigError
from real_robot.safety import SafetyConfig, SafetyLayer

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
