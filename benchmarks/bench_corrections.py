"""The correction loop, measured: a weak policy, a scripted-operator correction session on it, a policy trained from
the session's store; each policy evaluated on the same episodes.

    .venv/bin/python benchmarks/bench_corrections.py --out /tmp/corrections_bench --seeds 0 1 2

Every step is an `embodied` command, run as a subprocess exactly as printed (the loop a user runs):
1. start:   embodied train experiment=mujoco_reach train.total_env_steps=<--start-steps>   (short PPO: a weak policy)
2.          embodied eval <start> --episodes <--eval-episodes>
3. session: embodied correct <start> robot=sim teleop=scripted --episodes <--episodes> --learner none
            (the env's scripted expert takes over under embodied/hil/operators.py's DriftRule; no live learner, so
            the session's policy stays the starting one and the store holds its behaviour plus the corrections)
4. per seed: embodied train experiment=mujoco_reach_o2o data=<session store> seed=<s>  (BC -> IQL -> RLPD)
5.          embodied eval <run> --episodes <--eval-episodes>
--control adds, per seed, the same experiment without the store (no BC, no offline RL, no offline share: online
SAC from scratch on the same online budget), so the share of the result that the online steps alone give is known.
Evaluation: `embodied eval`'s default seed for every policy, so all see the same episodes. Prints a markdown table
and writes results.json into --out.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EMBODIED = [sys.executable, "-m", "embodied.cli"]


def embodied(*argv: str) -> str:
    """Run `embodied <argv>` (printed first); its stdout, or exit with its stderr when it fails."""
    print("$ embodied " + " ".join(shlex.quote(a) for a in argv), flush=True)
    out = subprocess.run([*EMBODIED, *argv], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"embodied {argv[0]} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return out.stdout


def evaluate(run: Path, episodes: int) -> float:
    embodied("eval", str(run), "--episodes", str(episodes))
    found = sorted(run.rglob("eval.json"), key=lambda p: p.stat().st_mtime)  # written into the evaluated checkpoint
    return json.loads(found[-1].read_text())["success"]


def session_stats(stdout: str) -> dict:
    """Per-episode summaries (JSON lines of `embodied correct`) -> episodes, steps, intervention share, success."""
    episodes = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    steps = sum(e["steps"] for e in episodes)
    human = sum(e["intervention_rate"] * e["steps"] for e in episodes)
    return {"episodes": len(episodes), "steps": steps, "intervention_share": human / steps,
            "intervened_episodes": sum(e["intervention_rate"] > 0 for e in episodes) / len(episodes),
            "success": sum(e["label"] == 1 for e in episodes) / len(episodes)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="runs, the session store and results.json go here")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of the trained policies")
    parser.add_argument("--start-seed", type=int, default=0)
    parser.add_argument("--start-steps", type=int, default=16384, help="PPO env steps of the weak starting policy")
    parser.add_argument("--episodes", type=int, default=100, help="episodes of the correction session")
    parser.add_argument("--eval-episodes", type=int, default=200)
    parser.add_argument("--control", action="store_true", help="also train each seed without the store")
    args = parser.parse_args()
    out = args.out.resolve()
    if out.exists() and any(out.iterdir()):
        sys.exit(f"--out {out} is not empty: a session appends to its store, so start from an empty folder")
    common = ["train.progress=false", "threads=1"]

    start = out / "start"
    embodied("train", "experiment=mujoco_reach", f"seed={args.start_seed}", f"train.total_env_steps={args.start_steps}",
             "train.eval_episodes=0", *common, f"hydra.run.dir={start}")  # fmt: skip
    start_success = evaluate(start, args.eval_episodes)

    store = out / "corrections"
    t0 = time.monotonic()
    stats = session_stats(embodied("correct", str(start), "robot=sim", "teleop=scripted", "--episodes", str(args.episodes),
                                   "--steps", "50", "--learner", "none", "--no-status", "--store", str(store)))
    stats["seconds"] = time.monotonic() - t0

    trained = {}
    for seed in args.seeds:
        run = out / f"o2o_seed{seed}"
        t0 = time.monotonic()
        embodied("train", "experiment=mujoco_reach_o2o", f"data={store}", f"seed={seed}", *common, f"hydra.run.dir={run}")
        trained[seed] = {"success": evaluate(run, args.eval_episodes), "train_seconds": time.monotonic() - t0}
        if args.control:
            run = out / f"control_seed{seed}"
            embodied("train", "experiment=mujoco_reach_o2o", "pipeline.bc.updates=0", "pipeline.offline.updates=0",
                     "pipeline.online.offline_fraction=0", "algo.bc_weight=0", f"seed={seed}", *common,
                     f"hydra.run.dir={run}")  # fmt: skip
            trained[seed]["control_success"] = evaluate(run, args.eval_episodes)

    results = {"start_success": start_success, "session": stats, "trained": trained, "eval_episodes": args.eval_episodes}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(f"\nstarting policy: {start_success:.1%} success over {args.eval_episodes} episodes")
    print(f"session: {stats['episodes']} episodes, {stats['steps']} steps, operator in control of "
          f"{stats['intervention_share']:.1%} of the steps ({stats['intervened_episodes']:.0%} of the episodes), "
          f"{stats['success']:.0%} of the episodes successful, {stats['seconds']:.0f} s")  # fmt: skip
    print("\n| seed | trained success | train + eval s | control (no store) |\n|---:|---:|---:|---:|")
    for seed, r in trained.items():
        control = f"{r['control_success']:.1%}" if "control_success" in r else "-"
        print(f"| {seed} | {r['success']:.1%} | {r['train_seconds']:.0f} | {control} |")


if __name__ == "__main__":
    main()
