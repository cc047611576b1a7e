"""`embodied eval <run> --disturbance <preset>` and `--env KEY=VALUE`: the setting reaches the env, is printed and
stored in eval.json, and a bad name is a clear error. In process, on an untrained policy's checkpoint (no training needed)."""

from __future__ import annotations

import json

import pytest
import torch

from embodied.build import make_env, make_policy
from embodied.cli import compose, evaluate_cmd
from embodied.runner.checkpoint import save_checkpoint


def checkpoint(tmp_path, overrides):
    config = compose(overrides)
    torch.manual_seed(0)
    policy = make_policy(config, make_env(config, 1, torch.device("cpu")))
    path = tmp_path / "ckpt"
    save_checkpoint(path, policy.state_dict(), {}, config)
    return path


@pytest.fixture(scope="module")
def hover(tmp_path_factory):
    return checkpoint(tmp_path_factory.mktemp("hover"), ["experiment=quadrotor_hover"])


def evaluate(path, capsys, *extra):
    code = evaluate_cmd([str(path), "--episodes", "16", *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_each_preset_is_printed_and_stored_and_changes_the_result(hover, capsys):
    returns = {}
    for preset in ("none", "payload", "all"):
        code, out, _ = evaluate(hover, capsys, "--disturbance", preset)
        assert code == 0 and f"(disturbance {preset})" in out
        result = json.loads((hover / "eval.json").read_text())
        assert result["disturbance"] == preset and result["episodes"] == 16
        returns[preset] = result["return"]
    assert len(set(returns.values())) == 3  # the same episodes flown under different dynamics
    code, out, _ = evaluate(hover, capsys)  # without the flag: the run's own setting
    assert code == 0 and "(disturbance none)" in out
    assert json.loads((hover / "eval.json").read_text())["return"] == returns["none"]


def test_unknown_preset_names_the_valid_ones(hover, capsys):
    code, _, err = evaluate(hover, capsys, "--disturbance", "wind")
    assert code == 1 and "unknown --disturbance 'wind'; valid presets: none, push, gust, payload, motor, all, mix" \
        in err


def test_an_env_without_presets_says_so(tmp_path, capsys):
    code, _, err = evaluate(checkpoint(tmp_path, ["experiment=arm_reach"]), capsys, "--disturbance", "gust")
    assert code == 1 and "env arm_reach has no disturbance presets" in err


def test_env_override_reaches_the_env_and_is_stored(tmp_path, capsys):
    path = checkpoint(tmp_path, ["experiment=arm_reach_vla_bc", "env.goal_in_state=false"])  # the VLA reads words
    returns = {}
    for shift in (0, 1):
        code, out, _ = evaluate(path, capsys, "--env", f"language_shift={shift}")
        assert code == 0 and f"language_shift={shift})" in out
        result = json.loads((path / "eval.json").read_text())
        assert result["env"] == {"language_shift": shift}
        returns[shift] = result["return"]
    assert returns[0] != returns[1]  # the same episodes, other words: a policy reading them acts otherwise


def test_env_override_errors_name_the_key(tmp_path, capsys):
    path = checkpoint(tmp_path, ["experiment=arm_reach"])
    code, _, err = evaluate(path, capsys, "--env", "language_shif=1")
    assert code == 1 and "language_shif" in err
    code, _, err = evaluate(path, capsys, "--env", "language_shift")
    assert code == 1 and "expected KEY=VALUE" in err
    code, _, err = evaluate(path, capsys, "--env", "language_shift=5")
    assert code == 1 and "language_shift=5 must be 0, 1 or 2" in err
