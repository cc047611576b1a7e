"""Keyboard teleoperation in a plain terminal: stdin in raw mode, read without blocking.

Keys (configurable): space toggles takeover; each pair of `axis_keys` drives one action
dimension (+ / -) while pressed; `y` labels the episode a success, `n` a failure, `b` rewinds,
`q` ends the session. A terminal reports a held key as repeated characters (after the
auto-repeat delay, ~250-600 ms on X11/macOS defaults), so an axis stays at full deflection
for `hold_s` after its last character: long enough to bridge the repeat gap, short enough to
stop promptly on release.

Raw mode (`tty.setcbreak`-like: no echo, no line buffering, signals kept so Ctrl-C still works)
is restored on `disconnect`, also after an exception (use the device as a context manager).
"""

from __future__ import annotations

import os
import select
import sys
import termios
import time
import tty
from dataclasses import dataclass

import numpy as np

from embodied.config import check
from real_robot.teleop.base import FAILURE, QUIT, RELEASE, REWIND, SUCCESS, TAKEOVER, Teleop, TeleopConfig


@dataclass(frozen=True)
class KeyboardConfig(TeleopConfig):
    axis_keys: tuple[str, ...] = ("az", "sx", "dc", "fv")  # per action dimension: "<plus><minus>"
    takeover_key: str = " "
    success_key: str = "y"
    failure_key: str = "n"
    rewind_key: str = "b"
    quit_key: str = "q"
    hold_s: float = 0.6  # s an axis stays pressed after its last character (bridges the auto-repeat delay)
    fd: int = -1  # file descriptor to read; -1 = stdin

    def __post_init__(self):
        super().__post_init__()
        check(len(self.axis_keys) == self.action_dim,
              f"teleop.axis_keys has {len(self.axis_keys)} pairs, the action has {self.action_dim} dimensions")  # fmt: skip
        check(all(len(pair) == 2 for pair in self.axis_keys), "teleop.axis_keys entries must be two characters each")
        keys = [c for pair in self.axis_keys for c in pair] + [self.takeover_key, self.success_key,
                                                               self.failure_key, self.rewind_key, self.quit_key]  # fmt: skip
        check(all(len(k) == 1 for k in keys), "teleop keys must be single characters")
        check(len(set(keys)) == len(keys), f"teleop keys must be distinct: {keys}")
        check(self.hold_s > 0, f"teleop.hold_s={self.hold_s} must be > 0")


class KeyboardTeleop(Teleop):
    Config = KeyboardConfig

    def __init__(self, config: KeyboardConfig = KeyboardConfig()):
        super().__init__(config)
        self.fd = sys.stdin.fileno() if config.fd < 0 else config.fd
        self.active = False
        self._pressed = np.full(config.action_dim, -np.inf)  # last time each axis' key came in
        self._sign = np.zeros(config.action_dim, np.float32)
        self._saved = None
        self._events = {config.success_key: SUCCESS, config.failure_key: FAILURE,
                        config.rewind_key: REWIND, config.quit_key: QUIT}  # fmt: skip
        self._axes = {k: (i, 1.0 if j == 0 else -1.0) for i, pair in enumerate(config.axis_keys) for j, k in enumerate(pair)}

    def connect(self) -> None:
        if os.isatty(self.fd):
            self._saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)  # characters arrive one by one, unechoed; Ctrl-C still interrupts
        super().connect()

    def disconnect(self) -> None:
        if self._saved is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)
            self._saved = None
        super().disconnect()

    def read_keys(self) -> str:
        """Every character waiting on the fd, without blocking."""
        chars = b""
        while select.select([self.fd], [], [], 0)[0]:
            chunk = os.read(self.fd, 1024)
            if not chunk:  # end of file: the terminal went away
                break
            chars += chunk
        return chars.decode("utf-8", errors="ignore")

    def get_action(self) -> tuple[np.ndarray | None, list[str]]:
        cfg, now, events = self.config, time.monotonic(), []
        for ch in self.read_keys():
            if ch == cfg.takeover_key:
                self.active = not self.active
                events.append(TAKEOVER if self.active else RELEASE)
            elif ch in self._events:
                events.append(self._events[ch])
            elif ch in self._axes:
                i, sign = self._axes[ch]
                self._pressed[i], self._sign[i] = now, sign
                if not self.active:  # moving an axis takes over (as HIL-SERL's spacemouse does)
                    self.active = True
                    events.append(TAKEOVER)
        if not self.active:
            return None, events
        axes = np.where(now - self._pressed <= cfg.hold_s, self._sign, 0.0)
        return self.mapping(axes), events
