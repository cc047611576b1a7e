"""The quadrotor env's disturbance presets in the simulated MAVLink vehicle: the env's own draws and physics, inert
until the flight starts (the first switch to OFFBOARD), selected from `embodied deploy --disturbance`. The flight of
a trained policy under them is in test_trained_flight.py."""

import numpy as np
import pytest
import torch

from embodied import registry
from embodied.cli import deploy_cmd
from embodied.config import ConfigError
from real_robot.drones.mavlink import MavlinkDrone, MavlinkDroneConfig
from real_robot.sim.mavlink_vehicle import MavlinkVehicleConfig, MavlinkVehicleSim
from real_robot.sim.quadrotor_body import QuadrotorBody
from sims.quadrotor.disturbance import PRESETS, PUSH_DV, PUSH_STEP, episode_rows
from tests.real_robot.flight import SLACK

pytest.importorskip("pymavlink")


def hover(body: QuadrotorBody, steps: int) -> dict[str, np.ndarray]:
    """`steps` physics steps at the nominal hover action (0): a nominal body at rest stays where it is."""
    for _ in range(steps):
        body.step(np.zeros(4))
    return body.state()


@pytest.mark.parametrize("preset", [p for p in PRESETS if p != "none"])
def test_the_vehicle_draws_a_preset_as_the_env_draws_an_episode(preset):
    env = registry.build("env", "quadrotor_hover", {"disturbance": preset, "episode_s": 8.0}, num_envs=1)
    env.reset(seed=3)
    assert torch.equal(env.get_state()["disturbance"][0], episode_rows(preset, 3, env.max_episode_steps))


def test_a_push_kicks_the_vehicle_at_the_drawn_step_by_the_drawn_velocity():
    body = QuadrotorBody(disturbance="push")
    rows = body.disturb(seed=0, steps=200)
    kick = int(rows[PUSH_STEP])
    assert 30 <= kick < 100  # in [15%, 50%] of the 200-step flight
    before = hover(body, kick)
    assert np.abs(before["velocity"]).max() < 1e-4
    after = hover(body, 1)  # the env kicks on the step whose count since `disturb` is the drawn one
    assert np.allclose(after["velocity"], rows[PUSH_DV].numpy(), atol=1e-3)


@pytest.mark.parametrize("preset", ["push", "gust", "payload", "motor", "all"])
def test_a_preset_moves_the_vehicle_only_once_started(preset):
    body = QuadrotorBody(disturbance=preset)
    assert np.linalg.norm(hover(body, 150)["position"]) < 1e-3  # inert before the flight (the env drew a payload)
    body.disturb(seed=0, steps=100)  # the push and the gust onset within the next 50 steps
    assert np.linalg.norm(hover(body, 100)["position"]) > 0.02


def test_no_disturbance_is_the_nominal_vehicle():
    body = QuadrotorBody()
    assert "disturbance" not in body.env.get_state()
    assert torch.equal(body.disturb(seed=0, steps=100), episode_rows("none", 0, 100))


def test_the_vehicle_starts_the_preset_when_offboard_starts_and_logs_its_draws():
    config = MavlinkVehicleConfig(disturbance="push", disturbance_seed=4, disturbance_s=2.0)
    with MavlinkVehicleSim(config) as vehicle:
        assert not vehicle.disturbed and not any("disturbance" in e for _, e in vehicle.events)
        drone = MavlinkDrone(MavlinkDroneConfig(url=f"udpout:127.0.0.1:{vehicle.port}", control_hz=20, safety=SLACK))
        drone.connect()
        try:
            events = [e for _, e in vehicle.events]
        finally:
            drone.disconnect()
    offboard = events.index("mode OFFBOARD: set mode")
    at = float(episode_rows("push", 4, 200)[PUSH_STEP]) * 0.01  # s after the switch: the draw for a 2 s flight
    assert events[offboard + 1].startswith(f"disturbance push (seed 4) from now: push at {at:.2f} s")
    assert sum("disturbance" in e for e in events) == 1


def test_bad_presets_and_robots_are_clear_errors(hover_run, arm_run, capsys):
    with pytest.raises(ConfigError, match="valid presets: none, push, gust, payload, motor, all, mix"):
        MavlinkVehicleConfig(disturbance="windy")
    run = str(hover_run)
    assert deploy_cmd([run, "robot=mavlink_sitl", "--dry-run", "--disturbance", "windy", "--no-status"]) == 1
    assert "'windy' is not a preset; valid presets: none, push, gust" in capsys.readouterr().err
    assert deploy_cmd([run, "robot=mavlink_sitl", "--disturbance", "push", "--no-status"]) == 1
    assert "needs a dry run" in capsys.readouterr().err
    assert deploy_cmd([str(arm_run), "robot=sim_arm", "--dry-run", "--disturbance", "gust", "--no-status"]) == 1
    assert "robot 'sim_arm' has none" in capsys.readouterr().err
