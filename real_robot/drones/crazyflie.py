"""A Crazyflie driver over cflib: position or velocity setpoints out, state-estimate logging in.

    drone = CrazyflieDrone(CrazyflieConfig(uri="radio://0/80/2M/E7E7E7E7E7", mode="position"))

`connect` opens cflib's link (`Crazyflie.open_link`: link service, protocol version, log and
parameter TOCs) and starts log blocks at `log_hz` for stateEstimate position, velocity and
quaternion and the gyro. Commands: "position" [x, y, z] m (`send_position_setpoint`, yaw 0) or
"velocity" [vx, vy, vz] m/s (`send_velocity_world_setpoint`), in the Crazyflie's world frame
(x forward, y left, z up: the sim's). A Crazyflie 2.1 runs its policy on board (as Learning to
Fly in Seconds does); over the radio it takes setpoints for its own controllers.
Failsafe (watchdog, geofence, speed, link): a controlled descent, velocity setpoints of
`descent_speed` down until the logged height is within 5 cm of `ground_z`, then a stop setpoint.
Emergency stop: a stop setpoint (motors off). If the link itself is gone, the firmware's
commander watchdog levels the vehicle after 0.5 s and stops the motors after 2 s.
"""

from __future__ import annotations

import logging
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

STATE_VARS = ("stateEstimate.x", "stateEstimate.y", "stateEstimate.z", "stateEstimate.vx", "stateEstimate.vy",
              "stateEstimate.vz")  # fmt: skip
QUAT_VARS = ("stateEstimate.qw", "stateEstimate.qx", "stateEstimate.qy", "stateEstimate.qz")
GYRO_VARS = ("gyro.x", "gyro.y", "gyro.z")  # deg/s
FENCE_LOW, FENCE_HIGH = (-2.0, -2.0, -1.2), (2.0, 2.0, 1.5)  # m around the start (ground 1 m below)


def _crazyflie_safety(mode: str = "position") -> SafetyConfig:
    low, high, step = {"position": (FENCE_LOW, FENCE_HIGH, 0.3), "velocity": ((-1.0,) * 3, (1.0,) * 3, None)}[mode]
    return SafetyConfig(low=low, high=high, max_step=step, max_command_age=0.1, geofence_low=FENCE_LOW,
                        geofence_high=FENCE_HIGH, max_speed=3.0,
                        position_slice=(0, 3) if mode == "position" else None)  # keep_out boxes: per site  # fmt: skip


@dataclass(frozen=True)
class CrazyflieConfig(RobotConfig):
    """A Crazyflie 2.x flown with setpoints over cflib."""

    control_hz: float = 50.0  # setpoint rate; the firmware's commander expects > 2 Hz (500 ms watchdog)
    safety: SafetyConfig = field(default_factory=SafetyConfig)  # unset limits: _crazyflie_safety(mode)
    uri: str = "radio://0/80/2M/E7E7E7E7E7"  # cflib link URI (udp://host:port for simulation)
    mode: Literal["position", "velocity"] = "position"
    log_hz: float = 100.0  # state-estimate log rate (the firmware's log period is in 10 ms units)
    connect_timeout: float = 5.0  # s
    link_timeout: float = 0.3  # s without log data -> link lost
    ground_z: float = -1.0  # m, where the controlled descent ends (world z of the floor)
    descent_speed: float = 0.3  # m/s

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "safety", fill_defaults(self.safety, _crazyflie_safety(self.mode)))
        check(0 < self.log_hz <= 100, f"log_hz={self.log_hz} must be in (0, 100]")
        check(self.descent_speed > 0 and self.link_timeout > 0, "descent_speed and link_timeout must be > 0")


class CrazyflieDrone(Robot):
    Config = CrazyflieConfig
    observation_spec = {"position": Spec((3,), meaning=Meaning.POSITION),
                        "velocity": Spec((3,), meaning=Meaning.VELOCITY),
                        "quaternion": Spec((4,), meaning=Meaning.QUATERNION),
                        "angular_velocity": Spec((3,), meaning=Meaning.ANGULAR_VELOCITY)}  # fmt: skip
    action_key = None
    # what a setpoint means in each mode (action_spec, set per instance): deploy refuses a policy meaning otherwise
    action_meaning = {"position": Meaning.POSITION, "velocity": Meaning.VELOCITY}

    def __init__(self, config: CrazyflieConfig = CrazyflieConfig()):
        self.action_spec = Spec((3,), torch.float32, meaning=self.action_meaning[config.mode])
        super().__init__(config)
        self.simulated = config.uri.startswith("udp://127.0.0.1")
        self.cf = None
        self.values: dict[str, float] = {}
        self.last_log = 0.0
        self._descent: threading.Thread | None = None
        self._stop_descent = threading.Event()

    def _connect(self) -> None:
        import cflib.crtp
        from cflib.crazyflie import Crazyflie
        from cflib.crazyflie.log import LogConfig

        if not cflib.crtp.CLASSES:
            cflib.crtp.init_drivers()
        logging.getLogger("cflib.crazyflie.toccache").setLevel(logging.ERROR)  # "no writable cache dir": expected
        self.cf = Crazyflie(rw_cache=None)
        ready, failed = threading.Event(), []
        self.cf.connected.add_callback(lambda uri: ready.set())
        self.cf.connection_failed.add_callback(lambda uri, msg: (failed.append(msg), ready.set()))
        self.cf.open_link(self.config.uri)
        if not ready.wait(self.config.connect_timeout) or failed:
            self._close()
            raise RobotError(f"no Crazyflie at {self.config.uri}: {failed[0] if failed else 'connection timed out'}")
        period_ms = int(round(1000 / self.config.log_hz / 10)) * 10
        for name, variables in (("state", STATE_VARS), ("quat", QUAT_VARS), ("gyro", GYRO_VARS)):
            block = LogConfig(name=name, period_in_ms=period_ms)
            for var in variables:
                block.add_variable(var, "float")
            self.cf.log.add_config(block)
            block.data_received_cb.add_callback(self._on_log)
            block.start()
        deadline = time.monotonic() + self.config.connect_timeout
        while not all(v in self.values for v in STATE_VARS + QUAT_VARS + GYRO_VARS):
            if time.monotonic() > deadline:
                self._close()
                raise RobotError(f"the Crazyflie at {self.config.uri} sends no state-estimate logs")
            time.sleep(0.01)
        self._stop_descent.clear()

    def _on_log(self, timestamp: int, data: dict[str, float], block) -> None:
        self.values.update(data)
        self.last_log = time.monotonic()

    def _read(self) -> dict[str, Any]:
        v = self.values
        obs = {
            "position": np.array([v[k] for k in STATE_VARS[:3]], np.float32),
            "velocity": np.array([v[k] for k in STATE_VARS[3:]], np.float32),
            "quaternion": np.array([v[k] for k in QUAT_VARS], np.float32),
            "angular_velocity": np.radians([v[k] for k in GYRO_VARS]).astype(np.float32),
            "link_lost": time.monotonic() - self.last_log > self.config.link_timeout,
        }  # fmt: skip
        return obs

    def _measure(self) -> np.ndarray | None:
        """Position mode: the newest logged position (cflib's log callbacks keep it current), not the last
        observation's; velocity commands are not states."""
        if self.config.mode != "position":
            return None
        if time.monotonic() - self.last_log > self.config.link_timeout:  # no present position to step from
            self.failsafe("link lost: no telemetry", LINK)
            return None
        return np.array([self.values[k] for k in STATE_VARS[:3]])

    def _write(self, command: np.ndarray) -> None:
        x, y, z = map(float, command)
        if self.config.mode == "position":
            self.cf.commander.send_position_setpoint(x, y, z, 0.0)
        else:
            self.cf.commander.send_velocity_world_setpoint(x, y, z, 0.0)

    def _failsafe(self, reason: str) -> None:
        self._descent = threading.Thread(target=self._descend, name="crazyflie-descent", daemon=True)
        self._descent.start()

    def _descend(self) -> None:
        """Controlled descent at descent_speed until the floor, then motors off."""
        end = time.monotonic() + 30.0
        while not self._stop_descent.is_set() and time.monotonic() < end and self.cf is not None:
            if self.values.get("stateEstimate.z", math.inf) <= self.config.ground_z + 0.05:
                break
            self.cf.commander.send_velocity_world_setpoint(0.0, 0.0, -self.config.descent_speed, 0.0)
            time.sleep(0.05)
        if self.cf is not None and not self._stop_descent.is_set():
            self.cf.commander.send_stop_setpoint()

    def _estop(self) -> None:
        self._stop_descent.set()
        self.cf.commander.send_stop_setpoint()

    def _disconnect(self) -> None:
        self._stop_descent.set()
        if self._descent is not None:
            self._descent.join(timeout=1.0)
        self._close()

    def _close(self) -> None:
        if self.cf is not None:
            self.cf.close_link()
            self.cf = None
