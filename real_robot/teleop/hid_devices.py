"""Gamepad and 3D SpaceMouse through hidapi (`pip install hidapi`, module `hid`; imported on connect).

HID input reports are parsed here from their bytes, so the parsers are tested without a device:

- SpaceMouse (3Dconnexion, vendor 0x256f; older 0x046d): report 1 = translation x, y, z and
  report 2 = rotation rx, ry, rz, each a little-endian int16 triple (`<Bhhh`, 7 bytes); newer
  wireless models send all six axes in report 1 (`<Bhhhhhh`, 13 bytes); report 3 = buttons
  (bit 0 left, bit 1 right). Full scale is about +-350 counts (spacenavd and pyspacemouse both
  scale by 350).
- Gamepad (Logitech F310/F710 in DirectInput mode, the layout LeRobot's HID gamepad reads):
  byte 1 left x, 2 left y, 3 right x, 4 right y (uint8, 128 = centre, y grows downward),
  byte 5 low nibble = d-pad hat, high nibble + byte 6 = buttons.

Axes map onto the action with `TeleopConfig`'s deadzone and scale. A SpaceMouse left button
toggles takeover and the right one labels success; any deflection past the deadzone also takes
over. Gamepad: button `takeover_button` toggles takeover, `success_button` / `failure_button` /
`rewind_button` send their events.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from embodied.config import check
from embodied.registry import MissingExtraError
from real_robot.teleop.base import FAILURE, RELEASE, REWIND, SUCCESS, TAKEOVER, Teleop, TeleopConfig

SPACEMOUSE_FULL_SCALE = 350.0  # counts at full deflection (spacenavd, pyspacemouse)
SPACEMOUSE_VENDORS = (0x256F, 0x046D)  # 3Dconnexion, Logitech (older SpaceNavigator)
GAMEPAD_CENTRE = 128.0


def import_hid():
    try:
        import hid
    except ImportError as err:
        raise MissingExtraError("teleop devices over USB HID need the optional package 'hidapi' (module 'hid'): "
                                "pip install -e '.[teleop]'  (or pip install hidapi)") from err  # fmt: skip
    return hid


def parse_spacemouse(report: bytes, state: dict) -> None:
    """Update `state` ("translation" [3], "rotation" [3] int counts, "buttons" int) from one report."""
    if not report:
        raise ValueError("empty SpaceMouse report")
    rid = report[0]
    if rid == 1 and len(report) >= 13:
        values = struct.unpack_from("<6h", report, 1)
        state["translation"], state["rotation"] = np.array(values[:3]), np.array(values[3:])
    elif rid in (1, 2) and len(report) >= 7:
        values = np.array(struct.unpack_from("<3h", report, 1))
        state["translation" if rid == 1 else "rotation"] = values
    elif rid == 3 and len(report) >= 2:
        state["buttons"] = int.from_bytes(report[1:3] if len(report) >= 3 else report[1:2], "little")
    elif rid not in (1, 2, 3):
        return  # other reports (battery, LEDs) carry nothing we use
    else:
        raise ValueError(f"SpaceMouse report {rid} of {len(report)} bytes is too short: {report.hex()}")


def parse_gamepad(report: bytes) -> tuple[np.ndarray, int]:
    """(sticks [4] in [-1, 1]: left x, left y up, right x, right y up; buttons bitmask)."""
    if len(report) < 7:
        raise ValueError(f"gamepad report of {len(report)} bytes is too short (need 7): {bytes(report).hex()}")
    sticks = (np.frombuffer(bytes(report[1:5]), np.uint8).astype(np.float32) - GAMEPAD_CENTRE) / 127.0
    sticks[[1, 3]] *= -1.0  # HID y grows downward; up is positive here
    buttons = (report[5] >> 4) | (report[6] << 4)
    return np.clip(sticks, -1.0, 1.0), buttons


@dataclass(frozen=True)
class SpaceMouseConfig(TeleopConfig):
    action_dim: int = 6
    axes: tuple[int, ...] = (0, 1, 2, 3, 4, 5)  # which of tx, ty, tz, rx, ry, rz drives each action dim
    vendor_id: int = 0  # 0 = the first device of a known SpaceMouse vendor
    product_id: int = 0

    def __post_init__(self):
        super().__post_init__()
        check(len(self.axes) == self.action_dim and all(0 <= a < 6 for a in self.axes),
              f"teleop.axes={self.axes} needs {self.action_dim} entries in 0..5")  # fmt: skip


class SpaceMouseTeleop(Teleop):
    Config = SpaceMouseConfig

    def __init__(self, config: SpaceMouseConfig = SpaceMouseConfig()):
        super().__init__(config)
        self.device, self.active, self._buttons = None, False, 0
        self.state = {"translation": np.zeros(3), "rotation": np.zeros(3), "buttons": 0}

    def connect(self) -> None:
        hid = import_hid()
        cfg = self.config
        found = [d for d in hid.enumerate() if (d["vendor_id"] == cfg.vendor_id and d["product_id"] == cfg.product_id)
                 or (not cfg.vendor_id and d["vendor_id"] in SPACEMOUSE_VENDORS)]  # fmt: skip
        if not found:
            raise RuntimeError("no SpaceMouse found over HID (check the USB cable / receiver and udev permissions)")
        self.device = hid.device()
        self.device.open_path(found[0]["path"])
        self.device.set_nonblocking(True)
        super().connect()

    def disconnect(self) -> None:
        if self.device is not None:
            self.device.close()
            self.device = None
        super().disconnect()

    def feed(self, report: bytes) -> None:
        parse_spacemouse(bytes(report), self.state)

    def get_action(self) -> tuple[np.ndarray | None, list[str]]:
        while self.device is not None:
            report = self.device.read(64)
            if not report:
                break
            self.feed(report)
        return self.decide()

    def decide(self) -> tuple[np.ndarray | None, list[str]]:
        """The action and events for the current parsed state."""
        events, buttons = [], int(self.state["buttons"])
        pressed = buttons & ~self._buttons
        self._buttons = buttons
        if pressed & 1:
            self.active = not self.active
            events.append(TAKEOVER if self.active else RELEASE)
        if pressed & 2:
            events.append(SUCCESS)
        six = np.concatenate([self.state["translation"], self.state["rotation"]]) / SPACEMOUSE_FULL_SCALE
        action = self.mapping(np.clip(six[list(self.config.axes)], -1.0, 1.0))
        if not self.active and np.any(action != 0):
            self.active = True
            events.append(TAKEOVER)
        return (action if self.active else None), events


@dataclass(frozen=True)
class GamepadConfig(TeleopConfig):
    axes: tuple[int, ...] = (0, 1, 2, 3)  # which stick axis (lx, ly, rx, ry) drives each action dim
    takeover_button: int = 4  # bit of the button mask (F310 DirectInput: 0 X, 1 A, 2 B, 3 Y, 4 LB, 5 RB)
    success_button: int = 3
    failure_button: int = 2
    rewind_button: int = 0
    vendor_id: int = 0x046D  # Logitech
    product_id: int = 0xC216  # F310 in DirectInput mode

    def __post_init__(self):
        super().__post_init__()
        check(len(self.axes) == self.action_dim and all(0 <= a < 4 for a in self.axes),
              f"teleop.axes={self.axes} needs {self.action_dim} entries in 0..3")  # fmt: skip


class GamepadTeleop(Teleop):
    Config = GamepadConfig

    def __init__(self, config: GamepadConfig = GamepadConfig()):
        super().__init__(config)
        self.device, self.active, self._buttons = None, False, 0
        self.sticks, self.buttons = np.zeros(4, np.float32), 0

    def connect(self) -> None:
        hid = import_hid()
        self.device = hid.device()
        try:
            self.device.open(self.config.vendor_id, self.config.product_id)
        except OSError as err:
            raise RuntimeError(f"no gamepad {self.config.vendor_id:04x}:{self.config.product_id:04x} over HID: {err}") from err
        self.device.set_nonblocking(True)
        super().connect()

    def disconnect(self) -> None:
        if self.device is not None:
            self.device.close()
            self.device = None
        super().disconnect()

    def feed(self, report: bytes) -> None:
        self.sticks, self.buttons = parse_gamepad(bytes(report))

    def get_action(self) -> tuple[np.ndarray | None, list[str]]:
        while self.device is not None:
            report = self.device.read(64)
            if not report:
                break
            self.feed(report)
        return self.decide()

    def decide(self) -> tuple[np.ndarray | None, list[str]]:
        cfg, events = self.config, []
        pressed = self.buttons & ~self._buttons
        self._buttons = self.buttons
        if pressed >> cfg.takeover_button & 1:
            self.active = not self.active
            events.append(TAKEOVER if self.active else RELEASE)
        for bit, event in ((cfg.success_button, SUCCESS), (cfg.failure_button, FAILURE), (cfg.rewind_button, REWIND)):
            if pressed >> bit & 1:
                events.append(event)
        action = self.mapping(self.sticks[list(cfg.axes)])
        return (action if self.active else None), events
