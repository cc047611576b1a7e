"""A MAVLink drone driver (pymavlink): heartbeat, arming, offboard setpoints, telemetry.

    drone = MavlinkDrone(MavlinkDroneConfig(url="udpout:127.0.0.1:14540", mode="actuator"))
    drone.connect()          # heartbeat handshake, arm, stream setpoints, switch to OFFBOARD
    obs = drone.get_observation()    # position, velocity (world z up), quaternion, angular_velocity (body FLU)
    drone.send_action(motors)        # through the safety layer -> one setpoint message

Offboard setpoint `mode`s (the command a policy sends):
- "actuator": 4 motor commands in [-1, 1] (the quadrotor sim's action, 0 = hover) as
  SET_ACTUATOR_CONTROL_TARGET group 0: a policy trained in the sim flies the motors directly.
- "position": target position [3] m (world, z up) as SET_POSITION_TARGET_LOCAL_NED.
- "velocity": target velocity [3] m/s as SET_POSITION_TARGET_LOCAL_NED (position ignored).
- "attitude": quaternion (w, x, y, z, body FLU -> world) and normalized thrust [5] as SET_ATTITUDE_TARGET.
Telemetry (LOCAL_POSITION_NED, ATTITUDE_QUATERNION, HIGHRES_IMU in NED / FRD) is converted to the sim's frames
(world z up, body FLU) by a half turn about x. A receive thread keeps the newest of each; when
none arrived for `link_timeout` the observation says `link_lost` and the robot fails safe.
Failsafe (watchdog, geofence, speed, link): MAV_CMD_NAV_LAND. Emergency stop: forced disarm.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from embodied.config import check
from embodied.specs import Meaning, Spec
from real_robot.robot import Robot, RobotConfig, RobotError
from real_robot.safety import LINK, SafetyConfig, fill_defaults
from real_robot.sim.mavlink_vehicle import FLU_TO_NED, FORCE_DISARM, GRAVITY, MODES, mavlink_module, px4_mode

# SET_POSITION_TARGET_LOCAL_NED type_mask bits (MAVLink POSITION_TARGET_TYPEMASK): ignore ...
_IGNORE_POS, _IGNORE_VEL, _IGNORE_ACC, _IGNORE_YAW_RATE = 0b111, 0b111000, 0b111000000, 2048
_DIMS = {"actuator": 4, "position": 3, "velocity": 3, "attitude": 5}


FENCE_LOW, FENCE_HIGH = (-3.0, -3.0, -1.5), (3.0, 3.0, 2.0)  # m around the start (ground 1 m below it)


def _drone_safety(mode: str = "actuator") -> SafetyConfig:
    """Default limits per setpoint mode: the motor range; the fence and a 0.5 m carrot for positions (their path
    checked against any keep_out boxes a site adds); 2 m/s for velocities; for attitudes a unit quaternion
    (normalised within 0.02, else rejected), tilted at most 45 deg, turning at most 0.2 rad per command, and thrust
    in [0, 0.9]."""
    low, high, step = {
        "actuator": ((-1.0,) * 4, (1.0,) * 4, None),
        "position": (FENCE_LOW, FENCE_HIGH, 0.5),
        "velocity": ((-2.0,) * 3, (2.0,) * 3, None),
        "attitude": ((-1.0,) * 4 + (0.0,), (1.0,) * 4 + (0.9,), None),
    }[mode]
    attitude = mode == "attitude"
    return SafetyConfig(
        low=low, high=high, max_step=step,
        position_slice=(0, 3) if mode == "position" else None,
        quaternion_slice=(0, 4) if attitude else None,
        max_tilt=math.radians(45) if attitude else None,  # PX4 MPC_TILTMAX_AIR default: 45 deg
        # rad per command: at 100 Hz 20 rad/s, 5x PX4's MC_ROLLRATE_MAX default (220 deg/s): a jump (a policy's
        # sign flip), not agile flight
        max_rotation_step=0.2 if attitude else None,
        max_command_age=0.05,  # s: at 100 Hz a command from an observation 5 periods old is stale
        geofence_low=FENCE_LOW, geofence_high=FENCE_HIGH,
        max_speed=5.0,  # m/s
    )  # fmt: skip


@dataclass(frozen=True)
class MavlinkDroneConfig(RobotConfig):
    """A MAVLink (PX4-style) multicopter flown offboard."""

    control_hz: float = 100.0  # the quadrotor sim's control rate (dt = 0.01 s)
    safety: SafetyConfig = field(default_factory=SafetyConfig)  # unset limits: the mode's defaults (_drone_safety)
    url: str = "udpout:127.0.0.1:14540"  # pymavlink connection string (PX4 SITL offboard port 14540)
    mode: Literal["actuator", "position", "velocity", "attitude"] = "actuator"  # offboard setpoint type
    arm: bool = True  # arm on connect (if disarmed)
    offboard: bool = True  # switch to OFFBOARD on connect
    heartbeat_timeout: float = 3.0  # s to wait for the vehicle's heartbeat on connect
    link_timeout: float = 0.5  # s without telemetry -> link lost -> failsafe
    land_on_disconnect: bool = True  # disconnect sends MAV_CMD_NAV_LAND while airborne
    system_id: int = 255  # our MAVLink system id (255: ground station convention)
    component_id: int = 191  # MAV_COMP_ID_ONBOARD_COMPUTER

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "safety", fill_defaults(self.safety, _drone_safety(self.mode)))
        n = _DIMS[self.mode]
        check(not self.safety.low or len(self.safety.low) == n,
              f"robot.safety.low/high need {n} entries for mode={self.mode!r}")  # fmt: skip
        check(self.link_timeout > 0 and self.heartbeat_timeout > 0, "link_timeout and heartbeat_timeout must be > 0")


class MavlinkDrone(Robot):
    Config = MavlinkDroneConfig
    observation_spec = {"position": Spec((3,), meaning=Meaning.POSITION),
                        "velocity": Spec((3,), meaning=Meaning.VELOCITY),
                        "quaternion": Spec((4,), meaning=Meaning.QUATERNION),
                        "angular_velocity": Spec((3,), meaning=Meaning.ANGULAR_VELOCITY),
                        "specific_force": Spec((), meaning=Meaning.SPECIFIC_FORCE)}  # fmt: skip
    action_key = None  # deploy sends the policy's action itself
    # what a command means in each setpoint mode: deploy refuses a policy whose action means something else
    action_meaning = {"actuator": Meaning.MOTOR_COMMAND, "position": Meaning.POSITION, "velocity": Meaning.VELOCITY,
                      "attitude": f"{Meaning.QUATERNION}; thrust [0, 1]"}  # fmt: skip

    def __init__(self, config: MavlinkDroneConfig = MavlinkDroneConfig()):
        self.action_spec = Spec((_DIMS[config.mode],), torch.float32, meaning=self.action_meaning[config.mode])
        super().__init__(config)
        self.simulated = "127.0.0.1" in config.url or "localhost" in config.url
        self.conn = None
        self.telemetry: dict[str, tuple[float, Any]] = {}
        self.acks: dict[int, int] = {}
        self._stop = threading.Event()
        self._rx: threading.Thread | None = None

    # ---- hooks -------------------------------------------------------------------------------
    def _connect(self) -> None:
        mavutil = mavlink_module()
        self.mav = mavutil.mavlink
        c = self.config
        self.conn = mavutil.mavlink_connection(c.url, source_system=c.system_id, source_component=c.component_id)
        self._stop.clear()
        self.telemetry, self.acks = {}, {}
        self._rx = threading.Thread(target=self._receive, name="mavlink-rx", daemon=True)
        self._rx.start()
        deadline = time.monotonic() + c.heartbeat_timeout
        while "HEARTBEAT" not in self.telemetry or "LOCAL_POSITION_NED" not in self.telemetry:
            self._heartbeat()
            if time.monotonic() > deadline:
                self._close()
                raise RobotError(f"no heartbeat and telemetry from a vehicle at {c.url} within {c.heartbeat_timeout} s")
            time.sleep(0.05)
        if c.arm and not self.armed:
            self._command(self.mav.MAV_CMD_COMPONENT_ARM_DISARM, 1.0)
        if c.offboard:
            for _ in range(5):  # PX4 switches to OFFBOARD only while setpoints stream
                self._write(self._neutral())
                time.sleep(0.02)
            main, sub = MODES["OFFBOARD"]
            self._command(self.mav.MAV_CMD_DO_SET_MODE, self.mav.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED, main, sub)
            deadline = time.monotonic() + 1.0
            while self.mode != "OFFBOARD" and time.monotonic() < deadline:  # the heartbeat announcing it follows the ACK
                self._write(self._neutral())
                time.sleep(0.01)

    def _read(self) -> dict[str, Any]:
        now = time.monotonic()
        t_pos, pos = self.telemetry["LOCAL_POSITION_NED"]
        att = self.telemetry.get("ATTITUDE_QUATERNION")
        imu = self.telemetry.get("HIGHRES_IMU")
        q = (1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0) if att is None else att[1]
        obs = {
            "position": (FLU_TO_NED @ pos[:3]).astype(np.float32),
            "velocity": (FLU_TO_NED @ pos[3:]).astype(np.float32),
            "quaternion": np.array([q[0], q[1], -q[2], -q[3]], np.float32),  # FRD/NED -> FLU/z-up
            "angular_velocity": (FLU_TO_NED @ np.asarray(q[4:7])).astype(np.float32),
            # body-z specific force in g (FLU up = FRD -z); 1 g (a level hover) until the IMU reports
            "specific_force": np.float32(1.0 if imu is None else -imu[1] / GRAVITY),
            "armed": self.armed, "mode": self.mode,
            "link_lost": now - max(t_pos, att[0] if att else t_pos) > self.config.link_timeout,
        }  # fmt: skip
        return obs

    def _measure(self) -> np.ndarray | None:
        """Position mode: the newest position telemetry (the receive thread keeps it current), not the last
        observation's; the other modes' commands are not states."""
        if self.config.mode != "position":
            return None
        t_pos, pos = self.telemetry["LOCAL_POSITION_NED"]
        if time.monotonic() - t_pos > self.config.link_timeout:  # no present position to step from
            self.failsafe("link lost: no telemetry", LINK)
            return None
        return FLU_TO_NED @ pos[:3]

    def _write(self, command: np.ndarray) -> None:
        mav, c, t = self.mav, self.conn, int(time.monotonic() * 1e6)
        if self.config.mode == "actuator":
            msg = mav.MAVLink_set_actuator_control_target_message(t, 0, 1, 1, [*map(float, command), 0.0, 0.0, 0.0, 0.0])
        elif self.config.mode == "attitude":
            w, x, y, z, thrust = map(float, command)
            msg = mav.MAVLink_set_attitude_target_message(t // 1000, 1, 1, 0b111, [w, x, -y, -z], 0, 0, 0, thrust)
        else:
            ned = FLU_TO_NED @ command.astype(np.float64)
            zeros, position = [0.0] * 3, self.config.mode == "position"
            mask = _IGNORE_ACC | _IGNORE_YAW_RATE | (_IGNORE_VEL if position else _IGNORE_POS)
            msg = mav.MAVLink_set_position_target_local_ned_message(
                t // 1000, 1, 1, mav.MAV_FRAME_LOCAL_NED, mask,
                *(ned if position else zeros), *(zeros if position else ned), *zeros, 0.0, 0.0)  # fmt: skip
        c.mav.send(msg)

    def _failsafe(self, reason: str) -> None:
        self._command(self.mav.MAV_CMD_NAV_LAND, wait=False)

    def _estop(self) -> None:
        self._command(self.mav.MAV_CMD_COMPONENT_ARM_DISARM, 0.0, FORCE_DISARM, wait=False)

    def _clear(self) -> None:
        pass  # the vehicle stays in LAND / HOLD until the next connect switches modes

    def _disconnect(self) -> None:
        if self.config.land_on_disconnect and self.armed and self.mode != "LAND":
            self._command(self.mav.MAV_CMD_NAV_LAND, wait=False)
        self._close()

    # ---- MAVLink plumbing --------------------------------------------------------------------
    @property
    def armed(self) -> bool:
        hb = self.telemetry.get("HEARTBEAT")
        return bool(hb and hb[1].base_mode & self.mav.MAV_MODE_FLAG_SAFETY_ARMED)

    @property
    def mode(self) -> str:
        hb = self.telemetry.get("HEARTBEAT")
        return px4_mode(hb[1].custom_mode) if hb else "unknown"

    def _neutral(self) -> np.ndarray:
        """The setpoint that holds still: hover motors, the present position, zero velocity, level hover thrust."""
        mode = self.config.mode
        if mode == "actuator" or mode == "velocity":
            return np.zeros(_DIMS[mode])
        if mode == "position":
            return FLU_TO_NED @ self.telemetry["LOCAL_POSITION_NED"][1][:3]
        return np.array([1.0, 0.0, 0.0, 0.0, 0.44])  # about the Crazyflie's hover thrust fraction

    def _heartbeat(self) -> None:
        self.conn.mav.heartbeat_send(self.mav.MAV_TYPE_ONBOARD_CONTROLLER, self.mav.MAV_AUTOPILOT_INVALID, 0, 0, 0)

    def _command(self, command: int, *params: float, wait: bool = True, timeout: float = 1.0) -> None:
        p = [*params, *[0.0] * (7 - len(params))]
        self.acks.pop(command, None)
        self.conn.mav.command_long_send(1, 1, command, 0, *p)
        if not wait:
            return
        deadline = time.monotonic() + timeout
        while command not in self.acks:
            if time.monotonic() > deadline:
                raise RobotError(f"MAVLink command {command} got no COMMAND_ACK within {timeout} s")
            if self.config.offboard and command == self.mav.MAV_CMD_DO_SET_MODE:
                self._write(self._neutral())  # keep the setpoint stream alive while waiting
            time.sleep(0.01)
        if self.acks[command] != self.mav.MAV_RESULT_ACCEPTED:
            raise RobotError(f"the vehicle refused MAVLink command {command} (MAV_RESULT {self.acks[command]})")

    def _receive(self) -> None:
        last_heartbeat = 0.0
        while not self._stop.is_set():
            msg = self.conn.recv_match(blocking=True, timeout=0.05)
            now = time.monotonic()
            if now - last_heartbeat > 1.0:  # ours, 1 Hz: the vehicle sees its companion is alive
                self._heartbeat()
                last_heartbeat = now
            if msg is None:
                continue
            kind = msg.get_type()
            if kind == "LOCAL_POSITION_NED":
                self.telemetry[kind] = (now, np.array([msg.x, msg.y, msg.z, msg.vx, msg.vy, msg.vz]))
            elif kind == "ATTITUDE_QUATERNION":
                self.telemetry[kind] = (now, (msg.q1, msg.q2, msg.q3, msg.q4, msg.rollspeed, msg.pitchspeed, msg.yawspeed))
            elif kind == "HIGHRES_IMU":
                self.telemetry[kind] = (now, msg.zacc)
            elif kind == "HEARTBEAT" and msg.get_srcSystem() == 1:
                self.telemetry[kind] = (now, msg)
            elif kind == "COMMAND_ACK":
                self.acks[msg.command] = msg.result

    def _close(self) -> None:
        self._stop.set()
        if self._rx is not None:
            self._rx.join(timeout=1.0)
        if self.conn is not None:
            self.conn.close()
            self.conn = None
