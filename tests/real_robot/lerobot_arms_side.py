"""Runs inside the separate LeRobot environment (scripts/lerobot_env.sh), never in .venv, with the repository on
PYTHONPATH: our LeRobot drivers on LeRobot's REAL follower and leader classes, their motor buses faked
(embodied/testing/fake_lerobot_bus.py). Records what happened as JSON; tests/real_robot/test_lerobot_real.py judges it.

    python tests/real_robot/lerobot_arms_side.py FOLDER OUT.json
"""

import dataclasses
import enum
import functools
import importlib
import inspect
import json
import sys
import time
import traceback

import numpy as np
from lerobot.motors.dynamixel import DynamixelMotorsBus
from lerobot.motors.feetech import FeetechMotorsBus

from embodied import registry
from real_robot.arms.lerobot_arm import MOTORS
from real_robot.robot import RobotError
from embodied.testing import fake_lerobot as fake
from embodied.testing.fake_lerobot import save_calibration
from embodied.testing.fake_lerobot_bus import FakeFeetechBus, fake_motor_buses
from tests.real_robot.command_property import fire_commands
from tests.real_robot.fake_arms import LEROBOT_ARMS, goals_written, lerobot_arm

LEADER_POSE = {"shoulder_pan": 10.0, "shoulder_lift": -20.0, "elbow_flex": 30.0, "wrist_flex": 0.0,
               "wrist_roll": 45.0, "gripper": 40.0}  # fmt: skip


def qpos(arm) -> list[float]:
    return arm.get_observation()["qpos"].tolist()


def follower(name: str, folder: str) -> dict:
    # watchdog 20 periods (0.67 s at 30 Hz): this shared machine may stall a thread between two reads
    arm = registry.build("robot", name, {"port": f"fake-{name}", "id": "follower", "calibration_dir": folder,
                                         "safety": {"watchdog_periods": 20}})  # fmt: skip
    arm.connect()
    bus = arm.arm.bus
    rec = {"lerobot_class": type(arm.arm).__name__, "bus": type(bus).__name__,
           "torque": [bus.registers[m]["Torque_Enable"] for m in MOTORS], "written": sorted({w[0] for w in bus.writes})}
    bus.positions.update(shoulder_pan=10.0, elbow_flex=-20.0, gripper=30.0)
    obs = arm.get_observation()
    target = obs["qpos"] + np.array([0.5, 0.05, 0, 0, 0, 0.1], np.float32)  # shoulder_pan beyond max_step (0.2)
    sent = arm.send_action(target, stamp=obs["timestamp"])
    rec |= {"qpos": obs["qpos"].tolist(), "target": target.tolist(), "sent": sent.tolist(), "goals": dict(bus.goals)}
    rec["trajectory"] = [qpos(arm) for _ in range(3)]
    time.sleep(0.1)  # so the velocity limit (3 rad/s since the last command) allows a full step
    obs = arm.get_observation()
    arm.send_action(obs["qpos"] + np.array([0.2, 0, 0, 0, 0, 0], np.float32), stamp=obs["timestamp"])
    rec["commanded_goals"] = dict(bus.goals)
    deadline = time.monotonic() + 10.0
    while arm.failsafe_reason is None and time.monotonic() < deadline:  # no further command: the watchdog fires
        time.sleep(0.05)
    with arm._io:  # the watchdog sets the reason, then writes its hold, under this lock
        pass
    rec |= {"failsafe_reason": arm.failsafe_reason, "hold_goals": dict(bus.goals)}
    rec["after_failsafe"] = [qpos(arm) for _ in range(3)]
    obs = arm.get_observation()
    rec["sent_after_failsafe"] = arm.send_action(obs["qpos"], stamp=obs["timestamp"])
    arm.disconnect()
    rec |= {"connected_after": bus.is_connected, "torque_after": [bus.registers[m]["Torque_Enable"] for m in MOTORS]}
    return rec


def uncalibrated(folder: str) -> str:
    arm = registry.build("robot", "so101", {"port": "fake-new", "id": "never_calibrated", "calibration_dir": folder})
    try:
        arm.connect()
    except RobotError as err:
        return str(err)
    return "connected"


def leader(folder: str) -> dict:
    lead = registry.build("teleop", "so101_leader", {"port": "fake-leader", "id": "leader", "calibration_dir": folder,
                                                     "release_steps": 5})  # fmt: skip
    lead.connect()
    bus = lead.device.bus
    rec = {"lerobot_class": type(lead.device).__name__, "bus": type(bus).__name__,
           "torque": [bus.registers[m]["Torque_Enable"] for m in MOTORS]}
    bus.positions.update(LEADER_POSE)
    rec["read"] = lead.read().tolist()
    steps = []

    def step(note: str, **moves: float) -> None:
        for motor, delta in moves.items():
            bus.positions[motor] += delta
        action, events = lead.get_action()
        steps.append([note, None if action is None else action.tolist(), events])

    step("rest")
    step("small move", shoulder_pan=3.0)  # 3 deg = 0.052 rad from rest: below takeover_threshold 0.1
    step("takeover", shoulder_pan=5.0)  # 8 deg = 0.14 rad from rest
    step("operator moves", gripper=5.0)  # fraction 0.05 > still_threshold
    for _ in range(5):
        step("held")
    step("small move", elbow_flex=3.0)  # from the new rest
    step("takeover", elbow_flex=4.0)
    lead.episode_start()
    step("new episode")
    rec["steps"] = steps

    # the leader drives an SO-101 follower directly: its action is the follower's qpos command
    arm = registry.build("robot", "so101", {"port": "fake-follower", "id": "follower", "calibration_dir": folder})
    arm.connect()
    arm.arm.bus.positions.update({m: v - 5.0 for m, v in LEADER_POSE.items()})  # within max_step of the leader
    bus.positions.update(LEADER_POSE)
    obs = arm.get_observation()
    rec["follower_sent"] = arm.send_action(lead.read(), stamp=obs["timestamp"]).tolist()
    rec["follower_goals"] = dict(arm.arm.bus.goals)
    arm.disconnect()
    lead.disconnect()
    rec["connected_after"] = bus.is_connected
    return rec


def koch_leader(folder: str) -> dict:
    lead = registry.build("teleop", "koch_leader", {"port": "fake-koch", "id": "leader", "calibration_dir": folder})
    lead.connect()
    bus = lead.device.bus
    rec = {"torque": [bus.registers[m]["Torque_Enable"] for m in MOTORS], "goals": dict(bus.goals)}
    bus.positions.update(shoulder_pan=50.0, shoulder_lift=-50.0, elbow_flex=100.0, wrist_flex=0.0, wrist_roll=10.0,
                         gripper=50.0)  # the gripper trigger at rest: its goal (gripper_open_pos)
    rec["read"] = lead.read().tolist()
    lead.disconnect()
    return rec


def command_property(name: str) -> str:
    """tests/real_robot/command_property.py's random, adversarial and malformed commands through our driver into
    LeRobot's real follower class: "ok", or hypothesis' report of the smallest failing case."""
    try:
        with lerobot_arm(name, control_hz=2) as (arm, bus):  # 2 Hz: the watchdog stays out of the way
            fire_commands(arm, lambda: goals_written(bus))
    except Exception:  # noqa: BLE001 (recorded for the test to show)
        return traceback.format_exc()[-3000:]
    return "ok"


def link_loss(name: str) -> dict:
    """The cable pulled: LeRobot's real class passes the bus's ConnectionError up; our driver fails safe."""
    with lerobot_arm(name, safety={"watchdog_periods": 20}) as (arm, bus):
        obs = arm.get_observation()
        bus.link_up = False
        rec = {"sent": arm.send_action(obs["qpos"], stamp=obs["timestamp"]), "write_failsafe": arm.failsafe_reason}
        arm.clear_failsafe()
        rec |= {"link_lost": bool(arm.get_observation().get("link_lost")), "read_failsafe": arm.failsafe_reason,
                "links": arm.safety.counts["link"], "goal_writes": len(bus.goal_log)}  # fmt: skip
    rec["connected_after"] = arm.connected  # disconnected although LeRobot could not turn torque off
    return rec


def _fields(cls) -> list:
    return [(f.name, f.kw_only, f.default if f.default_factory is dataclasses.MISSING else f.default_factory())
            for f in dataclasses.fields(cls)]  # fmt: skip


def _signature(cls, attr: str) -> list | None:
    member = inspect.getattr_static(cls, attr, None)
    if member is None or not callable(member):
        return None
    return [(p.name, p.kind.name, repr(p.default)) for p in inspect.signature(getattr(cls, attr)).parameters.values()]


def _differences(where: str, real, ours: type) -> list[str]:
    if real is None:
        return [f"{where}: not in LeRobot"]
    if dataclasses.is_dataclass(ours):
        return [] if _fields(real) == _fields(ours) else [f"{where}: fields {_fields(ours)} != {_fields(real)}"]
    if issubclass(ours, enum.Enum):
        return [] if {m.name: m.value for m in real} == {m.name: m.value for m in ours} else [f"{where}: members"]
    if issubclass(ours, Exception):
        return [] if str(real()) == str(ours()) else [f"{where}: default message"]
    diffs, properties = [], (property, functools.cached_property)
    for attr in sorted(set(dir(ours)) - set(dir(object))):
        if attr.startswith("__") or (attr.startswith("_") and attr not in ("_load_calibration", "_save_calibration")):
            continue
        mine = inspect.getattr_static(ours, attr)
        if isinstance(mine, properties) and not isinstance(inspect.getattr_static(real, attr, None), properties):
            diffs.append(f"{where}.{attr}: not a property in LeRobot")
        elif callable(mine) and not isinstance(mine, type) and _signature(real, attr) != _signature(ours, attr):
            diffs.append(f"{where}.{attr}{_signature(ours, attr)} != LeRobot's {_signature(real, attr)}")
    return diffs


def fake_api() -> list[str]:
    """Where embodied/testing/fake_lerobot.py (the fake LeRobot .venv's tests drive) differs from LeRobot's real API:
    names, dataclass fields and defaults, enum members, error messages, method signatures and properties."""
    pairs = [(f"{module}.{name}", getattr(importlib.import_module(module), name, None), obj)
             for module, attrs in fake.MODULES.items() for name, obj in attrs.items() if not name.startswith("__")]
    pairs += [("FeetechMotorsBus", FeetechMotorsBus, FakeFeetechBus),  # Feetech's configure_motors takes more
              ("DynamixelMotorsBus", DynamixelMotorsBus, fake.ServoBus)]  # the fake LeRobot's bus is ServoBus
    return [diff for where, real, ours in pairs for diff in _differences(where, real, ours)]


def main(folder: str, out: str) -> None:
    with fake_motor_buses():
        for module, cls, device_id in [("lerobot.robots.so_follower", "SO101Follower", "follower"),
                                       ("lerobot.robots.koch_follower", "KochFollower", "follower"),
                                       ("lerobot.teleoperators.so_leader", "SO101Leader", "leader"),
                                       ("lerobot.teleoperators.koch_leader", "KochLeader", "leader")]:  # fmt: skip
            save_calibration(module, cls, folder, device_id)
        result = {name: follower(name, folder) for name in ("so101", "so100", "koch")}
        result |= {"uncalibrated": uncalibrated(folder), "leader": leader(folder), "koch_leader": koch_leader(folder)}
        result |= {"command_property": {name: command_property(name) for name in LEROBOT_ARMS},
                   "link_loss": {name: link_loss(name) for name in LEROBOT_ARMS}, "fake_api": fake_api()}  # fmt: skip
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
