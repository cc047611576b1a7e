"""Sweeps: `embodied train -m ... hydra/launcher=ray` runs the jobs in Ray workers, and `embodied sweep` aggregates a
sweep's final metrics per setting across seeds (embodied/runner/sweep.py)."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from embodied.runner import sweep

BUDGET = ["experiment=quadrotor_hover", "train.total_env_steps=256", "train.num_envs=16", "train.rollout_steps=8",
          "train.eval_episodes=4", "train.progress=false"]  # fmt: skip


def embodied(*args, cwd, env=None):
    return subprocess.run([sys.executable, "-m", "embodied.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)  # fmt: skip


# --- a sweep as Hydra lays it out: <sweep>/multirun.yaml, <sweep>/<num>_<name>_seed<seed>/.hydra/, metrics.jsonl


def fake_sweep(root: Path, runs: list[tuple[list[str], list[dict]]]) -> Path:
    """A multirun folder with one run per (overrides, metrics.jsonl records), numbered in order."""
    root.mkdir(parents=True)
    (root / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"mode": "MULTIRUN"}}))
    for num, (overrides, records) in enumerate(runs):
        seed = int(next((o.split("=")[1] for o in overrides if o.startswith("seed=")), 0))
        run = root / f"{num}_quadrotor_hover_seed{seed}"
        (run / ".hydra").mkdir(parents=True)
        (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
        (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"name": "quadrotor_hover", "seed": seed}))
        (run / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"job": {"num": num}}}))
        (run / "cli.log").write_text("")
        if records:  # a finished run: its metrics and final checkpoint
            (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
            (run / "checkpoints" / "final").mkdir(parents=True)
    return root


def records(ret: float, success: float, seconds: float) -> list[dict]:
    """Two training iterations and the final evaluation, as Trainer.learn logs them."""
    return [{"iteration": 1, "env_steps": 128, "time": seconds / 2, "train/return": ret - 1.0},
            {"iteration": 2, "env_steps": 256, "time": seconds, "train/return": ret},
            {"iteration": 2, "env_steps": 256, "time": seconds, "eval/success": success, "eval/return": 2 * ret,
             "eval/episodes": 4}]  # fmt: skip


def test_t_interval_against_hand_worked_values():
    # mean 2, sample std 1, n 3: 4.303 * 1 / sqrt(3) (t_{0.975, 2} = 4.303)
    s = sweep.t_interval([1.0, 2.0, 3.0])
    assert (s.mean, s.n) == (2.0, 3) and s.half == pytest.approx(4.303 / math.sqrt(3))
    # mean 0.6, sample std 0.1 * sqrt(2), n 2: 12.706 * 0.1414 / sqrt(2) = 1.2706
    assert sweep.t_interval([0.5, 0.7]).half == pytest.approx(1.2706)
    assert sweep.t_interval([4.0, 4.0, 4.0, 4.0]).half == 0.0
    one = sweep.t_interval([0.25])
    assert one.mean == 0.25 and math.isnan(one.half)
    # 35 runs: df 34 takes df 30's value, 2.042 (wider than the exact 2.032); beyond df 100 the normal 1.960
    assert sweep.t_interval([0.0, 1.0] * 17 + [0.5]).half == pytest.approx(2.042 * 0.5 / math.sqrt(35))  # std 0.5
    assert sweep.t_interval([0.0, 2.0] * 100).half == pytest.approx(1.960 * math.sqrt(200 / 199) / math.sqrt(200))


def test_groups_by_swept_overrides_without_seed(tmp_path):
    common = ["experiment=quadrotor_hover", "train.total_env_steps=256"]
    root = fake_sweep(tmp_path / "multirun" / "2026-01-01_00-00-00", [
        ([f"seed={seed}", f"algo.lr={lr}", *common], records(ret, success, seconds))
        for seed, (lr, ret, success, seconds) in [(0, ("0.0001", 1.0, 0.5, 10.0)), (0, ("0.0003", 4.0, 1.0, 12.0)),
                                                  (1, ("0.0001", 2.0, 0.7, 10.0)), (1, ("0.0003", 4.0, 1.0, 14.0)),
                                                  (2, ("0.0001", 3.0, 0.6, 10.0)), (2, ("0.0003", 4.0, 1.0, 16.0))]
    ])  # fmt: skip
    runs = sweep.read_sweep(root)
    assert [r.path.name for r in runs][:3] == ["0_quadrotor_hover_seed0", "1_quadrotor_hover_seed0",
                                               "2_quadrotor_hover_seed1"]  # job order, as Hydra numbered them
    assert runs[0].metrics["train_seconds"] == 10.0 and runs[0].metrics["train/return"] == 1.0  # last values
    groups, shared = sweep.settings(runs)
    assert list(groups) == ["algo.lr=0.0001", "algo.lr=0.0003"] and shared == common
    assert [r.seed for r in groups["algo.lr=0.0001"]] == [0, 1, 2]
    stats = sweep.aggregate(groups, ["train/return", "eval/success", "train_seconds"])
    low, high = stats["algo.lr=0.0001"], stats["algo.lr=0.0003"]
    assert low["train/return"].mean == 2.0 and low["train/return"].half == pytest.approx(4.303 / math.sqrt(3))
    assert low["eval/success"].mean == pytest.approx(0.6) and high["eval/success"].half == 0.0
    assert high["train_seconds"].mean == 14.0 and high["train_seconds"].half == pytest.approx(4.303 * 2 / math.sqrt(3))
    text = sweep.table(groups, stats, ["train/return", "eval/success", "train_seconds"])
    assert "| algo.lr=0.0001 | 0,1,2 | 2 ± 2.5 | 0.6 ± 0.25 | 10 ± 0 |" in text


def test_command_prints_the_table_and_writes_the_plot(tmp_path, capsys):
    root = fake_sweep(tmp_path / "sweep", [([f"seed={s}", "experiment=quadrotor_hover"], records(s, 0.5, 1.0))
                                           for s in (0, 1)] + [(["seed=2", "experiment=quadrotor_hover"], [])])
    assert sweep.main([str(root), "--metric", "train/return", "--out", str(tmp_path / "lr.png")]) == 0
    out, err = capsys.readouterr()
    assert "2 runs, 1 settings; every run: experiment=quadrotor_hover" in out
    assert "| (all runs) | 0,1 | 0.5 ± 6.4 |" in out  # the run that has not finished is left out, with a notice
    assert "2_quadrotor_hover_seed2" in err and (tmp_path / "lr.png").stat().st_size > 0
    assert sweep.main([str(root)]) == 0 and (root / "sweep.png").exists()  # the default metrics and place
    assert "| setting | seeds | eval/success | eval/return | train/return | train_seconds |" in capsys.readouterr().out


def test_a_metric_some_runs_lack_counts_those_that_have_it(tmp_path):
    root = fake_sweep(tmp_path / "sweep", [(["seed=0"], records(1.0, 0.5, 1.0)),
                                           (["seed=1"], records(3.0, 0.5, 1.0)[:2])])  # no evaluation  # fmt: skip
    groups, _ = sweep.settings(sweep.read_sweep(root))
    stats = sweep.aggregate(groups, ["eval/success", "algo/kl"])
    assert stats["(all runs)"]["eval/success"].n == 1 and stats["(all runs)"]["algo/kl"] is None
    assert sweep.table(groups, stats, ["eval/success", "algo/kl"]).endswith("| (all runs) | 0,1 | 0.5 (n=1) | – |")


@pytest.mark.parametrize("case, expected", [
    ("missing", ["no such directory", "nowhere"]),
    ("empty", ["is not a sweep", "overrides.yaml", "empty"]),
    ("single run", ["is a single run, not a sweep", "run"]),
    ("unfinished", ["has finished", "unfinished", "0_quadrotor_hover_seed0", "1_quadrotor_hover_seed1"]),
    ("unknown metric", ["no run of", "eval/sucess", "did you mean eval/success?", "its metrics:"]),
])  # fmt: skip
def test_bad_input_says_what_and_where(tmp_path, capsys, case, expected):
    argv = {"missing": [str(tmp_path / "nowhere")], "empty": [str(tmp_path / "empty")],
            "single run": [str(tmp_path / "run")], "unfinished": [str(tmp_path / "unfinished")],
            "unknown metric": [str(tmp_path / "ok"), "--metric", "eval/sucess"]}[case]  # fmt: skip
    (tmp_path / "empty" / "notes").mkdir(parents=True)
    (tmp_path / "run" / ".hydra").mkdir(parents=True)
    fake_sweep(tmp_path / "unfinished", [(["seed=0"], []), (["seed=1"], [])])
    (tmp_path / "unfinished" / "1_quadrotor_hover_seed1" / "metrics.jsonl").write_text(
        json.dumps(records(1.0, 0.5, 1.0)[0]) + "\n")  # mid-run: metrics, no final checkpoint
    fake_sweep(tmp_path / "ok", [(["seed=0"], records(1.0, 0.5, 1.0))])
    assert sweep.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and all(word in err for word in expected), err


# --- the Ray launcher --------------------------------------------------------------------------------------------


def test_ray_launcher_without_ray_names_the_extra(tmp_path):
    # sys.modules["ray"] = None: `import ray` fails and find_spec finds nothing, as where ray is not installed
    script = ("import sys; sys.modules['ray'] = None; sys.argv = ['embodied', 'train', '-m', 'seed=0,1', "
              "'hydra/launcher=ray']; from embodied.cli import main; main()")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 1
    assert "hydra/launcher=ray needs the optional package 'ray'" in out.stderr and ".[ray]" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "runs").exists()


def test_composing_a_run_imports_no_ray(tmp_path):
    # Hydra imports its plugins' modules while composing; the Ray launcher's imports ray only when it launches
    script = ("import sys; from embodied.compose import compose; compose(['experiment=quadrotor_hover']); "
              "print('ray' in sys.modules)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


def test_sweep_on_ray_then_aggregate(tmp_path):
    pytest.importorskip("ray")
    pytest.importorskip("hydra_plugins.hydra_ray_launcher")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    sweep_dir = tmp_path / "sweep"
    # address=local: a Ray of its own, never a cluster that `ray start` left on this machine
    ray = ["hydra/launcher=ray", "hydra.launcher.ray.init.address=local", "hydra.launcher.ray.init.num_cpus=2",
           "+hydra.launcher.ray.init.include_dashboard=false", "hydra.launcher.ray.remote.num_cpus=1"]
    argv = [sys.executable, "-m", "embodied.cli", "train", "-m", "seed=0,1", *BUDGET, *ray,
            f"hydra.sweep.dir={sweep_dir}"]
    driver = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        stdout, stderr = driver.communicate(timeout=300)
    finally:
        driver.kill()  # only where it timed out: it has exited otherwise
    assert driver.returncode == 0, stderr
    assert "Ray Launcher is launching 2 jobs" in stdout + stderr and "validated against ConfigStore" not in stderr
    runs = [sweep_dir / "0_quadrotor_hover_seed0", sweep_dir / "1_quadrotor_hover_seed1"]
    assert all((run / "metrics.jsonl").stat().st_size > 0 for run in runs)
    # each run wrote its TensorBoard file from the process it trained in: events.out.tfevents.<time>.<host>.<pid>.<n>
    pids = {int(next((run / "tensorboard").glob("events.out.tfevents.*")).name.split(".")[-2]) for run in runs}
    assert len(pids) == 2 and driver.pid not in pids  # two Ray workers, not the `embodied train` process
    out = embodied("sweep", str(sweep_dir), cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    assert "2 runs, 1 settings" in out.stdout and "| (all runs) | 0,1 |" in out.stdout
    assert "eval/success" in out.stdout and "train_seconds" in out.stdout
    assert (sweep_dir / "sweep.png").stat().st_size > 0
