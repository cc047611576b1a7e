"""Does a larger camera image let the pixel VLA's vision tower place the goal more precisely? Its keypoint tower and
goal head (`policy.privileged_aux`'s regression, alone: no actions) trained from scratch on the same reset frames of
`MujocoReachEnv` (front and side cameras, goal out of the state) at each image size, the same seed, updates and batch;
the held-out frames' median goal error in metres.

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


def frames(size: int, resets: int):
    from tensordict import TensorDict

    from sims.mujoco import MujocoReachEnv

    env = MujocoReachEnv(MujocoReachEnv.Config(cameras=("front", "side"), image_size=size, goal_in_state=False), 256)
    obs = torch.cat([env.reset(seed=1000 + r)[0] for r in range(resets)])
    spec, action = env.observation_spec, env.action_spec
    env.close()
    return TensorDict({"obs": obs, "action": torch.zeros(len(obs), action.shape[0])}, batch_size=[len(obs)]), spec, action


def run(size: int, updates: int, train_resets: int) -> dict[str, float]:
    from embodied import keys
    from policies.vla import VLAConfig, VLAPolicy

    data, spec, action = frames(size, train_resets + 2)
    train, test = data[: 256 * train_resets], data[256 * train_resets :]
    torch.manual_seed(0)
    policy = VLAPolicy(VLAConfig(vision="keypoints", privileged_aux=1.0), spec, action)
    policy.fit_normalizers(train)
    optimizer = torch.optim.Adam([*policy.vision.parameters(), *policy.aux_head.parameters()], lr=1e-3)  # BC's lr
    start = time.perf_counter()
    for _ in range(updates):
        batch = train[torch.randint(len(train), (256,))]  # BC's batch size
        loss = policy.privileged_loss(batch["obs"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    seconds = time.perf_counter() - start
    with torch.no_grad():
        features = policy.camera_features(test["obs"])
        estimate = policy.privileged_norm.inverse(policy.aux_head(torch.cat([f.mean(1) for f in features], -1)))
        error = (estimate[:, :3] - test["obs", keys.PRIVILEGED][:, :3]).norm(dim=-1)
    return {"error": float(error.median()), "within": float((error < 0.03).float().mean()), "loss": float(loss.detach()),
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
