"""Does a larger camera image let the pixel VLA's vision tower place the goal more precisely? Its keypoint tower and
goal head (`policy.privileged_aux`'s regression alone, no actions: the pipeline's perception stage,
embodied/runner/perception.py) trained from scratch on the same reset frames of `MujocoReachEnv` (front and side
cameras, goal out of the state) at each image size, the same seed, updates and batch; the held-out frames' median goal
error in metres.

    .venv/bin/python benchmarks/vla_goal_resolution.py [--sizes 48 96] [--updates 600] [--train-resets 16]

Each reset draws 256 new goals; the test frames are 2 more resets (512 goals, none seen in training).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def run(size: int, updates: int, train_resets: int) -> dict[str, float]:
    from embodied.runner.perception import privileged_errors, reset_frames, train_perception
    from policies.vla import VLAConfig, VLAPolicy
    from sims.mujoco import MujocoReachEnv

    env = MujocoReachEnv(MujocoReachEnv.Config(cameras=("front", "side"), image_size=size, goal_in_state=False), 256)
    data = reset_frames(env, [1000 + r for r in range(train_resets + 2)])
    env.close()
    train, test = data[: env.num_envs * train_resets], data[env.num_envs * train_resets :]
    torch.manual_seed(0)
    policy = VLAPolicy(VLAConfig(vision="keypoints", privileged_aux=1.0), env.observation_spec, env.action_spec)
    start = time.perf_counter()
    loss = train_perception(policy, train, updates)
    seconds = time.perf_counter() - start
    error = privileged_errors(policy, test, slice(0, 3))  # the goal rows
    return {"error": float(error.median()), "within": float((error < 0.03).float().mean()), "loss": loss,
            "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[48, 96])
    parser.add_argument("--updates", type=int, default=600)
    parser.add_argument("--train-resets", type=int, default=16)
    args = parser.parse_args()
    print(f"| image | held-out median goal error | within 3 cm | last training loss | s for {args.updates} updates |")
    print("|---|---|---|---|---|")
    for size in args.sizes:
        r = run(size, args.updates, args.train_resets)
        print(f"| {size} px | {100 * r['error']:.1f} cm | {r['within']:.1%} | {r['loss']:.3f} | {r['seconds']:.0f} |",
              flush=True)


if __name__ == "__main__":
    main()
