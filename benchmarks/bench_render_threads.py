"""Camera envs rendering in threads (`env.num_threads`, sims/mujoco/render.py), side by side, interleaved.

    .venv/bin/python benchmarks/bench_render_threads.py render [--rounds 5]       # frames: threads x llvmpipe
    .venv/bin/python benchmarks/bench_render_threads.py train --before <tree> [--rounds 3] [--iters 3]

render: `CameraRenderer.render` of the front and side cameras, in a fresh process per arm and round (Mesa reads
LP_NUM_THREADS once per process): 1 and 2 render threads, with llvmpipe's helper threads (LP_NUM_THREADS = the
cores, Mesa's default, as before) and without (LP_NUM_THREADS=0, sims.mujoco's default now), at 48 px (256 envs,
the pixel tasks' size), 128 px (32 envs) and 256 px (8 envs); milliseconds per call, median of 5 calls after 2
warm-ups. The arms draw in the threads they name on any GL, a GPU's driver too (where `env.num_threads` keeps one
renderer, as this measured: RESULTS.md "Rendering in threads").
train: env-steps/s of PPO iterations (collection + update) built as `embodied train` builds them, for the image MLP
(`experiment=mujoco_reach_rgb`, 32 envs) and the pixel VLA (`experiment=mujoco_reach_rgb_vla_ppo`, 256 envs as its
GPU job runs, 8 steps per collection to keep the job short), the code of `--before` (a git worktree of the commit
before) against this checkout's; one process per arm and round, a warm-up iteration first. Each round's arms run one
after another, so the host's drift hits them alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

RENDER = """
import sys, time, statistics
sys.path.insert(0, {tree!r})
from sims.mujoco import MujocoReachEnv
from sims.mujoco import render
from sims.mujoco.render import CameraRenderer
render.software_gl = lambda name: True  # the threads the arm names, on a GPU too (where one renderer is the rule)
env = MujocoReachEnv(MujocoReachEnv.Config(image_size={size}, goal_in_state=False, num_threads=1), num_envs={envs})
env.reset(seed=0)
cams = CameraRenderer(env.model, ("front", "side"), {size}, threads={threads}, envs={envs})
args = (env.physics, env.target, env.camera, env.light)
times = []
for i in range(7):
    start = time.perf_counter(); cams.render(*args); times.append(time.perf_counter() - start)
cams.close()
print(1000 * statistics.median(times[2:]))
"""

TRAIN = """
import sys, tempfile, time
from pathlib import Path
sys.path.insert(0, {tree!r})
import torch
from embodied.cli import compose
from embodied.runner.trainer import Trainer
trainer = Trainer(compose({overrides!r}), Path(tempfile.mkdtemp()))
trainer.collector.reset(seed=0)
steps = 0
for i in range({iters} + 1):
    if i == 1:
        start, steps = time.perf_counter(), 0
    batch = trainer.collector.collect()
    steps += trainer.collector.count(batch)
    trainer.algo.update(batch)
print(steps / (time.perf_counter() - start))
"""

QUIET = ["train.eval_episodes=0", "train.eval_every=0", "train.progress=false"]
TASKS = {
    "image MLP, 32 envs x 32 steps": ["experiment=mujoco_reach_rgb", *QUIET],
    "pixel VLA, 256 envs x 8 steps": ["experiment=mujoco_reach_rgb_vla_ppo", "train.num_envs=256",
                                      "train.rollout_steps=8", *QUIET],
}


def run(code: str, env: dict[str, str]) -> float:
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    return float(out.stdout.strip().splitlines()[-1])


def environ(lp: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LP_NUM_THREADS"}
    return env if lp is None else {**env, "LP_NUM_THREADS": lp}


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):,.1f} ({min(values):,.1f}-{max(values):,.1f})"


def render(rounds: int) -> None:
    sizes = {48: 256, 128: 32, 256: 8}
    mesa = str(os.cpu_count())  # llvmpipe's default: a helper thread per core
    arms = {(size, lp, threads): [] for size in sizes for lp in (mesa, "0") for threads in (1, 2)}
    for r in range(rounds):
        for (size, lp, threads), values in arms.items():
            code = RENDER.format(tree=str(HERE), size=size, envs=sizes[size], threads=threads)
            values.append(run(code, environ(lp)))
        print(f"round {r + 1}/{rounds} done", flush=True)
    print("\n| frame, envs | LP_NUM_THREADS | render threads | ms per call, median (min-max) | "
          f"speed vs {mesa}, 1 thread |")
    print("|---|---|---|---|---|")
    for (size, lp, threads), values in arms.items():
        base = arms[(size, mesa, 1)]
        ratio = statistics.median(b / v for b, v in zip(base, values))
        print(f"| {size} px, {sizes[size]} | {lp} | {threads} | {spread(values)} | {ratio:.2f}x |")


def train(before: str, rounds: int, iters: int) -> None:
    # before: its own code and defaults (llvmpipe's threads, one renderer); after: this checkout's
    arms = {(task, label): [] for task in TASKS for label in ("before", "after")}
    for r in range(rounds):
        for (task, label), values in arms.items():
            tree = before if label == "before" else str(HERE)
            code = TRAIN.format(tree=tree, overrides=TASKS[task], iters=iters)
            values.append(run(code, environ(None)))
        last = ", ".join(f"{task} {label} {v[-1]:,.0f}" for (task, label), v in arms.items())
        print(f"round {r + 1}/{rounds}: {last}", flush=True)
    print("\n| task | before: env-steps/s | after | after / before (median of rounds) |\n|---|---|---|---|")
    for task in TASKS:
        old, new = arms[(task, "before")], arms[(task, "after")]
        ratio = statistics.median(n / o for n, o in zip(new, old))
        print(f"| {task} | {spread(old)} | {spread(new)} | {ratio:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["render", "train"])
    parser.add_argument("--before", help="train: a checkout of the commit before (git worktree add --detach DIR REV)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=3)
    args = parser.parse_args()
    if args.mode == "render":
        render(args.rounds)
    else:
        if not args.before:
            parser.error("train needs --before <a checkout of the commit before>")
        train(args.before, args.rounds, args.iters)


if __name__ == "__main__":
    main()
