"""A camera env's step at many envs, the code of a commit before against this checkout's, interleaved.

    .venv/bin/python benchmarks/bench_camera_step.py --before <tree> [--rounds 5] [--envs 256]

`MujocoReachEnv` with the pixel VLA's cameras (front and side, 48 px, goal out of the state, one thread), its
episode clocks spread over the time limit after the reset, so that some envs end and reset in most steps as in a
PPO rollout (~N / max_episode_steps a step). Per arm and round a fresh process (the host's drift hits both alike):
milliseconds per `env.step` of random actions, median of 10 steps after 2 warm-ups, and the resets they held.
<tree>: `git worktree add --detach <tree> <rev>`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

STEP = """
import sys, time, statistics
sys.path.insert(0, {tree!r})
import torch
from sims.mujoco import MujocoReachEnv
env = MujocoReachEnv(MujocoReachEnv.Config(cameras=("front", "side"), image_size=48, goal_in_state=False,
                                           num_threads=1), num_envs={envs})
env.reset(seed=0)
gen = torch.Generator().manual_seed(0)
env.steps[:] = torch.randint(0, env.config.max_episode_steps, ({envs},), generator=gen).numpy()
times, resets = [], 0
for i in range(12):
    action = torch.rand({envs}, 4, generator=gen) * 2 - 1
    start = time.perf_counter()
    _, _, terminated, truncated, _ = env.step(action)
    times.append(time.perf_counter() - start)
    resets += int((terminated | truncated).sum()) if i >= 2 else 0
print(1000 * statistics.median(times[2:]), resets)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="a checkout of the commit before")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--envs", type=int, default=256)
    args = parser.parse_args()
    arms: dict[str, list[float]] = {"before": [], "after": []}
    for r in range(args.rounds):
        for label, tree in (("before", args.before), ("after", str(HERE))):
            out = subprocess.run([sys.executable, "-c", STEP.format(tree=tree, envs=args.envs)], capture_output=True,
                                 text=True, check=True)
            ms, resets = out.stdout.split()
            arms[label].append(float(ms))
        print(f"round {r + 1}/{args.rounds}: before {arms['before'][-1]:.0f} ms, after {arms['after'][-1]:.0f} ms "
              f"({resets} resets in 10 steps)", flush=True)
    old, new = arms["before"], arms["after"]
    ratio = statistics.median(o / n for o, n in zip(old, new))
    print(f"\n| {args.envs} envs, 2 cameras, 48 px | before: ms per step, median (min-max) | after | speed-up |")
    print("|---|---|---|---|")
    print(f"| | {statistics.median(old):.0f} ({min(old):.0f}-{max(old):.0f}) | {statistics.median(new):.0f} "
          f"({min(new):.0f}-{max(new):.0f}) | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
