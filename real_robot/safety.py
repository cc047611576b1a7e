"""The safety layer every command bound for hardware passes (`Robot.send_action` is its only door).

    safety = SafetyLayer(SafetyConfig(low=(-1,) * 4, high=(1,) * 4, max_step=0.5), shape=(4,))
    decision = safety.filter(command, now=t, stamp=obs_time, measured=joint_pos)
    decision.command   # the clipped command to write, or None when rejected (nothing is written)

Checks, in order (a command that fails an early check is rejected, later ones clip):
1. latched state: after an emergency stop or a failsafe every command is rejected until `clear()`.
2. shape (exactly `shape`), dtype (integers or floats: not bool, complex, strings, dates, objects), NaN/inf: rejected.
3. staleness: a command computed from an observation older than `max_command_age` is rejected.
4. absolute limits `low`/`high` (joint limits, motor range, geofence for position targets),
   `max_step`: the command may differ from the measured state (arms: present joint position, as
   LeRobot's `max_relative_target`) or, without one, from the previous command by at most this, and
   `max_velocity`: the command changes at most this much per second since the previous command.
   The command is clipped to the intersection of the three; when it is empty (the arm is far from
   its last goal), the command is rejected.
5. `workspace`: an arm command whose end effector (robot-supplied forward kinematics) leaves the
   box is rejected (clipping joint angles does not map to a box).
Monitors on measurements (`monitor`): geofence and speed limit of a drone; a breach triggers the failsafe.
The watchdog (`Watchdog`) fires the failsafe when no command arrived for `watchdog_periods`.
Every violation is counted by kind and logged.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from embodied.config import check

log = logging.getLogger(__name__)

# violation kinds, named once
LATCHED, SHAPE, NONFINITE, STALE, LIMIT, STEP, VELOCITY, WORKSPACE = (
    "latched", "shape", "nonfinite", "stale", "limit", "step", "velocity", "workspace")  # fmt: skip
GEOFENCE, SPEED, WATCHDOG, ESTOP, LINK = "geofence", "speed", "watchdog", "estop", "link"


@dataclass(frozen=True)
class SafetyConfig:
    """Limits of one robot's commands; empty tuples / None disable a check."""

    low: tuple[float, ...] = ()  # per-dimension lower command limit (joint limit, motor minimum, fence)
    high: tuple[float, ...] = ()  # per-dimension upper command limit
    max_step: float | None = None  # max |command - reference| per dimension per command (reference: see module doc)
    max_velocity: float | None = None  # max |command - previous command| / elapsed s, per dimension
    max_command_age: float = 0.1  # s; commands computed from older observations are rejected
    # failsafe when no command for this many control periods; polled every 1/8 of it, it acts within 2 periods
    # (measured in tests/real_robot) and tolerates half a period of tick jitter. Values >= 2 give up that
    # guarantee: only for plumbing tests on overloaded shared machines, where threads stall for 100s of ms
    watchdog_periods: float = 1.75  # + the poll (1/8 of it) = 1.97 periods at most, before thread wake-up
    workspace_low: tuple[float, float, float] | None = None  # end-effector box, m (arms)
    workspace_high: tuple[float, float, float] | None = None
    geofence_low: tuple[float, float, float] | None = None  # drone position box (world, z up), m
    geofence_high: tuple[float, float, float] | None = None
    max_speed: float | None = None  # drone speed above which the failsafe lands it, m/s

    def __post_init__(self):
        check(len(self.low) == len(self.high), f"safety.low has {len(self.low)} entries, safety.high {len(self.high)}")
        check(all(lo <= hi for lo, hi in zip(self.low, self.high)), "safety.low must be <= safety.high everywhere")
        for name in ("max_step", "max_velocity", "max_speed"):
            value = getattr(self, name)
            check(value is None or value > 0, f"safety.{name}={value} must be > 0 or null")
        check(self.max_command_age > 0, f"safety.max_command_age={self.max_command_age} must be > 0")
        check(0 < self.watchdog_periods <= 20, f"safety.watchdog_periods={self.watchdog_periods} must be in (0, 20]")
        for lo, hi, name in ((self.workspace_low, self.workspace_high, "workspace"),
                             (self.geofence_low, self.geofence_high, "geofence")):  # fmt: skip
            check((lo is None) == (hi is None), f"safety.{name}_low and _high must be set together")
            check(lo is None or all(a < b for a, b in zip(lo, hi)), f"safety.{name}_low must be < _high")


def fill_defaults(given: SafetyConfig, robot_default: SafetyConfig) -> SafetyConfig:
    """`given` with every field left at SafetyConfig's generic default taken from the robot's own defaults,
    so overriding one limit (robot.safety.max_step=0.1) keeps the others, and no limit can be switched off
    by leaving it out (only by setting it to another value)."""
    generic = SafetyConfig()
    changes = {f.name: getattr(robot_default, f.name) for f in dataclasses.fields(SafetyConfig)
               if getattr(given, f.name) == getattr(generic, f.name)}  # fmt: skip
    return dataclasses.replace(given, **changes)


@dataclass
class Violation:
    time: float
    kind: str
    detail: str


@dataclass
class Decision:
    command: np.ndarray | None  # what may be written to the hardware; None: nothing
    violations: list[Violation] = field(default_factory=list)


class SafetyLayer:
    """Filters commands and records violations; thread-safe (the watchdog thread shares it)."""

    def __init__(self, config: SafetyConfig, shape: tuple[int, ...],
                 forward_kinematics: Callable[[np.ndarray], np.ndarray] | None = None):  # fmt: skip
        if config.low:
            check(len(config.low) == math.prod(shape), f"safety.low has {len(config.low)} entries, commands {shape}")
        check(config.workspace_low is None or forward_kinematics is not None,
              "safety.workspace needs a robot with forward kinematics")  # fmt: skip
        self.config, self.shape, self.fk = config, tuple(shape), forward_kinematics
        self.low = np.asarray(config.low, np.float64).reshape(shape) if config.low else None
        self.high = np.asarray(config.high, np.float64).reshape(shape) if config.high else None
        self.counts: Counter[str] = Counter()
        self.log: deque[Violation] = deque(maxlen=1000)  # the most recent violations
        self.latched: str | None = None  # reason of an emergency stop / failsafe, None = commands pass
        self.last_command: np.ndarray | None = None
        self.last_time: float | None = None  # when the last command passed, time.monotonic()
        self._lock = threading.RLock()

    def violation(self, kind: str, detail: str, now: float | None = None) -> Violation:
        v = Violation(time.monotonic() if now is None else now, kind, detail)
        with self._lock:
            self.counts[kind] += 1
            self.log.append(v)
        log.log(logging.DEBUG if kind == LATCHED else logging.WARNING, "safety: %s: %s", kind, detail)
        return v

    def latch(self, reason: str) -> None:
        """Reject every command from now on (emergency stop, failsafe) until `clear()`."""
        with self._lock:
            if self.latched is None:
                self.latched = reason

    def clear(self) -> None:
        """Operator acknowledgement after an emergency stop or failsafe: commands pass again."""
        with self._lock:
            self.latched, self.last_command, self.last_time = None, None, None

    def filter(self, command, now: float, stamp: float | None = None,
               measured: np.ndarray | None = None) -> Decision:  # fmt: skip
        """Check `command` at time `now` (time.monotonic()); `stamp` is when its observation was taken,
        `measured` the present state the step limit refers to (same shape, or None)."""
        with self._lock:
            if self.latched is not None:
                return Decision(None, [self.violation(LATCHED, f"commands blocked: {self.latched}", now)])
            try:
                cmd = np.asarray(command)
                if cmd.dtype.kind not in "iuf":  # bool, complex, str, bytes, dates, objects (e.g. ints beyond 64 bits):
                    raise TypeError(f"dtype {cmd.dtype}")  # a float64 cast would turn them into numbers
                cmd = cmd.astype(np.float64)
            except (TypeError, ValueError) as err:
                return Decision(None, [self.violation(SHAPE, f"not an array of real numbers: {err}", now)])
            if cmd.shape != self.shape:
                return Decision(None, [self.violation(SHAPE, f"shape {list(cmd.shape)} != {list(self.shape)}", now)])
            if not np.isfinite(cmd).all():
                return Decision(None, [self.violation(NONFINITE, f"non-finite entries {cmd.tolist()}", now)])
            if stamp is not None and not (now - stamp <= self.config.max_command_age):
                age = now - stamp
                return Decision(None, [self.violation(STALE, f"observation {age * 1e3:.1f} ms old", now)])
            bounds = []  # (kind, low, high): the command must satisfy all at once
            reference = measured if measured is not None else self.last_command
            if self.config.max_step is not None and reference is not None:
                bounds.append((STEP, reference - self.config.max_step, reference + self.config.max_step))
            if self.config.max_velocity is not None and self.last_command is not None:
                reach = self.config.max_velocity * max(now - self.last_time, 1e-6)
                bounds.append((VELOCITY, self.last_command - reach, self.last_command + reach))
            if self.low is not None:
                bounds.append((LIMIT, self.low, self.high))
            cmd, found = cmd.copy(), []
            if bounds:
                low = np.max(np.stack([np.broadcast_to(b[1], cmd.shape) for b in bounds]), axis=0)
                high = np.min(np.stack([np.broadcast_to(b[2], cmd.shape) for b in bounds]), axis=0)
                if np.any(low > high):  # e.g. the arm is far from its last goal: no command meets every limit
                    kinds = "+".join(b[0] for b in bounds)
                    return Decision(None, [self.violation(STEP, f"no command satisfies {kinds} limits at once", now)])
                for kind, lo, hi in bounds:
                    found += self._report(cmd, lo, hi, kind, now)
                np.clip(cmd, low, high, out=cmd)
            if self.fk is not None and self.config.workspace_low is not None:
                ee = np.asarray(self.fk(cmd))
                if not (np.all(ee >= self.config.workspace_low) and np.all(ee <= self.config.workspace_high)):
                    found.append(self.violation(WORKSPACE, f"end effector {np.round(ee, 3).tolist()} outside", now))
                    return Decision(None, found)
            self.last_command, self.last_time = cmd, now
            return Decision(cmd, found)

    def _report(self, cmd: np.ndarray, low, high, kind: str, now: float) -> list[Violation]:
        low, high = np.broadcast_to(low, cmd.shape), np.broadcast_to(high, cmd.shape)
        outside = (cmd < low) | (cmd > high)
        if not outside.any():
            return []
        detail = f"{np.round(cmd[outside], 4).tolist()} outside [{np.round(low[outside], 4).tolist()}, " \
                 f"{np.round(high[outside], 4).tolist()}]: clipped"  # fmt: skip
        return [self.violation(kind, detail, now)]

    def monitor(self, position: np.ndarray | None, velocity: np.ndarray | None) -> str | None:
        """Check a drone's measured state; returns the reason for a failsafe, or None."""
        c = self.config
        if position is not None and c.geofence_low is not None:
            if not (np.all(position >= c.geofence_low) and np.all(position <= c.geofence_high)):
                return self.violation(GEOFENCE, f"position {np.round(position, 3).tolist()} outside the fence").detail
        if velocity is not None and c.max_speed is not None:
            speed = float(np.linalg.norm(velocity))
            if not speed <= c.max_speed:
                return self.violation(SPEED, f"speed {speed:.2f} m/s above {c.max_speed}").detail
        return None


class Watchdog:
    """A thread that calls `on_timeout` when `last_time()` is older than `timeout` s (polled every timeout / 8)."""

    def __init__(self, timeout: float, last_time: Callable[[], float | None], on_timeout: Callable[[str], None]):
        self.timeout, self._last_time, self._on_timeout = timeout, last_time, on_timeout
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="safety-watchdog", daemon=True)
        self.fired_at: float | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)

    def _run(self) -> None:
        while not self._stop.wait(self.timeout / 8):  # each wake takes the GIL: not more often than needed
            last = self._last_time()
            if last is not None and self.fired_at is None and time.monotonic() - last > self.timeout:
                self.fired_at = time.monotonic()
                self._on_timeout(f"no command for {(self.fired_at - last) * 1e3:.1f} ms")
            elif last is not None and self.fired_at is not None and last > self.fired_at:
                self.fired_at = None  # commands resumed after the operator cleared the failsafe
