"""The `embodied` command end to end, as a user runs it (subprocesses)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ["experiment=arm_reach", "train.num_envs=32", "train.rollout_steps=8", "train.total_env_steps=512",
        "train.eval_episodes=8"]


def embodied(*args, cwd):
    return subprocess.run([sys.executable, "-m", "embodied.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_train_then_eval(tmp_path):
    out = embodied("train", *TINY, f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "evaluation: success" in out.stdout and f"{tmp_path}/run" in out.stdout
    ev = embodied("eval", str(tmp_path / "run"), "--episodes", "16", cwd=tmp_path)
    assert ev.returncode == 0, ev.stderr
    assert "success" in ev.stdout and (tmp_path / "run/checkpoints/final/eval.json").exists()


def test_multirun_sweeps_seeds(tmp_path):
    out = embodied("train", "-m", *TINY, "seed=0,1", f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    runs = sorted(p.name for p in (tmp_path / "sweep").iterdir() if p.is_dir())
    assert runs == ["0_seed0", "1_seed1"]
    assert all((tmp_path / "sweep" / r / "checkpoints/final/model.safetensors").exists() for r in runs)


@pytest.mark.parametrize(
    "override, expected",
    [
        ("experiment=hoverr", ["experiment/hoverr", "quadrotor_hover", "arm_reach"]),  # lists valid choices
        ("env=moon_lander", ["env/moon_lander", "quadrotor_hover"]),
        ("train.num_env=3", ["train.num_env", "did you mean", "valid keys", "rollout_steps"]),
        ("+env.succes_radius=0.1", ["succes_radius", "valid keys"]),
        ("algo.clip=-1", ["algo.clip"]),
        ("policy.activation=swish", ["policy.activation", "valid choices", "'elu'"]),
        ("train.num_envs=many", ["train.num_envs", "int"]),
        ("algo=grpo", ["algo=grpo", "group rollouts", "algo=ppo"]),
    ],
)
def test_bad_config_fails_at_start_naming_the_key(tmp_path, override, expected):
    out = embodied("train", "experiment=arm_reach", override, f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)
    assert out.returncode != 0
    message = out.stdout + out.stderr
    for word in expected:
        assert word in message, f"{word!r} missing from: {message}"
    assert "Traceback" not in message
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_eval_of_missing_run_is_a_clear_error(tmp_path):
    out = embodied("eval", str(tmp_path / "nope"), cwd=tmp_path)
    assert out.returncode == 1 and "no checkpoint" in out.stderr
