"""`embodied deploy` refuses a policy and a robot that do not fit before the robot connects (shapes and meanings of the
command and of every observation the twin copies), and fails when the robot did not follow the policy."""

import logging
import re

import numpy as np
import pytest

from embodied import registry
from embodied.cli import deploy_cmd
from embodied.data.store import EpisodeStore
from real_robot.deploy import DeployError, DeploySettings, check_fit, deploy
from embodied.specs import Meaning, Spec
from real_robot.arms.sim_arm import SimulatedArm
from real_robot.drones.mavlink import MavlinkDrone
from sims.arm_reach.env import ArmReachEnv

MOTORS = '[4] "motor command [-1,1], 0 = hover"'  # the quadrotor policy's action, as the error names it
ARM_QPOS = '[4] "rad, arm_reach joints (0 = stretched along +x)"'  # the arm_reach twin's joint positions
SETPOINTS = {"position": '[3] "m, world z-up"', "velocity": '[3] "m/s, world z-up"',
             "attitude": '[5] "quaternion wxyz, body FLU -> world z-up; thrust [0, 1]"'}  # drones' setpoint modes
LEROBOT_QPOS = '[6] "rad from the calibrated middle, shoulder_pan..wrist_roll; gripper opening [0, 1]"'
# no dry run and a short heartbeat timeout: a refusal must come before connecting; the code before this check tried
# to connect (and failed quickly with a RobotError, no vehicle listening), which these tests tell apart
NO_VEHICLE = {"heartbeat_timeout": 0.2}


def refused(run, robot: str, params: dict, dry_run: bool = False) -> str:
    with pytest.raises(ValueError, match="do not fit") as err:
        deploy(run, DeploySettings(robot=robot, robot_params=params, dry_run=dry_run, steps=3, status=False))
    return str(err.value)


def names(message: str, *parts: str) -> None:
    for part in parts:
        assert re.search(part, message), f"{part!r} not in {message!r}"


@pytest.mark.parametrize("mode", ["position", "velocity", "attitude"])
def test_mavlink_setpoint_modes_refuse_a_motor_policy(hover_run, mode):
    """Actuator mode takes the motor commands (test_deploy flies it); the other modes are refused."""
    message = refused(hover_run, "mavlink_sitl", {"mode": mode, **NO_VEHICLE})
    names(message, re.escape(f"action: the policy's action QuadrotorHoverEnv.action_spec {MOTORS} vs "
                             f"MavlinkDrone.action_spec {SETPOINTS[mode]}"))  # fmt: skip


@pytest.mark.parametrize("mode", ["position", "velocity"])
def test_crazyflie_refuses_a_motor_policy(hover_run, mode):
    message = refused(hover_run, "crazyflie", {"mode": mode, "connect_timeout": 0.2})
    names(message, re.escape(f"QuadrotorHoverEnv.action_spec {MOTORS} vs CrazyflieDrone.action_spec {SETPOINTS[mode]}"))


@pytest.mark.parametrize("arm", ["so100", "so101", "koch"])
def test_lerobot_arms_refuse_a_four_joint_policy_also_in_a_dry_run(arm_run, arm):
    """The dry run flies the simulated arm, which fits arm_reach; it must still refuse what the arm would refuse."""
    cls = type(registry.build("robot", arm, {})).__name__
    message = refused(arm_run, arm, {}, dry_run=True)
    names(message, re.escape(f"action: the twin's 'qpos' after a step (ArmReachEnv snapshot) {ARM_QPOS} vs "
                             f"{cls}.action_spec {LEROBOT_QPOS}"),
          re.escape(f"observation 'qpos': ArmReachEnv snapshot {ARM_QPOS} vs {cls}.observation_spec['qpos'] "
                    f"{LEROBOT_QPOS}"))  # fmt: skip


def test_sim_arm_refuses_a_quadrotor_policy_and_a_twin_of_other_meaning(hover_run, arm_run, monkeypatch):
    message = refused(hover_run, "sim_arm", {})
    names(message, re.escape(f"action: QuadrotorHoverEnv's snapshot has no 'qpos' vs SimulatedArm.action_spec "
                             f"{ARM_QPOS}"), "observations: SimulatedArm observes .* none of which")  # fmt: skip
    # a twin whose joint angles are degrees: same shape, another meaning
    monkeypatch.setattr(ArmReachEnv, "snapshot_meaning", {**ArmReachEnv.snapshot_meaning, "qpos": "deg, joint"})
    message = refused(arm_run, "sim_arm", {})
    names(message, re.escape(f"""observation 'qpos': ArmReachEnv snapshot [4] "deg, joint" vs """
                             f"SimulatedArm.observation_spec['qpos'] {ARM_QPOS}"))  # fmt: skip


@pytest.mark.parametrize(("key", "meaning"), [("quaternion", "quaternion xyzw, body FLU -> world z-up"),
                                              ("velocity", "m/s, body FLU"), ("position", "rad, joint")],
                         ids=["quaternion xyzw", "body velocity", "joint angles"])  # fmt: skip
def test_an_observation_of_the_right_shape_and_another_meaning_is_refused(hover_run, monkeypatch, key, meaning):
    spec = MavlinkDrone.observation_spec[key]
    wrong = {**MavlinkDrone.observation_spec, key: Spec(spec.shape, meaning=meaning)}
    monkeypatch.setattr(MavlinkDrone, "observation_spec", wrong)
    message = refused(hover_run, "mavlink_sitl", NO_VEHICLE)
    shape = list(spec.shape)
    names(message, re.escape(f"""observation '{key}': QuadrotorHoverEnv snapshot {shape} "{spec.meaning}" vs """
                             f"""MavlinkDrone.observation_spec['{key}'] {shape} "{meaning}\""""))  # fmt: skip
    assert "action" not in message  # motors on motors: the command fits


def test_fitting_pairs_and_what_the_robot_does_not_measure(monkeypatch, caplog):
    hover = registry.build("env", "quadrotor_hover", {}, num_envs=1)
    assert check_fit(hover, registry.build("robot", "mavlink", {"mode": "actuator"})) == []
    assert check_fit(registry.build("env", "arm_reach", {}, num_envs=1), registry.build("robot", "sim_arm", {})) == []
    # a vehicle without the accelerometer reading: fits, and the twin's own specific force is reported
    monkeypatch.setattr(MavlinkDrone, "observation_spec",
                        {k: v for k, v in MavlinkDrone.observation_spec.items() if k != "specific_force"})  # fmt: skip
    with caplog.at_level(logging.WARNING, "real_robot.deploy"):
        assert check_fit(hover, registry.build("robot", "mavlink", {})) == ["specific_force"]
    assert f"does not measure specific_force ({Meaning.SPECIFIC_FORCE})" in caplog.text


def test_an_undeclared_meaning_is_refused_unless_allowed(monkeypatch, caplog):
    arm = registry.build("env", "arm_reach", {}, num_envs=1)
    monkeypatch.setattr(SimulatedArm, "observation_spec", {**SimulatedArm.observation_spec, "qvel": Spec((4,))})
    with pytest.raises(ValueError, match=re.escape(
            """observation 'qvel': ArmReachEnv snapshot [4] "rad/s, arm_reach joints" vs SimulatedArm."""
            """observation_spec['qvel'] [4] (meaning undeclared): unchecked""")):  # fmt: skip
        check_fit(arm, registry.build("robot", "sim_arm", {}))
    with caplog.at_level(logging.WARNING, "real_robot.deploy"):
        assert check_fit(arm, registry.build("robot", "sim_arm", {}), allow_unchecked=True) == []
    assert "not checked (allow_unchecked): observation 'qvel'" in caplog.text


def test_a_fitting_deploy_counts_rejected_commands(arm_run, tmp_path):
    settings = DeploySettings(robot="sim_arm", steps=5, status=False, log_dir=tmp_path,
                              robot_params={"safety": {"watchdog_periods": 10, "max_command_age": 0.5}})  # fmt: skip
    [summary] = deploy(arm_run, settings)
    sent = EpisodeStore(tmp_path / "episodes.zarr").episode(0)["sent"].numpy()
    assert summary["commands_rejected"] == int(np.isnan(sent).all(-1).sum()) <= 1  # as logged; a stall may stale one
    assert summary["unmeasured"] == []


def test_a_drone_whose_commands_are_all_rejected_fails_and_reports_no_tracking(hover_run):
    """Every command stale (an observation older than 1 us): the vehicle never gets one, so its position error says
    nothing of the policy; deploy raises. (A link loss on a stalled machine may end the episode early: the same.)"""
    settings = DeploySettings(robot="mavlink_sitl", dry_run=True, steps=5, status=False, control_hz=10,
                              robot_params={"control_hz": 10, "safety": {"max_command_age": 1e-6}})  # fmt: skip
    with pytest.raises(DeployError, match=r"episode 0: the safety layer rejected (\d) of \1 commands") as err:
        deploy(hover_run, settings)
    [summary] = err.value.summaries
    assert summary["commands_rejected"] == summary["steps"] and not any(k.startswith("position_") for k in summary)


def test_cli_exits_nonzero_when_commands_are_rejected_or_the_pair_does_not_fit(arm_run, hover_run, capsys):
    argv = [str(arm_run), "robot=sim_arm", "robot.safety.max_command_age=0.000001", "--steps", "4", "--no-status"]
    assert deploy_cmd(argv) == 1
    # every command rejected; the watchdog, counting from the first one tried, may end the episode before step 4
    assert re.search(r"rejected (\d) of \1 commands", capsys.readouterr().err)
    assert deploy_cmd([str(hover_run), "robot=mavlink_sitl", "robot.mode=velocity", "--no-status"]) == 1
    assert "MavlinkDrone.action_spec [3]" in capsys.readouterr().err
