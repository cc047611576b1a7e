"""A MAVLink vehicle simulator: the quadrotor sim behind a real MAVLink endpoint on UDP (SITL style).

    with MavlinkVehicleSim(MavlinkVehicleConfig()) as vehicle:   # a thread; vehicle.port is the UDP port
        drone = MavlinkDrone(MavlinkDroneConfig(url=f"udpout:127.0.0.1:{vehicle.port}"))

It behaves like a PX4 multicopter as far as an offboard companion sees it (MAVLink common
messages, PX4 custom modes): HEARTBEAT at 1 Hz; LOCAL_POSITION_NED, ATTITUDE_QUATERNION and
HIGHRES_IMU (the accelerometer's specific force, m/s^2) at `telemetry_hz` in NED / FRD;
COMMAND_LONG for arming (MAV_CMD_COMPONENT_ARM_DISARM, 21196 in param2 forces a disarm in the air, as PX4), MAV_CMD_DO_SET_MODE (PX4 main/sub modes) and
MAV_CMD_NAV_LAND, each answered with COMMAND_ACK. Offboard setpoints: SET_ACTUATOR_CONTROL_TARGET
(group 0, controls 0-3 = the quadrotor env's motor action, so a policy trained in the sim flies
the motors directly), SET_POSITION_TARGET_LOCAL_NED (position and/or velocity) and
SET_ATTITUDE_TARGET (attitude quaternion + normalized thrust). OFFBOARD is granted only while
setpoints stream (PX4 requires > 2 Hz before the switch). Failsafe: no setpoint for
`offboard_loss_timeout` in OFFBOARD -> LAND (PX4 COM_OF_LOSS_T, default 1 s, then its
offboard-loss action); LAND descends at `land_speed` (PX4 MPC_LAND_SPEED, default 0.7 m/s) and
disarms on touchdown. `link_up = False` drops every packet both ways (a radio dropout).
Every setpoint received is recorded in `received` for tests.
`disturbance`: a preset of the quadrotor env (sims/quadrotor/disturbance.py: none, push, gust, payload, motor,
all, mix) acting in the vehicle's physics from its first switch to OFFBOARD (the flight's start), drawn from
`disturbance_seed` for a flight of `disturbance_s` (the push and the gust onset fall in its [15%, 50%], as in
an episode of the env); the draws are logged in `events`.
"""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass

import numpy as np

from embodied.config import check
from real_robot.sim.flight_controller import FlightController, quat_to_matrix
from real_robot.sim.quadrotor_body import QuadrotorBody, describe
from sims.quadrotor.disturbance import PRESETS
from sims.quadrotor.dynamics import CrazyflieParams

# PX4 custom modes (px4_custom_mode.h): main mode in bits 16-23, sub mode in bits 24-31
PX4_MAIN_AUTO, PX4_MAIN_OFFBOARD = 4, 6
PX4_SUB_AUTO_LOITER, PX4_SUB_AUTO_LAND = 3, 6
MODES = {"HOLD": (PX4_MAIN_AUTO, PX4_SUB_AUTO_LOITER), "LAND": (PX4_MAIN_AUTO, PX4_SUB_AUTO_LAND),
         "OFFBOARD": (PX4_MAIN_OFFBOARD, 0)}  # fmt: skip
FORCE_DISARM = 21196  # MAV_CMD_COMPONENT_ARM_DISARM param2 magic (PX4, ArduPilot)
FLU_TO_NED = np.diag([1.0, -1.0, -1.0])  # sim world (z up) / body FLU <-> NED / FRD: a half turn about x
GRAVITY = CrazyflieParams().gravity  # m/s^2 per g, the sim's value, for accelerometer readings


def mavlink_module():
    """pymavlink's mavutil with MAVLink 2 (the env var is read when a connection picks its dialect)."""
    os.environ.setdefault("MAVLINK20", "1")
    from pymavlink import mavutil

    return mavutil


def px4_mode(custom_mode: int) -> str:
    main, sub = (custom_mode >> 16) & 0xFF, (custom_mode >> 24) & 0xFF
    for name, (m, s) in MODES.items():
        if main == m and (s == 0 or sub == s):
            return name
    return f"main{main}/sub{sub}"


@dataclass(frozen=True)
class MavlinkVehicleConfig:
    address: str = "127.0.0.1"  # UDP address the vehicle listens on
    port: int = 0  # 0: a free port (read MavlinkVehicleSim.port)
    env: str = "quadrotor_hover"  # registered quadrotor env whose physics flies
    start: tuple[float, float, float] = (0.0, 0.0, 0.0)  # m, world z up
    ground_z: float = -1.0  # m, the ground plane (the start hovers 1 m above it)
    start_armed: bool = True  # True: armed and holding position at `start` (in the air); False: disarmed
    telemetry_hz: float = 100.0
    offboard_loss_timeout: float = 1.0  # s (PX4 COM_OF_LOSS_T default)
    land_speed: float = 0.7  # m/s (PX4 MPC_LAND_SPEED default)
    system_id: int = 1
    disturbance: str = "none"  # a preset of sims/quadrotor/disturbance.py, from the first switch to OFFBOARD
    disturbance_seed: int = 0  # seed of the preset's draws
    disturbance_s: float = 3.0  # s, the flight the preset's timings are drawn for (default: a hover episode's)

    def __post_init__(self):
        check(self.telemetry_hz > 0 and self.offboard_loss_timeout > 0 and self.land_speed > 0,
              "telemetry_hz, offboard_loss_timeout and land_speed must be > 0")  # fmt: skip
        check(self.start[2] >= self.ground_z, "start must not be below ground_z")
        check(self.disturbance in PRESETS,
              f"disturbance={self.disturbance!r} is not a preset; valid presets: {', '.join(PRESETS)}")
        check(self.disturbance_s > 0, f"disturbance_s={self.disturbance_s} must be > 0")


class MavlinkVehicleSim:
    """The simulated vehicle; `start()` runs it in real time in a daemon thread."""

    def __init__(self, config: MavlinkVehicleConfig = MavlinkVehicleConfig()):
        self.config = config
        mavutil = mavlink_module()
        self.mavlink = mavutil.mavlink
        self.conn = mavutil.mavlink_connection(f"udpin:{config.address}:{config.port}",
                                               source_system=config.system_id, source_component=1)  # fmt: skip
        self.port = self.conn.port.getsockname()[1]
        self.body = QuadrotorBody(config.env, config.start, config.ground_z, config.disturbance)
        self.disturbed = False  # the preset has started (at the first switch to OFFBOARD)
        self.fc = FlightController(self.body.dt)
        self.armed = config.start_armed and not self.body.landed
        self.mode = "HOLD"
        self.hold_position = np.array(config.start, dtype=np.float64)
        self.setpoint: tuple[str, np.ndarray] | None = None
        self.last_setpoint_time = -math.inf
        self.link_up = True
        self.received: list[tuple[float, str, np.ndarray]] = []  # (time, kind, values) of every setpoint
        self.events: list[tuple[float, str]] = []  # mode changes, arming, failsafes
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mavlink-vehicle", daemon=True)
        self._t0 = time.monotonic()
        self._announce = False  # send a heartbeat now (mode or arming changed), as PX4 does

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> MavlinkVehicleSim:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)
        self.conn.close()

    def __enter__(self) -> MavlinkVehicleSim:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def state(self) -> dict[str, np.ndarray]:
        with self.lock:
            return self.body.state()

    def set_link(self, up: bool) -> None:
        self.link_up = up

    # ---- the loop ----------------------------------------------------------------------------
    def _run(self) -> None:
        dt, tick, next_heartbeat = self.body.dt, 0, 0.0
        telemetry_every = max(1, round(1.0 / (self.config.telemetry_hz * dt)))
        while not self._stop.is_set():
            now = time.monotonic()
            self._receive(now)
            with self.lock:
                self._control_step(now)
            if tick % telemetry_every == 0:
                self._send_telemetry(now)
            if now >= next_heartbeat or self._announce:
                self._announce = False
                self._send_heartbeat()
                next_heartbeat = now + 1.0  # MAVLink heartbeat: 1 Hz
            tick += 1
            delay = self._t0 + tick * dt - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            elif delay < -0.1:  # far behind (machine overloaded): drop the backlog, stay real-time
                self._t0, tick = time.monotonic(), 0

    def _control_step(self, now: float) -> None:
        state = self.body.state()
        if self.armed and self.mode == "OFFBOARD" and now - self.last_setpoint_time > self.config.offboard_loss_timeout:
            self._set_mode("LAND", "failsafe: offboard setpoints lost")
        if not self.armed:
            action = -np.ones(4)  # rotors off
        elif self.mode == "LAND":
            target = np.array([self.hold_position[0], self.hold_position[1], state["position"][2]])
            action = self.fc.motor_action(state, target, np.array([0.0, 0.0, -self.config.land_speed]))
        elif self.mode == "OFFBOARD" and self.setpoint is not None:
            action = self._offboard_action(state)
        else:  # HOLD
            action = self.fc.motor_action(state, self.hold_position)
        self.body.step(action)
        if self.body.landed and self.mode == "LAND" and self.armed:
            self.armed = False
            self.events.append((now, "disarmed: landed"))
            self._announce = True

    def _offboard_action(self, state: dict[str, np.ndarray]) -> np.ndarray:
        kind, values = self.setpoint
        if kind == "actuator":
            self.fc.reset(state["motor_speed"])  # keep the controller's rotor prediction current for a handover
            return values
        if kind == "attitude":
            q, thrust = values[:4], values[4]
            r = quat_to_matrix(q)
            force = r[:, 2] * thrust * 4 * self.fc.v.max_thrust / self.fc.v.mass
            return self.fc.attitude_action(state, force, math.atan2(r[1, 0], r[0, 0]))
        pos, vel = values[:3], values[3:6]
        return self.fc.motor_action(state, None if np.isnan(pos).any() else pos, None if np.isnan(vel).any() else vel)

    # ---- MAVLink in --------------------------------------------------------------------------
    def _receive(self, now: float) -> None:
        while True:
            msg = self.conn.recv_match(blocking=False)
            if msg is None:
                return
            if not self.link_up:
                continue
            kind = msg.get_type()
            if kind == "SET_ACTUATOR_CONTROL_TARGET":
                self._accept("actuator", np.array(msg.controls[:4], dtype=np.float64), now, limit=1.0)
            elif kind == "SET_POSITION_TARGET_LOCAL_NED":
                m = msg.type_mask
                pos = np.array([msg.x, msg.y, msg.z]) if not m & 0b111 else np.full(3, np.nan)
                vel = np.array([msg.vx, msg.vy, msg.vz]) if not m & 0b111000 else np.full(3, np.nan)
                self._accept("position", np.concatenate([FLU_TO_NED @ pos, FLU_TO_NED @ vel]), now)
            elif kind == "SET_ATTITUDE_TARGET":
                w, x, y, z = msg.q
                self._accept("attitude", np.array([w, x, -y, -z, msg.thrust]), now)  # FRD -> FLU: conjugate by P
            elif kind == "COMMAND_LONG":
                self._command(msg, now)
            elif kind == "HEARTBEAT":  # a companion's heartbeat: answer at once so it need not wait a second
                self._announce = True

    def _accept(self, kind: str, values: np.ndarray, now: float, limit: float | None = None) -> None:
        with self.lock:
            self.received.append((now, kind, values.copy()))
            finite = values[~np.isnan(values)] if kind == "position" else values
            if not np.isfinite(finite).all():
                self.events.append((now, f"rejected non-finite {kind} setpoint"))  # firmware sanity check
                return
            self.setpoint = (kind, values if limit is None else np.clip(values, -limit, limit))
            self.last_setpoint_time = now

    def _command(self, msg, now: float) -> None:
        mav = self.mavlink
        result = mav.MAV_RESULT_ACCEPTED
        with self.lock:
            if msg.command == mav.MAV_CMD_COMPONENT_ARM_DISARM:
                if msg.param1 >= 0.5:
                    self.armed = True
                    self.hold_position = self.body.state()["position"].copy()
                    self.events.append((now, "armed"))
                    self._announce = True
                elif self.body.landed or int(msg.param2) == FORCE_DISARM:
                    self.armed = False
                    self.events.append((now, "disarmed" + (" (forced)" if not self.body.landed else "")))
                    self._announce = True
                else:
                    result = mav.MAV_RESULT_DENIED  # PX4 refuses a normal disarm in the air
            elif msg.command == mav.MAV_CMD_NAV_LAND:
                self._set_mode("LAND", "land command")
            elif msg.command == mav.MAV_CMD_DO_SET_MODE:
                mode = px4_mode((int(msg.param2) << 16) | (int(msg.param3) << 24))
                streaming = now - self.last_setpoint_time < 0.5  # PX4: offboard needs setpoints already streaming
                if mode not in MODES or (mode == "OFFBOARD" and not streaming):
                    result = mav.MAV_RESULT_DENIED
                else:
                    self._set_mode(mode, "set mode")
            else:
                result = mav.MAV_RESULT_UNSUPPORTED
        self._send(mav.MAVLink_command_ack_message(msg.command, result, 0, 0, msg.get_srcSystem(), msg.get_srcComponent()))

    def _set_mode(self, mode: str, why: str) -> None:
        if mode != self.mode:
            self.mode = mode
            self.hold_position = self.body.state()["position"].copy()
            now = time.monotonic()
            self.events.append((now, f"mode {mode}: {why}"))
            self._announce = True
            if mode == "OFFBOARD" and not self.disturbed and self.config.disturbance != "none":
                self.disturbed = True
                c = self.config
                rows = self.body.disturb(c.disturbance_seed, max(1, round(c.disturbance_s / self.body.dt)))
                self.events.append((now, f"disturbance {c.disturbance} (seed {c.disturbance_seed}) from now: "
                                         f"{describe(rows, self.body.dt)}"))  # fmt: skip

    # ---- MAVLink out -------------------------------------------------------------------------
    def _send(self, msg) -> None:
        if self.link_up:
            try:
                self.conn.mav.send(msg)
            except OSError:  # no peer yet (udpin learns its peer from the first packet)
                pass

    def _send_heartbeat(self) -> None:
        mav = self.mavlink
        main, sub = MODES[self.mode]
        base = mav.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED | (mav.MAV_MODE_FLAG_SAFETY_ARMED if self.armed else 0)
        status = mav.MAV_STATE_ACTIVE if self.armed else mav.MAV_STATE_STANDBY
        self._send(mav.MAVLink_heartbeat_message(mav.MAV_TYPE_QUADROTOR, mav.MAV_AUTOPILOT_PX4, base,
                                                 (main << 16) | (sub << 24), status, 3))  # fmt: skip

    def _send_telemetry(self, now: float) -> None:
        with self.lock:
            s = self.body.state()
        ms = int((now - self._t0) * 1000) & 0xFFFFFFFF
        p, v, w = FLU_TO_NED @ s["position"], FLU_TO_NED @ s["velocity"], FLU_TO_NED @ s["angular_velocity"]
        qw, qx, qy, qz = s["quaternion"]
        mav = self.mavlink
        self._send(mav.MAVLink_local_position_ned_message(ms, *p, *v))
        self._send(mav.MAVLink_attitude_quaternion_message(ms, qw, qx, -qy, -qz, *w, [0.0] * 4))
        # thrust / mass along body z (FLU up = FRD -z); bits 0-5 of fields_updated: acc and gyro valid
        acc = -float(s["specific_force"]) * GRAVITY
        mag_pressure_temperature = [0.0] * 7
        self._send(mav.MAVLink_highres_imu_message(ms * 1000, 0.0, 0.0, acc, *w, *mag_pressure_temperature, 0b111111))


class MavlinkVehicleProcess:
    """`MavlinkVehicleSim` in a child process (as a SITL binary runs beside the companion): the vehicle's
    physics then never competes with the control loop for the GIL. Same read-outs, fetched over a pipe."""

    def __init__(self, config: MavlinkVehicleConfig = MavlinkVehicleConfig()):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")  # a fresh interpreter: no copied threads or torch state
        self._pipe, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(config, child), name="mavlink-vehicle", daemon=True)
        self.config = config

    def start(self) -> MavlinkVehicleProcess:
        self._proc.start()
        if not self._pipe.poll(60):
            raise RuntimeError("the MAVLink vehicle process did not start within 60 s")
        self.port = self._pipe.recv()
        return self

    def _ask(self, *request):
        self._pipe.send(request)
        return self._pipe.recv()

    def state(self) -> dict[str, np.ndarray]:
        return self._ask("state")

    def __getattr__(self, name: str):
        if name in ("received", "events", "mode", "armed", "link_up"):
            return self._ask("get", name)
        raise AttributeError(name)

    def set_link(self, up: bool) -> None:
        self._ask("link", up)

    def stop(self) -> None:
        if self._proc.is_alive():
            self._ask("stop")
            self._proc.join(timeout=5)
        if self._proc.is_alive():
            self._proc.kill()

    def __enter__(self) -> MavlinkVehicleProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _serve(config: MavlinkVehicleConfig, pipe) -> None:
    import torch

    torch.set_num_threads(1)
    sim = MavlinkVehicleSim(config).start()
    pipe.send(sim.port)
    while True:
        request = pipe.recv()
        if request[0] == "stop":
            sim.stop()
            pipe.send(None)
            return
        if request[0] == "state":
            pipe.send(sim.state())
        elif request[0] == "link":
            sim.link_up = bool(request[1])
            pipe.send(None)
        else:
            with sim.lock:
                value = getattr(sim, request[1])
                pipe.send(list(value) if isinstance(value, list) else value)
