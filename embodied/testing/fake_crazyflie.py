"""A fake Crazyflie: enough of the firmware's CRTP protocol, on cflib's UDP link, flying the quadrotor sim.

    with FakeCrazyflie() as fake:                   # a thread on 127.0.0.1:<port>
        cf = Crazyflie(); cf.open_link(fake.uri)    # cflib's own stack (UdpDriver, TOC, log, commander)

cflib's `UdpDriver` (cflib/crtp/udpdriver.py) carries one CRTP packet per datagram for
software-in-the-loop simulation; this fake answers on the other end. It is a fake, not the
firmware: it implements what cflib needs to connect, log and send setpoints, with the behaviour
of crazyflie-firmware where it matters for safety, and nothing else:
- link service echo and platform protocol version (10, so cflib uses the current commander types);
- log TOC (v2) with stateEstimate.{x,y,z,vx,vy,vz,qx,qy,qz,qw} and gyro.{x,y,z} (deg/s), log
  blocks (create v2, start, stop, delete, reset) streamed at their period;
- an empty memory list and parameter TOC;
- setpoints: generic commander TYPE_STOP, TYPE_POSITION, TYPE_VELOCITY_WORLD and the legacy
  roll/pitch/yaw-rate/thrust packet, flown by the same onboard controller as the MAVLink vehicle;
- the firmware's commander watchdog (src/modules/src/commander.c): a setpoint older than 500 ms
  (COMMANDER_WDT_TIMEOUT_STABILIZE) is replaced by level attitude (here: level and hold altitude),
  older than 2 s (COMMANDER_WDT_TIMEOUT_SHUTDOWN) by motors off.
The world frame of the Crazyflie's state estimate (x forward, y left, z up) is the sim's.
Every setpoint received is recorded in `received`.
"""

from __future__ import annotations

import math
import socket
import struct
import threading
import time

import numpy as np

from real_robot.sim.flight_controller import FlightController, quat_to_matrix
from real_robot.sim.quadrotor_body import QuadrotorBody

PARAM, COMMANDER, MEM, LOGGING, GENERIC, PLATFORM, LINKCTRL = 2, 3, 4, 5, 7, 13, 15
LOG_VARIABLES = [("stateEstimate", n) for n in ("x", "y", "z", "vx", "vy", "vz", "qx", "qy", "qz", "qw")] + [
    ("gyro", n) for n in ("x", "y", "z")]  # fmt: skip
FLOAT = 0x07  # LogTocElement type id of float
TYPE_STOP, TYPE_POSITION, TYPE_VELOCITY_WORLD = 0, 7, 8  # cflib/crazyflie/commander.py
WDT_STABILIZE, WDT_SHUTDOWN = 0.5, 2.0  # s, crazyflie-firmware commander.c


def header(port: int, channel: int) -> int:
    return (port & 0x0F) << 4 | 3 << 2 | (channel & 0x03)  # cflib CRTPPacket.set_header


class FakeCrazyflie:
    def __init__(self, port: int = 0, start=(0.0, 0.0, 0.0), ground_z: float = -1.0, env: str = "quadrotor_hover"):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", port))
        self.sock.settimeout(0.002)
        self.port = self.sock.getsockname()[1]
        self.uri = f"udp://127.0.0.1:{self.port}"
        self.body = QuadrotorBody(env, start, ground_z)
        self.fc = FlightController(self.body.dt)
        self.peer = None
        self.link_up = True
        self.setpoint: tuple[str, np.ndarray] = ("position", np.array([*start, 0.0]))  # hovering at start, yaw 0
        self.last_setpoint = time.monotonic()
        self.motors_on = True
        self.blocks: dict[int, dict] = {}  # log block id -> {"vars": [toc ids], "period": s, "next": t, "on": bool}
        self.received: list[tuple[float, str, np.ndarray]] = []
        self.events: list[tuple[float, str]] = []
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-crazyflie", daemon=True)

    def __enter__(self) -> FakeCrazyflie:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)
        self.sock.close()

    def state(self) -> dict[str, np.ndarray]:
        with self.lock:
            return self.body.state()

    def set_link(self, up: bool) -> None:
        self.link_up = up

    # ---- loop --------------------------------------------------------------------------------
    def _run(self) -> None:
        t0, tick, dt = time.monotonic(), 0, self.body.dt
        while not self._stop.is_set():
            deadline = t0 + (tick + 1) * dt
            while time.monotonic() < deadline:  # serve packets until the next physics step
                try:
                    data, self.peer = self.sock.recvfrom(64)
                except (socket.timeout, BlockingIOError):
                    continue
                except OSError:
                    return
                if self.link_up and data:
                    self._packet(data[0], data[1:])
            now = time.monotonic()
            with self.lock:
                self._physics(now)
            self._stream_logs(now)
            tick += 1
            if now - deadline > 0.1:  # far behind: drop the backlog, stay real-time
                t0, tick = now, 0

    def _physics(self, now: float) -> None:
        age = now - self.last_setpoint
        state = self.body.state()
        kind, values = self.setpoint
        if not self.motors_on or age > WDT_SHUTDOWN:
            if self.motors_on:
                self.events.append((now, "watchdog: setpoint older than 2 s, motors off"))
                self.motors_on = False
            action = -np.ones(4)
        elif age > WDT_STABILIZE:
            if not self.events or not self.events[-1][1].startswith("watchdog: level"):
                self.events.append((now, "watchdog: level attitude"))
            action = self.fc.motor_action(state, None, np.zeros(3))
        elif kind == "position":
            action = self.fc.motor_action(state, values[:3], yaw=math.radians(values[3]))
        elif kind == "velocity":
            action = self.fc.motor_action(state, None, values[:3])
        else:  # "attitude": roll, pitch (deg), yaw rate (deg/s), thrust fraction
            roll, pitch, thrust = math.radians(values[0]), math.radians(values[1]), values[3]
            r = quat_to_matrix(np.array([math.cos(roll / 2) * math.cos(pitch / 2), math.sin(roll / 2) * math.cos(pitch / 2),
                                         math.cos(roll / 2) * math.sin(pitch / 2), -math.sin(roll / 2) * math.sin(pitch / 2)]))  # fmt: skip
            force = r[:, 2] * thrust * 4 * self.fc.v.max_thrust / self.fc.v.mass
            action = self.fc.attitude_action(state, force, 0.0)
        self.body.step(action)

    # ---- CRTP --------------------------------------------------------------------------------
    def _send(self, port: int, channel: int, payload: bytes) -> None:
        if self.peer is not None and self.link_up:
            try:
                self.sock.sendto(bytes([header(port, channel)]) + payload, self.peer)
            except OSError:
                pass

    def _packet(self, head: int, data: bytes) -> None:
        if head == 0xFF:  # null packet (cflib's scan probe)
            self.sock.sendto(b"\xff", self.peer)
            return
        port, channel = head >> 4, head & 0x03
        if port == LINKCTRL and channel == 1:
            self._send(LINKCTRL, 1, b"Bitcraze Crazyflie")
        elif port == PLATFORM and channel == 1 and data[:1] == b"\x00":
            self._send(PLATFORM, 1, bytes([0, 10]))
        elif port == MEM and channel == 0 and data[:1] == b"\x01":
            self._send(MEM, 0, bytes([1, 0]))  # no memories
        elif port in (LOGGING, PARAM) and channel == 0:
            self._toc(port, data)
        elif port == LOGGING and channel == 1:
            self._log_control(data)
        elif port == GENERIC and channel == 0:
            self._generic_setpoint(data)
        elif port == COMMANDER and channel == 0 and len(data) == 14:
            roll, pitch, yawrate, thrust = struct.unpack("<fffH", data)
            self._accept("attitude", np.array([roll, -pitch, yawrate, thrust / 65535.0]))  # cflib sends -pitch

    def _toc(self, port: int, data: bytes) -> None:
        variables = LOG_VARIABLES if port == LOGGING else []
        if data[:1] == b"\x03":  # CMD_TOC_INFO_V2 -> count, CRC
            self._send(port, 0, bytes([3]) + struct.pack("<HI", len(variables), 0xC0FFEE + len(variables)) + bytes([16, 128]))
        elif data[:1] == b"\x02" and len(data) >= 3:  # CMD_TOC_ITEM_V2 -> type, "group\0name\0"
            index = data[1] | data[2] << 8
            group, name = variables[index]
            self._send(port, 0, bytes([2, data[1], data[2], FLOAT]) + f"{group}\0{name}\0".encode())

    def _log_control(self, data: bytes) -> None:
        cmd, block = data[0], data[1] if len(data) > 1 else 0
        with self.lock:
            if cmd in (6, 7):  # create / append block (v2): (storage|fetch byte, id lo, id hi)*
                ids = [data[i + 1] | data[i + 2] << 8 for i in range(2, len(data) - 2, 3)]
                entry = self.blocks.setdefault(block, {"vars": [], "period": 0.1, "next": 0.0, "on": False})
                entry["vars"] = (entry["vars"] if cmd == 7 else []) + ids
            elif cmd == 3 and block in self.blocks:  # start, period in 10 ms units
                self.blocks[block].update(period=data[2] / 100.0, on=True, next=time.monotonic())
            elif cmd == 4 and block in self.blocks:
                self.blocks[block]["on"] = False
            elif cmd == 2:
                self.blocks.pop(block, None)
            elif cmd == 5:
                self.blocks.clear()
        self._send(LOGGING, 1, bytes([cmd, block, 0]))

    def _stream_logs(self, now: float) -> None:
        with self.lock:
            s = self.body.state()
            due = [(b, e["vars"]) for b, e in self.blocks.items() if e["on"] and now >= e["next"]]
            for b, _ in due:
                self.blocks[b]["next"] = now + self.blocks[b]["period"]
        w, x, y, z = s["quaternion"]
        values = [*s["position"], *s["velocity"], x, y, z, w, *np.degrees(s["angular_velocity"])]
        stamp = int(now * 1000) & 0xFFFFFF
        for block, ids in due:
            payload = bytes([block]) + stamp.to_bytes(3, "little") + struct.pack(f"<{len(ids)}f", *(values[i] for i in ids))
            self._send(LOGGING, 2, payload)

    def _generic_setpoint(self, data: bytes) -> None:
        kind = data[0]
        if kind == TYPE_STOP:
            self._accept("stop", np.zeros(0))
        elif kind in (TYPE_POSITION, TYPE_VELOCITY_WORLD) and len(data) == 17:
            values = np.array(struct.unpack("<ffff", data[1:]), dtype=np.float64)
            self._accept("position" if kind == TYPE_POSITION else "velocity", values)

    def _accept(self, kind: str, values: np.ndarray) -> None:
        now = time.monotonic()
        with self.lock:
            self.received.append((now, kind, values.copy()))
            if kind == "stop":
                self.motors_on = False
                self.events.append((now, "stop setpoint: motors off"))
                return
            if not np.isfinite(values).all():
                return
            self.setpoint, self.last_setpoint = (kind, values), now
            if not self.motors_on and not self.body.landed:
                return  # motors stay off in the air until a new connection (the firmware locks after a stop)
            self.motors_on = True
