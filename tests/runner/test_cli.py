"""The `embodied` command end to end, as a user runs it (subprocesses; the bad-config cases mostly in this process)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from embodied.cli import compose

ROOT = Path(__file__).resolve().parents[2]
BUDGET = ["train.num_envs=32", "train.rollout_steps=8", "train.total_env_steps=512", "train.eval_episodes=8"]
TINY = ["experiment=arm_reach", *BUDGET]


def embodied(*args, cwd):
    return subprocess.run([sys.executable, "-m", "embodied.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def saved_config(run: Path) -> dict:
    return yaml.safe_load((run / "checkpoints" / "final" / "config.yaml").read_text())


def test_train_then_eval(tmp_path):
    out = embodied("train", *TINY, f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "evaluation: success" in out.stdout and f"{tmp_path}/run" in out.stdout
    ev = embodied("eval", str(tmp_path / "run"), "--episodes", "16", cwd=tmp_path)
    assert ev.returncode == 0, ev.stderr
    assert "success" in ev.stdout and (tmp_path / "run/checkpoints/final/eval.json").exists()
    # with the run's own episode count, the default seed is the run's: the figure the run printed, exactly
    ev = embodied("eval", str(tmp_path / "run"), "--episodes", "8", cwd=tmp_path)
    assert ev.returncode == 0, ev.stderr
    rows = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    final = [r for r in rows if "eval/return" in r][-1]
    again = json.loads((tmp_path / "run/checkpoints/final/eval.json").read_text())
    assert (again["return"], again["success"]) == (final["eval/return"], final["eval/success"])


def test_multirun_composes_each_job_by_its_own_choices(tmp_path):
    out = embodied("train", "-m", "experiment=quadrotor_hover", "env=quadrotor_hover,quadrotor_waypoint", "seed=1",
                   *BUDGET, f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    runs = sorted(p.name for p in (tmp_path / "sweep").iterdir() if p.is_dir())
    assert runs == ["0_quadrotor_hover_seed1", "1_quadrotor_waypoint_seed1"]  # <job>_<what runs>_seed<seed>
    assert all((tmp_path / "sweep" / r / "checkpoints/final/model.safetensors").exists() for r in runs)
    hover, waypoint = (saved_config(tmp_path / "sweep" / r) for r in runs)
    assert hover["env"]["obs_motor_estimate"] is True and waypoint["env"]["obs_motor_estimate"] is False
    assert waypoint == compose(["experiment=quadrotor_hover", "env=quadrotor_waypoint", "seed=1", *BUDGET])


@pytest.mark.parametrize(
    "override, expected",
    [
        ("experiment=hoverr", ["experiment/hoverr", "quadrotor_hover", "arm_reach"]),  # lists valid choices
        ("env=moon_lander", ["env/moon_lander", "quadrotor_hover"]),
        ("env=HalfCheetah-v5", ["gymnasium id", "experiment=gym env.id=HalfCheetah-v5"]),
        ("train.num_env=3", ["train.num_env", "did you mean", "valid keys", "rollout_steps"]),
        ("+env.succes_radius=0.1", ["succes_radius", "valid keys"]),
        ("algo.clip=-1", ["algo.clip"]),
        ("policy.activation=swish", ["policy.activation", "valid choices", "'elu'"]),
        ("train.num_envs=many", ["train.num_envs", "int"]),
        ("policy=lm", ["env.name=arm_reach", "policy=lm", "text envs train"]),  # a language model on a robot env
    ],
)
def test_bad_config_fails_at_start_naming_the_key(tmp_path, override, expected, cli_fails):
    # in this process (cli_fails); the first case also runs as the user runs it
    args = ["train", "experiment=arm_reach", override, f"hydra.run.dir={tmp_path}/run"]
    if override.startswith("experiment="):
        out = embodied(*args, cwd=tmp_path)
        code, message = out.returncode, out.stdout + out.stderr
    else:
        code, out, err = cli_fails(*args)
        message = out + err
    assert code != 0
    for word in expected:
        assert word in message, f"{word!r} missing from: {message}"
    assert "Traceback" not in message
    assert not (tmp_path / "run").exists()  # a run that never started leaves no directory


def test_eval_of_missing_run_is_a_clear_error(tmp_path):
    out = embodied("eval", str(tmp_path / "nope"), cwd=tmp_path)
    assert out.returncode == 1 and "no checkpoint" in out.stderr


def test_env_chosen_away_from_the_experiment_trains_with_its_own_settings(tmp_path):
    overrides = ["experiment=quadrotor_hover", "env=quadrotor_waypoint", *BUDGET[:2], "train.total_env_steps=500",
                 "train.eval_episodes=8"]
    out = embodied("train", *overrides, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "notice: experiment=quadrotor_hover is written for env=quadrotor_hover; with env=quadrotor_waypoint " \
           "its env.w_pos, env.reward_floor, env.action_delay, env.obs_motor_estimate, env.obs_accelerometer " \
           "do not apply (dropped)" \
           in out.stdout
    assert "training 512 env steps" in out.stdout and "trained 512 env steps" in out.stdout  # the budget, rounded
    (run,) = (tmp_path / "runs" / "quadrotor_waypoint").iterdir()
    assert saved_config(run) == compose(overrides)  # compose() gives what `embodied train` runs
    assert saved_config(run)["env"]["w_pos"] == 0.0 and saved_config(run)["policy"]["activation"] == "relu"


def test_experiment_null_trains_the_components_defaults(tmp_path):
    out = embodied("train", "experiment=null", *BUDGET, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    (run,) = (tmp_path / "runs" / "quadrotor_hover").iterdir()
    assert saved_config(run) == compose(["experiment=null", *BUDGET])


def test_off_policy_algo_trains_from_the_cli_without_a_pipeline_section(tmp_path):
    out = embodied("train", "env=arm_reach", "policy=sac_mlp", "algo=sac", "train.num_envs=16",
                   "train.total_env_steps=100", "train.eval_episodes=8", "train.progress=false", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "notice: train.total_env_steps=100 is not a multiple of train.num_envs (one step each per collect) " \
           "= 16; training 112 env steps" in out.stdout
    (run,) = (tmp_path / "runs" / "arm_reach").iterdir()
    assert (run / "online" / "checkpoints" / "final" / "model.safetensors").exists()
