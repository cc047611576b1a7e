"""The robot interface: four verbs, and the safety layer between them and the hardware.

    robot = registry.build("robot", "sim_arm", {"control_hz": 50})
    robot.connect()
    obs = robot.get_observation()          # dict of numpy arrays + "timestamp" (time.monotonic())
    sent = robot.send_action(action, stamp=obs["timestamp"])   # the command actually written (or in effect)
    robot.disconnect()

`connect`, `get_observation`, `send_action` and `disconnect` are implemented here, once, and
may not be overridden: a driver implements only the private hooks `_connect`, `_read`,
`_write`, `_failsafe` and `_disconnect`, and `_write` is only ever called with a command that
the `SafetyLayer` passed. So no driver has a path to its hardware around the safety layer.
(As LeRobot's `Robot`, `send_action` returns what was sent, after clipping.)

The step limit refers to the present state, not to the last observation: `send_action` asks the driver's `_measure`
for it right before the check, and measures, checks and writes under one lock (a caller sending several commands
between observations would otherwise step from a stale reading while the arm moved on toward its last goal).
LeRobot's follower does the same: its `send_action` reads Present_Position before applying `max_relative_target`.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from embodied.config import check
from embodied.specs import Spec
from real_robot import safety as sf
from real_robot.safety import SafetyConfig, SafetyLayer, Watchdog

_FINAL = ("connect", "get_observation", "send_action", "disconnect", "emergency_stop")

# The watchdog thread needs the GIL to act. With the control thread computing in Python, CPython hands the GIL over
# only every switch interval (5 ms by default): alone the whole margin between the watchdog's deadline (1.75 periods)
# and 2 periods at 50 Hz. While any robot is connected the interval is at most 1 ms (a busy control thread: watchdog
# late by p50 5.3 / p99 8.9 / max 10.6 ms at 5 ms, 1.3 / 4.6 / 5.3 ms at 1 ms: test_watchdog_latency.py).
SWITCH_INTERVAL = 1e-3
_switch = {"lock": threading.Lock(), "robots": 0, "before": None}


def hold_switch_interval(hold: bool) -> None:
    """Count a robot connecting (True) or disconnecting (False); the first sets CPython's switch interval to at most
    SWITCH_INTERVAL, the last restores what it was."""
    with _switch["lock"]:
        if hold and _switch["robots"] == 0:
            _switch["before"] = sys.getswitchinterval()
            sys.setswitchinterval(min(_switch["before"], SWITCH_INTERVAL))
        _switch["robots"] += 1 if hold else -1
        if not hold and _switch["robots"] == 0:
            sys.setswitchinterval(_switch["before"])


@dataclass(frozen=True)
class RobotConfig:
    """Settings every robot has; a driver's Config adds its own."""

    control_hz: float = 50.0  # the rate commands are expected at; the watchdog counts in these periods
    safety: SafetyConfig = field(default_factory=SafetyConfig)  # command limits (see real_robot.safety)

    def __post_init__(self):
        check(0 < self.control_hz <= 2000, f"control_hz={self.control_hz} must be in (0, 2000]")


class RobotError(RuntimeError):
    pass


class Robot:
    """Base class of every driver (real or simulated hardware)."""

    Config = RobotConfig
    simulated: bool = False  # True: the hardware is a simulator (dry runs)
    observation_spec: dict[str, Spec]  # per-observation spec, no batch dimension
    action_spec: Spec  # the command a driver writes

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        overridden = [name for name in _FINAL if name in cls.__dict__]
        if overridden:
            raise TypeError(f"{cls.__name__} overrides {overridden}: drivers implement _connect/_read/_write/"
                            "_failsafe/_disconnect, so that every command passes the safety layer")  # fmt: skip

    def __init__(self, config: RobotConfig, forward_kinematics=None):
        self.config = config
        self.period = 1.0 / config.control_hz
        self.safety = SafetyLayer(config.safety, self.action_spec.shape, forward_kinematics)
        self.connected = False
        self.failsafe_reason: str | None = None
        self.failsafe_kind: str | None = None  # what latched it: a safety violation kind (WATCHDOG, LINK, ESTOP, ...)
        self._watchdog: Watchdog | None = None
        self._io = threading.RLock()  # the watchdog thread and the control loop share the driver
        self._measured: np.ndarray | None = None  # the state the last command was checked against (`_measure`)
        # the first command tried since connect / clear, passed or not: the watchdog counts from it until one passes,
        # so a loop whose every command is rejected (a policy that does not fit the robot) is failed safe too
        self._first_try: float | None = None

    # ---- the four verbs ---------------------------------------------------------------------
    def connect(self) -> None:
        if self.connected:
            raise RobotError(f"{type(self).__name__} is already connected")
        self._connect()
        self.connected = True
        hold_switch_interval(True)
        self.failsafe_reason = self.failsafe_kind = None
        timeout = self.config.safety.watchdog_periods * self.period
        self._first_try = None
        self._watchdog = Watchdog(timeout, self._last_command_time, lambda why: self.failsafe(why, sf.WATCHDOG))
        self._watchdog.start()

    def get_observation(self) -> dict[str, Any]:
        self._require_connected()
        with self._io:
            obs = self._read()
        obs["timestamp"] = time.monotonic()
        reason = self.safety.monitor(obs.get("position"), obs.get("velocity"))
        if reason is not None:
            self.failsafe(reason)
        if obs.get("link_lost"):
            self.failsafe("link lost: no telemetry", sf.LINK)
        return obs

    def send_action(self, action, stamp: float | None = None) -> np.ndarray | None:
        """Filter `action` through the safety layer and write what passes. Returns the command written,
        or, when this one was rejected, None (the hardware keeps executing the previous command / failsafe).
        A malformed action or stamp is rejected, never raised (the violation is counted and logged)."""
        self._require_connected()
        with self._io:  # measure, check and write with nothing in between (the watchdog's hold waits for this lock)
            if self._first_try is None:
                self._first_try = time.monotonic()
            if self._watchdog is not None:
                self._watchdog.poll(time.monotonic())  # past the deadline, the thread not yet awake: fail safe now
            self._measured = None if self.safety.latched is not None else self._measure()
            decision = self.safety.filter(action, time.monotonic(), stamp, self._measured)
            if decision.command is None:
                return None
            self._write(decision.command.astype(np.float32).reshape(self.action_spec.shape))
            if self.failsafe_reason is not None:  # the write failed and the driver failed safe (link lost)
                return None
        return decision.command.astype(np.float32)

    def disconnect(self) -> None:
        if not self.connected:
            return
        if self._watchdog is not None:
            self._watchdog.stop()
        with self._io:
            self._disconnect()
        self.connected = False
        hold_switch_interval(False)

    def emergency_stop(self) -> None:
        """Latch the safety layer and stop the hardware now (arms: hold; drones: motors off)."""
        self.safety.violation(sf.ESTOP, "emergency stop")
        self.safety.latch("emergency stop")
        with self._io:
            self.failsafe_reason = "emergency stop"  # the watchdog must not follow up with a landing
            self.failsafe_kind = sf.ESTOP
            self._estop()

    def failsafe(self, reason: str, kind: str = "failsafe") -> None:
        """Block commands and bring the hardware to its safe state (arms hold, drones land); idempotent."""
        with self._io:
            if self.failsafe_reason is not None or not self.connected:
                return
            self.safety.violation(kind, reason)
            self.safety.latch(reason)
            self.failsafe_reason, self.failsafe_kind = reason, kind
            self._failsafe(reason)

    def clear_failsafe(self) -> None:
        """Operator acknowledgement: accept commands again. Waits for a failsafe still in progress (the watchdog
        thread sets the reason before its hold is written), so a hold failing after the clear cannot re-latch."""
        with self._io:
            self.failsafe_reason = self.failsafe_kind = None
            self.safety.clear()
            self._first_try = None
            self._clear()

    def _last_command_time(self) -> float | None:
        """What the watchdog counts from: the last command that passed, or before one has, the first one tried."""
        last = self.safety.last_time
        return last if last is not None else self._first_try

    def resume(self) -> None:
        """Call right before the first command after a pause of the caller's own (between episodes: storing,
        resetting), when the watchdog has held the robot or may before that command. Acknowledges the watchdog's
        hold and re-arms the watchdog on the next command; any other failsafe (a workspace breach, a lost link, an
        emergency stop) stays latched."""
        with self._io:
            if self.failsafe_kind in (None, sf.WATCHDOG):
                self.clear_failsafe()

    def _require_connected(self) -> None:
        if not self.connected:
            raise RobotError(f"{type(self).__name__} is not connected; call connect() first")

    # ---- driver hooks -----------------------------------------------------------------------
    def _connect(self) -> None:
        raise NotImplementedError

    def _read(self) -> dict[str, Any]:
        """The present observation: numpy arrays keyed like observation_spec."""
        raise NotImplementedError

    def _measure(self) -> np.ndarray | None:
        """The present state in command units (arms: joint positions; drones in position mode: position), read now,
        for the step limit and the keep-out path; None where commands are not states (motors, velocities,
        attitudes: their limits refer to the previous command). Where the reading fails, call `failsafe`."""
        return None

    def _write(self, command: np.ndarray) -> None:
        """Write a command that passed the safety layer. Where the hardware stops answering, a driver calls
        `failsafe(..., LINK)` rather than raising: `send_action` then returns None (nothing was written)."""
        raise NotImplementedError

    def _failsafe(self, reason: str) -> None:
        """Bring the hardware to its safe state (arms: hold position; drones: land)."""
        raise NotImplementedError

    def _estop(self) -> None:
        self._failsafe("emergency stop")

    def _clear(self) -> None:
        """After `clear_failsafe`: leave the failsafe state if the hardware needs telling."""

    def _disconnect(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Robot:
        self.connect()
        return self

    def __exit__(self, *exc) -> None:
        self.disconnect()
