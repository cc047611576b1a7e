"""Teleop devices: axis mapping, HID report parsers on byte strings, the keyboard through a pty."""

import os
import pty
import select
import struct
from types import SimpleNamespace

import numpy as np
import pytest

from embodied.config import ConfigError
from embodied.registry import MissingExtraError
from real_robot.teleop.base import FAILURE, QUIT, RELEASE, REWIND, SUCCESS, TAKEOVER, AxisMapping, TeleopConfig
from real_robot.teleop.hid_devices import (GamepadConfig, GamepadTeleop, SpaceMouseConfig, SpaceMouseTeleop,
                                           parse_gamepad, parse_spacemouse)  # fmt: skip
from real_robot.teleop.keyboard import KeyboardConfig, KeyboardTeleop


def test_axis_mapping_deadzone_scale_clip():
    m = AxisMapping(TeleopConfig(action_dim=3, deadzone=0.2, scale=(1.0, 0.5, 2.0)))
    out = m(np.array([0.1, -1.0, 0.6]))
    # 0.1 inside the deadzone -> 0; -1 -> -1 * 0.5; (0.6 - 0.2) / 0.8 = 0.5, * 2 = 1.0 (clipped at 1)
    np.testing.assert_allclose(out, [0.0, -0.5, 1.0], atol=1e-6)
    assert m(np.array([0.2 + 1e-6, 0, 0]))[0] == pytest.approx(0.0, abs=1e-5)  # continuous at the edge
    with pytest.raises(ValueError, match="axes have shape"):
        m(np.zeros(2))
    with pytest.raises(ConfigError, match="scale has 2 entries"):
        TeleopConfig(action_dim=3, scale=(1.0, 1.0))


def test_spacemouse_reports():
    state = {"translation": np.zeros(3), "rotation": np.zeros(3), "buttons": 0}
    parse_spacemouse(struct.pack("<Bhhh", 1, 350, -175, 0), state)
    parse_spacemouse(struct.pack("<Bhhh", 2, 0, 0, -350), state)
    np.testing.assert_array_equal(state["translation"], [350, -175, 0])
    np.testing.assert_array_equal(state["rotation"], [0, 0, -350])
    parse_spacemouse(struct.pack("<B6h", 1, 1, 2, 3, 4, 5, 6), state)  # newer models: all six in report 1
    np.testing.assert_array_equal(state["rotation"], [4, 5, 6])
    parse_spacemouse(bytes([3, 0b10, 0]), state)
    assert state["buttons"] == 2
    with pytest.raises(ValueError, match="too short"):
        parse_spacemouse(bytes([2, 1, 0]), state)

    dev = SpaceMouseTeleop(SpaceMouseConfig(action_dim=3, axes=(0, 1, 5), deadzone=0.1))
    dev.feed(struct.pack("<Bhhh", 1, 10, 0, 0))  # within the deadzone: the policy keeps control
    assert dev.decide() == (None, [])
    dev.feed(struct.pack("<Bhhh", 1, 350, -350, 0))
    dev.feed(struct.pack("<Bhhh", 2, 0, 0, 175))
    action, events = dev.decide()
    assert events == [TAKEOVER]
    np.testing.assert_allclose(action, [1.0, -1.0, (0.5 - 0.1) / 0.9], atol=1e-5)
    dev.feed(bytes([3, 2, 0]))
    assert dev.decide()[1] == [SUCCESS]


def test_gamepad_reports():
    report = bytes([0, 255, 0, 128, 128, 0x10, 0])  # left stick right and up, button 0
    sticks, buttons = parse_gamepad(report)
    np.testing.assert_allclose(sticks, [1.0, 1.0, 0.0, 0.0], atol=0.01)
    assert buttons == 1
    with pytest.raises(ValueError, match="too short"):
        parse_gamepad(bytes(3))
    dev = GamepadTeleop(GamepadConfig(action_dim=2, axes=(0, 1)))
    dev.feed(bytes([0, 255, 0, 128, 128, 0, 0x01]))  # byte 6 bit 0 = button 4 = takeover
    action, events = dev.decide()
    assert events == [TAKEOVER] and action == pytest.approx([1.0, 1.0], abs=0.01)
    dev.feed(bytes([0, 128, 128, 128, 128, 0x80, 0]))  # release button 4, press button 3 = success
    assert dev.decide()[1] == [SUCCESS]


def test_hid_devices_need_hidapi():
    try:
        import hid  # noqa: F401
    except ImportError:
        with pytest.raises(MissingExtraError, match="hidapi"):
            SpaceMouseTeleop().connect()
    else:
        pytest.skip("hidapi is installed")


def test_keyboard_in_a_pseudo_terminal(monkeypatch):
    """Keys typed into a real pseudo-terminal; the keyboard's clock is driven by the test (an axis stays pressed for
    hold_s after its last character), and each read waits until the terminal has passed the characters on."""
    from real_robot.teleop import keyboard

    now = [100.0]
    monkeypatch.setattr(keyboard, "time", SimpleNamespace(monotonic=lambda: now[0]))
    leader, follower = pty.openpty()

    def typed(chars: bytes):
        os.write(leader, chars)
        assert select.select([follower], [], [], 10)[0]  # the line discipline hands them on asynchronously
        return dev.get_action()

    dev = KeyboardTeleop(KeyboardConfig(action_dim=4, fd=follower, hold_s=0.2, deadzone=0.0))
    with dev:
        assert dev._saved is not None  # raw mode on a real terminal device
        assert dev.get_action() == (None, [])
        action, events = typed(b"a")  # joint 0 plus: moving an axis takes over
        assert events == [TAKEOVER] and action.tolist() == [1.0, 0.0, 0.0, 0.0]
        now[0] += 0.1
        action, events = typed(b"xynb")
        assert events == [SUCCESS, FAILURE, REWIND] and action.tolist() == [1.0, -1.0, 0.0, 0.0]
        now[0] += 0.25  # keys released: the operator holds still, still in control
        assert dev.get_action()[0].tolist() == [0.0] * 4
        assert typed(b" q") == (None, [RELEASE, QUIT])
    os.close(leader)
    os.close(follower)


def test_keyboard_config_errors():
    with pytest.raises(ConfigError, match="distinct"):
        KeyboardConfig(axis_keys=("az", "sx", "dc", "fy"))
    with pytest.raises(ConfigError, match="4 pairs"):
        KeyboardConfig(action_dim=2)
