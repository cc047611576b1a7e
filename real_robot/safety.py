"""The safety layer every command bound for hardware passes (`Robot.send_action` is its only door).

    safety = SafetyLayer(SafetyConfig(low=(-1,) * 4, high=(1,) * 4, max_step=0.5), shape=(4,))
    decision = safety.filter(command, now=t, stamp=obs_time, measured=joint_pos)
    decision.command   # the clipped command to write, or None when rejected (nothing is written)

Checks, in order (a command that fails an early check is rejected, later ones clip):
1. latched state: after an emergency stop or a failsafe every command is rejected until `clear()`.
2. type, shape, NaN/inf: the command must convert to an array of real numbers of exactly `shape` (numpy arrays of
   integers or floats, lists, torch tensors of any device, dtype, layout or grad state); bool, complex, strings,
   dates, objects, masked entries, a non-finite `measured` state: rejected. Nothing raises out of `filter`.
3. staleness: `stamp` (when the command's observation was taken, on `now`'s clock) must be a finite real number,
   at most `max_command_age` old and not in the future (beyond FUTURE_TOLERANCE): else rejected.
4. absolute limits `low`/`high` (joint limits, motor range, geofence for position targets),
   `max_step`: the command may differ from the measured state (arms: present joint position, as
   LeRobot's `max_relative_target`) or, without one, from the previous command by at most this, and
   `max_velocity`: the command changes at most this much per second since the previous command.
   The command is clipped to the intersection of the three; when it is empty (the arm is far from
   its last goal), the command is rejected.
5. geometry, declared by the config rather than coded per driver:
   - `quaternion_slice`: these entries are an attitude (w, x, y, z; body -> world, z up). Its norm must be within
     `quaternion_tolerance` of 1 (then it is normalised: float32 round-off, a policy's slightly-off output), else
     it is rejected (a quaternion of norm 2 is a bug, not an attitude: MAVLink's attitude target would scale
     thrust by its square). Checked before any per-entry clipping (clipping (2, 0, 0, 0) to [-1, 1] makes it look
     unit); `low`/`high`, `max_step` and `max_velocity` act per entry and do not apply to it: `max_rotation_step`
     slerps it toward the previous command's attitude, and tilt above `max_tilt` is rejected. (No command here
     carries a rotation matrix; a matrix slice would be checked the same way: orthonormal, det +1.)
   - `position_slice`: these entries are a position target (world, m). The fence `low`/`high` is a box, so a
     target inside it keeps the straight segment from any inside point inside it too (convexity); each
     `keep_out` box (an obstacle, a no-fly zone: non-convex allowed areas as a box minus boxes) is checked against
     the whole straight segment from the measured position (else the previous target) to the target, and a
     command whose segment touches one is rejected. Guaranteed: the commanded straight path, not the flown one
     (the vehicle's controller may overshoot it; the monitor covers what is flown).
6. `workspace`: an arm command whose end effector (robot-supplied forward kinematics) leaves the
   box is rejected (clipping joint angles does not map to a box).
Monitors on measurements (`monitor`): geofence, keep-out boxes and speed limit of a drone; a breach triggers the
failsafe. The watchdog (`Watchdog`) fires the failsafe when no command arrived for `watchdog_periods`; its deadline
is also checked on the control path (`Robot.send_action`), so a late command cannot slip out before the thread wakes.
Every violation is counted by kind and logged.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import numbers
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from embodied.config import check

log = logging.getLogger(__name__)

# violation kinds, named once
LATCHED, SHAPE, NONFINITE, STALE, LIMIT, STEP, VELOCITY, WORKSPACE = (
    "latched", "shape", "nonfinite", "stale", "limit", "step", "velocity", "workspace")  # fmt: skip
GEOFENCE, SPEED, WATCHDOG, ESTOP, LINK = "geofence", "speed", "watchdog", "estop", "link"
GEOMETRY, KEEP_OUT = "geometry", "keep_out"

# s: how far a stamp may lie ahead of `now`. Both come from time.monotonic() (one system-wide clock), so only a caller's
# rounding can put a stamp ahead; a stamp further ahead (or +inf) would pass any age check forever
FUTURE_TOLERANCE = 1e-3


@dataclass(frozen=True)
class SafetyConfig:
    """Limits of one robot's commands; empty tuples / None disable a check."""

    low: tuple[float, ...] = ()  # per-dimension lower command limit (joint limit, motor minimum, fence)
    high: tuple[float, ...] = ()  # per-dimension upper command limit
    max_step: float | None = None  # max |command - reference| per dimension per command (reference: see module doc)
    max_velocity: float | None = None  # max |command - previous command| / elapsed s, per dimension
    max_command_age: float = 0.1  # s; commands computed from older observations are rejected
    # failsafe when no command for this many control periods; tolerates 3/4 of a period of tick jitter. The thread
    # acts this long after the last command plus its wake-up latency, measured at 50 Hz on 2 shared cores
    # (tests/real_robot/test_watchdog_latency.py): quiet p50 0.3 / p99 0.4 / max 1.9 ms; 2 busy CPU loops 0.3 / 2.6
    # / 5.0 ms; a busy control thread 1.3 / 4.6 / 5.3 ms. So "within 2 periods" (5 ms past the deadline at 50 Hz)
    # holds to p99, not to the last millisecond, and not on a machine stalling threads for 100s of ms; whatever the
    # thread's lateness, a command arriving after the deadline fails safe instead of going out (send_action polls).
    # Values >= 2: only for plumbing tests on overloaded shared machines
    watchdog_periods: float = 1.75
    workspace_low: tuple[float, float, float] | None = None  # end-effector box, m (arms)
    workspace_high: tuple[float, float, float] | None = None
    geofence_low: tuple[float, float, float] | None = None  # drone position box (world, z up), m
    geofence_high: tuple[float, float, float] | None = None
    max_speed: float | None = None  # drone speed above which the failsafe lands it, m/s
    quaternion_slice: tuple[int, int] | None = None  # command entries [start, stop) that are an attitude (w, x, y, z)
    quaternion_tolerance: float = 0.02  # |norm - 1| up to this: normalised; beyond: rejected
    max_tilt: float | None = None  # rad between the attitude's body z and world z (up); more is rejected
    max_rotation_step: float | None = None  # rad between consecutive attitudes; a larger turn is slerped down to it
    position_slice: tuple[int, int] | None = None  # command entries [start, stop) that are a position target (m)
    keep_out: tuple[tuple[tuple[float, float, float], tuple[float, float, float]], ...] = ()  # (low, high) boxes, m

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
        boxes = tuple((tuple(map(float, lo)), tuple(map(float, hi))) for lo, hi in self.keep_out)  # YAML: lists
        object.__setattr__(self, "keep_out", boxes)
        check(all(len(lo) == 3 == len(hi) and all(a < b for a, b in zip(lo, hi)) for lo, hi in boxes),
              "safety.keep_out boxes are (low xyz, high xyz) with low < high")  # fmt: skip
        for name, size in (("quaternion_slice", 4), ("position_slice", 3)):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(value))
                check(len(value) == 2 and 0 <= value[0] and value[1] - value[0] == size,
                      f"safety.{name}={value} must be (start, start + {size})")  # fmt: skip
        check(0 < self.quaternion_tolerance < 1, "safety.quaternion_tolerance must be in (0, 1)")
        for name in ("max_tilt", "max_rotation_step"):
            value = getattr(self, name)
            check(value is None or 0 < value <= math.pi, f"safety.{name}={value} must be in (0, pi] rad or null")


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


def as_real_array(command) -> np.ndarray:
    """`command` as a float64 array; raises (TypeError, ValueError, or whatever an object's conversion raises) when
    it is not real numbers. Torch tensors of any device, dtype and grad state are read as values (detached, on the
    cpu: a tensor that requires grad refuses .numpy()); masked entries have no value; numpy subclasses (np.matrix)
    become plain arrays of their own shape."""
    if isinstance(command, torch.Tensor):
        if command.layout != torch.strided or command.dtype.is_complex or command.dtype == torch.bool:
            raise TypeError(f"a {command.layout} tensor of {command.dtype}")
        command = command.detach().to("cpu", torch.float64).numpy()  # float16 / bfloat16 / ints: exactly
    elif isinstance(command, np.ma.MaskedArray):
        if np.ma.getmaskarray(command).any():
            raise ValueError("masked entries")
        command = command.data
    cmd = np.asarray(command)
    if cmd.dtype.kind not in "iuf":  # bool, complex, str, bytes, dates, objects (e.g. ints beyond 64 bits):
        raise TypeError(f"dtype {cmd.dtype}")  # a float64 cast would turn them into numbers
    with np.errstate(over="ignore"):  # a longdouble beyond float64 becomes inf: rejected as non-finite
        return cmd.astype(np.float64)


def tilt_of(q: np.ndarray) -> float:
    """Angle, rad, between world z and the body z of the unit quaternion (w, x, y, z; body -> world):
    cos = R[2, 2] = 1 - 2 (x^2 + y^2)."""
    return math.acos(min(1.0, max(-1.0, 1.0 - 2.0 * (q[1] ** 2 + q[2] ** 2))))


def turn_at_most(before: np.ndarray, q: np.ndarray, max_angle: float) -> tuple[np.ndarray, float]:
    """(q slerped toward `before` so that it turns at most max_angle rad from it, the angle it asked for)."""
    dot = float(before @ q)
    target = q if dot >= 0 else -q  # q and -q are one rotation: take the short way
    half = math.acos(min(1.0, abs(dot)))  # half the rotation angle between them
    if 2 * half <= max_angle:
        return q, 2 * half
    f = max_angle / (2 * half)
    out = (math.sin((1 - f) * half) * before + math.sin(f * half) * target) / math.sin(half)
    return out / np.linalg.norm(out), 2 * half


def segment_hits_box(a: np.ndarray, b: np.ndarray, low, high) -> bool:
    """Whether the straight segment a -> b touches the closed box [low, high] (the slab method: the parameter
    interval of the segment inside each pair of planes, intersected)."""
    t0, t1 = 0.0, 1.0
    for i in range(len(a)):
        d = b[i] - a[i]
        if d == 0.0:
            if not low[i] <= a[i] <= high[i]:
                return False
            continue
        ta, tb = (low[i] - a[i]) / d, (high[i] - a[i]) / d
        t0, t1 = max(t0, min(ta, tb)), min(t1, max(ta, tb))
        if t0 > t1:
            return False
    return True


class SafetyLayer:
    """Filters commands and records violations; thread-safe (the watchdog thread shares it)."""

    def __init__(self, config: SafetyConfig, shape: tuple[int, ...],
                 forward_kinematics: Callable[[np.ndarray], np.ndarray] | None = None):  # fmt: skip
        if config.low:
            check(len(config.low) == math.prod(shape), f"safety.low has {len(config.low)} entries, commands {shape}")
        check(config.workspace_low is None or forward_kinematics is not None,
              "safety.workspace needs a robot with forward kinematics")  # fmt: skip
        self.config, self.shape, self.fk = config, tuple(shape), forward_kinematics
        # across fields, once the robot's defaults are filled in (a user's config alone may set just keep_out)
        for name in ("quaternion_slice", "position_slice"):
            span = getattr(config, name)
            check(span is None or span[1] <= math.prod(shape), f"safety.{name}={span} beyond commands {shape}")
        check(not config.keep_out or config.position_slice is not None, "safety.keep_out needs a position_slice")
        q = config.quaternion_slice is not None
        check(q or (config.max_tilt is None and config.max_rotation_step is None),
              "safety.max_tilt / max_rotation_step need a quaternion_slice")  # fmt: skip
        # per-entry step limits would clip a unit quaternion off the unit sphere: rotations use max_rotation_step
        check(not q or (config.max_step is None and config.max_velocity is None),
              "safety.max_step / max_velocity act per entry, not on a quaternion: use max_rotation_step")
        self.low = np.asarray(config.low, np.float64).reshape(shape) if config.low else None
        self.high = np.asarray(config.high, np.float64).reshape(shape) if config.high else None
        self.quat = slice(*config.quaternion_slice) if config.quaternion_slice else None
        self.pos = slice(*config.position_slice) if config.position_slice else None
        if self.quat is not None and self.low is not None:  # a rotation is bounded by max_tilt / max_rotation_step;
            self.low.reshape(-1)[self.quat], self.high.reshape(-1)[self.quat] = -1.0, 1.0  # a unit q's entries fit
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
        `measured` the present state the step limit refers to (same shape, or None). Never raises for a bad
        command or stamp: it is rejected with a violation."""
        # overflow in arithmetic on finite extremes (the norm of 1e300s, rounding 1.7e308 for a log line) gives inf,
        # which the checks reject: not a warning that a caller's warnings filter could turn into an exception
        with self._lock, np.errstate(all="ignore"):
            if self.latched is not None:
                return Decision(None, [self.violation(LATCHED, f"commands blocked: {self.latched}", now)])
            try:
                cmd = as_real_array(command)
            except Exception as err:  # noqa: BLE001 (any object's __array__ may raise anything: not a command)
                return Decision(None, [self.violation(SHAPE, f"not an array of real numbers: {err!r}", now)])
            if cmd.shape != self.shape:
                return Decision(None, [self.violation(SHAPE, f"shape {list(cmd.shape)} != {list(self.shape)}", now)])
            if not np.isfinite(cmd).all():
                return Decision(None, [self.violation(NONFINITE, f"non-finite entries {cmd.tolist()}", now)])
            stale = self._stamp_problem(stamp, now)
            if stale is not None:
                return Decision(None, [self.violation(STALE, stale, now)])
            if measured is not None:  # the driver's reading: NaN telemetry must not become a NaN clip bound
                measured = np.asarray(measured, np.float64).reshape(self.shape)
                if not np.isfinite(measured).all():
                    return Decision(None, [self.violation(NONFINITE, f"measured state {measured.tolist()}", now)])
            found: list[Violation] = []
            if self.quat is not None:  # before any per-entry clipping: clipping entries of q = (2, 0, 0, 0) gives 1
                q, problem = self._attitude(cmd.reshape(-1)[self.quat], now, found)
                if problem is not None:
                    return Decision(None, [*found, self.violation(GEOMETRY, problem, now)])
                cmd.reshape(-1)[self.quat] = q
            bounds = []  # (kind, low, high): the command must satisfy all at once
            reference = measured if measured is not None else self.last_command
            if self.config.max_step is not None and reference is not None:
                bounds.append((STEP, reference - self.config.max_step, reference + self.config.max_step))
            if self.config.max_velocity is not None and self.last_command is not None:
                reach = self.config.max_velocity * max(now - self.last_time, 1e-6)
                bounds.append((VELOCITY, self.last_command - reach, self.last_command + reach))
            if self.low is not None:
                bounds.append((LIMIT, self.low, self.high))
            if bounds:
                low = np.max(np.stack([np.broadcast_to(b[1], cmd.shape) for b in bounds]), axis=0)
                high = np.min(np.stack([np.broadcast_to(b[2], cmd.shape) for b in bounds]), axis=0)
                if np.any(low > high):  # e.g. the arm is far from its last goal: no command meets every limit
                    kinds = "+".join(b[0] for b in bounds)
                    return Decision(None, [self.violation(STEP, f"no command satisfies {kinds} limits at once", now)])
                for kind, lo, hi in bounds:
                    found += self._report(cmd, lo, hi, kind, now)
                np.clip(cmd, low, high, out=cmd)
            if self.config.keep_out:
                start = reference if reference is not None else cmd  # no reference yet: the target point alone
                a, b = start.reshape(-1)[self.pos], cmd.reshape(-1)[self.pos]
                for lo, hi in self.config.keep_out:
                    if segment_hits_box(a, b, lo, hi):
                        detail = f"path {np.round(a, 3).tolist()} -> {np.round(b, 3).tolist()} enters {lo}-{hi}"
                        return Decision(None, [*found, self.violation(KEEP_OUT, detail, now)])
            if self.fk is not None and self.config.workspace_low is not None:
                ee = np.asarray(self.fk(cmd))
                if not (np.all(ee >= self.config.workspace_low) and np.all(ee <= self.config.workspace_high)):
                    found.append(self.violation(WORKSPACE, f"end effector {np.round(ee, 3).tolist()} outside", now))
                    return Decision(None, found)
            self.last_command, self.last_time = cmd, now
            return Decision(cmd, found)

    def _stamp_problem(self, stamp, now: float) -> str | None:
        """Why `stamp` makes the command unusable, or None. A stamp ahead of `now` (or +inf) would pass an age check
        forever; a stamp of the wrong type (a string, a tensor, a bool) is a caller's bug, not a time."""
        if stamp is None:
            return None
        if isinstance(stamp, bool) or not isinstance(stamp, numbers.Real):
            return f"stamp {stamp!r} ({type(stamp).__name__}) is not a number of seconds"
        try:
            stamp = float(stamp)
        except OverflowError:  # an int beyond float range
            stamp = math.inf
        if not math.isfinite(stamp):
            return f"stamp {stamp} is not finite"
        if stamp > now + FUTURE_TOLERANCE:
            return f"stamp {(stamp - now) * 1e3:.1f} ms in the future"
        if now - stamp > self.config.max_command_age:
            return f"observation {(now - stamp) * 1e3:.1f} ms old"
        return None

    def _attitude(self, q: np.ndarray, now: float, found: list[Violation]) -> tuple[np.ndarray, str | None]:
        """The commanded attitude normalised and turned at most max_rotation_step from the previous one; or the
        reason it is rejected (not a unit quaternion, tilted beyond max_tilt)."""
        c, norm = self.config, float(np.linalg.norm(q))
        if not abs(norm - 1.0) <= c.quaternion_tolerance:
            return q, f"quaternion {np.round(q, 4).tolist()} has norm {norm:.4f}, not 1 +- {c.quaternion_tolerance}"
        q = q / norm
        if c.max_rotation_step is not None and self.last_command is not None:
            before = self.last_command.reshape(-1)[self.quat]
            q, angle = turn_at_most(before, q, c.max_rotation_step)
            if angle > c.max_rotation_step:
                found.append(self.violation(GEOMETRY, f"attitude turns {angle:.3f} rad from the previous command: "
                                                      f"slerped to {c.max_rotation_step} rad", now))  # fmt: skip
        tilt = tilt_of(q)
        if c.max_tilt is not None and tilt > c.max_tilt:
            return q, f"attitude tilted {tilt:.3f} rad from level, above {c.max_tilt}"
        return q, None

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
        if position is not None and any(np.all(position >= lo) and np.all(position <= hi) for lo, hi in c.keep_out):
            return self.violation(KEEP_OUT, f"position {np.round(position, 3).tolist()} inside a keep-out box").detail
        if velocity is not None and c.max_speed is not None:
            speed = float(np.linalg.norm(velocity))
            if not speed <= c.max_speed:
                return self.violation(SPEED, f"speed {speed:.2f} m/s above {c.max_speed}").detail
        return None


class Watchdog:
    """A thread that calls `on_timeout` once `last_time()` is older than `timeout` s. It sleeps until the present
    deadline (last command + timeout) rather than polling, so its lateness is only the OS's and the GIL's wake-up
    latency (measured by tests/real_robot/test_watchdog_latency.py, cited at SafetyConfig.watchdog_periods). The control
    path calls `poll` too (Robot.send_action): a command that comes after the deadline fires the failsafe instead
    of going out, however late the thread wakes."""

    def __init__(self, timeout: float, last_time: Callable[[], float | None], on_timeout: Callable[[str], None]):
        self.timeout, self._last_time, self._on_timeout = timeout, last_time, on_timeout
        self._stop = threading.Event()
        self._lock = threading.Lock()  # the thread and the control path both poll
        self._thread = threading.Thread(target=self._run, name="safety-watchdog", daemon=True)
        self.fired_at: float | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)

    def poll(self, now: float) -> float | None:
        """Fire if the deadline passed before `now`; returns when the next check is due (None: no command yet)."""
        with self._lock:
            last = self._last_time()
            if last is None:
                return None
            if self.fired_at is not None:
                if last <= self.fired_at:
                    return None  # fired; nothing to watch until commands resume
                self.fired_at = None  # commands resumed after the operator cleared the failsafe
            if now - last <= self.timeout:
                return last + self.timeout
            self.fired_at = now
        self._on_timeout(f"no command for {(now - last) * 1e3:.1f} ms")  # outside the lock: it takes the robot's
        return None

    def _run(self) -> None:
        idle = self.timeout / 4  # with no deadline (no command yet, or fired): look again this often
        due: float | None = None
        while not self._stop.wait(idle if due is None else max(due - time.monotonic(), 0.0) + 1e-4):
            due = self.poll(time.monotonic())  # 0.1 ms past the deadline: Event.wait may return a hair early
