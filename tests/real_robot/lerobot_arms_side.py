"""Runs inside the separate LeRobot environment (scripts/lerobot_env.sh), never in .venv, with the repository on
PYTHONPATH: our LeRobot drivers on LeRobot's REAL follower and leader classes, their motor buses faked
(real_robot/sim/fake_lerobot_bus.py). Records what happened as JSON; tests/real_robot/test_lerobot_real.py judges it.

    python tests/real_robot/lerobot_arms_side.py FOLDER OUT.json
"""

import importlib
import json
import sys
import time
from pathlib import Path

import numpy as np
from lerobot.motors import MotorCalibration

from embodied import registry
from real_robot.arms.lerobot_arm import MOTORS
from real_robot.robot import RobotError
from real_robot.sim.fake_lerobot_bus import fake_motor_buses

# a calibration as lerobot-calibrate leaves it: body joints over a half turn around the middle, wrist_roll a full turn
RANGES = {m: (1024, 3072) for m in MOTORS} | {"wrist_roll": (0, 4095), "gripper": (2000, 3000)}
LEADER_POSE = {"shoulder_pan": 10.0, "shoulder_lift": -20.0, "elbow_flex": 30.0, "wrist_flex": 0.0,
               "wrist_roll": 45.0, "gripper": 40.0}  # fmt: skip


def save_calibration(module: str, cls: str, folder: str, device_id: str) -> None:
    """Write LeRobot's calibration file for `device_id` with LeRobot's own writer."""
    mod = importlib.import_module(module)
    device = getattr(mod, cls)(getattr(mod, cls + "Config")(port="unused", id=device_id, calibration_dir=Path(folder)))
    device.calibration = {m: MotorCalibration(id=i + 1, drive_mode=0, homing_offset=0, range_min=lo, range_max=hi)
                          for i, (m, (lo, hi)) in enumerate(RANGES.items())}  # fmt: skip
    device._save_calibration()


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


def main(folder: str, out: str) -> None:
    with fake_motor_buses():
        for module, cls, device_id in [("lerobot.robots.so_follower", "SO101Follower", "follower"),
                                       ("lerobot.robots.koch_follower", "KochFollower", "follower"),
                                       ("lerobot.teleoperators.so_leader", "SO101Leader", "leader"),
                                       ("lerobot.teleoperators.koch_leader", "KochLeader", "leader")]:  # fmt: skip
            save_calibration(module, cls, folder, device_id)
        result = {name: follower(name, folder) for name in ("so101", "so100", "koch")}
        result |= {"uncalibrated": uncalibrated(folder), "leader": leader(folder), "koch_leader": koch_leader(folder)}
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
