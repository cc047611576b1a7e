"""Slow: a hover policy trained in the torch sim flies a hover and a waypoint course through the MAVLink
driver against the MAVLink vehicle simulator, end to end over UDP at 100 Hz, also with a push in the vehicle."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from embodied.data.store import EpisodeStore
from real_robot.deploy import DeploySettings, deploy
from sims.quadrotor.disturbance import PUSH_DV, episode_rows

ROOT = Path(__file__).resolve().parents[2]
COURSE = [(0.5, 0.0, 0.0), (0.5, 0.5, 0.3), (0.0, 0.5, 0.0), (0.0, 0.0, 0.0)]  # m, a 0.5 m square with a climb
# The watchdog is tested on its own (test_mavlink, test_sim_arm); here a lax one keeps a shared machine's
# occasional 20-30 ms thread stalls from landing the drone mid-course (RESULTS.md counts them at 100 Hz).
LAX = {"safety": {"watchdog_periods": 10}}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("hover") / "run"
    # the main job trains with up to half a control period of latency (env.action_delay): the MAVLink loop has some,
    # and trained without it, policies flew this hover 3 of 8 and 4 of 6 times (benchmarks/RESULTS.md)
    out = subprocess.run([sys.executable, "-m", "embodied.cli", "train", "experiment=quadrotor_hover",
                          "train.eval_episodes=200", "train.progress=false", f"hydra.run.dir={run}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=1200)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return run


@pytest.mark.slow
def test_trained_policy_hovers_over_mavlink(trained):
    settings = DeploySettings(robot="mavlink_sitl", dry_run=True, steps=400, status=False, course=[(0.4, -0.3, 0.2)],
                              robot_params=LAX)  # fmt: skip
    [s] = deploy(trained, settings)
    print(s)
    assert s["failsafe"] == "" and s["steps"] == 400
    assert s["position_error_mean_settled"] < 0.15  # the sim's success radius is 0.1 m
    assert s["achieved_hz"] > 90


@pytest.mark.slow
def test_trained_policy_flies_a_waypoint_course_over_mavlink(trained):
    settings = DeploySettings(robot="mavlink_sitl", dry_run=True, steps=1200, status=False, course=COURSE,
                              robot_params=LAX)  # fmt: skip
    [s] = deploy(trained, settings)
    print(s)
    assert s["failsafe"] == "" and s["waypoints_reached"] == len(COURSE)
    assert s["position_error_final"] < 0.15


@pytest.mark.slow
def test_a_push_in_the_vehicle_kicks_the_policy_off_its_course_and_it_still_flies_it(trained, tmp_path):
    settings = DeploySettings(robot="mavlink_sitl", dry_run=True, steps=1200, status=False, course=COURSE,
                              robot_params=LAX, disturbance="push", disturbance_seed=0, log_dir=tmp_path)  # fmt: skip
    [s] = deploy(trained, settings)
    print(s)
    velocity = EpisodeStore(tmp_path / "episodes.zarr", mode="r").episode(0)["robot", "velocity"].numpy()
    jumps = np.diff(velocity, axis=0)  # per control period, as the policy observed it over MAVLink
    sizes = np.linalg.norm(jumps, axis=1)
    kick = episode_rows("push", 0, 1200)[PUSH_DV].numpy()  # the vehicle's draw for this flight: |dv| >= 0.5 m/s
    # the largest jump is the drawn kick: besides it, thrust changes the velocity by ~0.1 m/s in one or two periods
    assert np.linalg.norm(jumps[sizes.argmax()] - kick) < 0.15
    assert s["failsafe"] == "" and s["waypoints_reached"] == len(COURSE)
    assert s["position_error_final"] < 0.15
