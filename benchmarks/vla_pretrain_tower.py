"""Pretrain a pixel VLA's vision tower on the goal regression alone (sim-labelled reset frames, no actions), and save
the whole policy as a checkpoint that `init_from=` starts a BC run from (issue 19's perception-first try):

    .venv/bin/python benchmarks/vla_pretrain_tower.py --out runs/tower_seed0 [--seed 0] [--resets 16] [--updates 600]
    embodied train experiment=mujoco_reach_rgb_vla_ppo seed=0 init_from=runs/tower_seed0 policy.freeze_vision=true \\
        train.total_env_steps=0        # BC on the frozen tower (then PPO from that run as before)

The policy is built from `experiment=mujoco_reach_rgb_vla_ppo` (or --overrides) exactly as `embodied train` builds it,
so its weights fit. The tower and the goal head train at BC's lr 1e-3 and batch 256 (`train_tower`, which
benchmarks/vla_goal_resolution.py shares); the printed held-out error is on 2 more resets.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def reset_frames(env, seeds: list[int]):
    """The observations of `env.reset(seed)` for each seed, as a dataset with zero actions ([len(seeds) x N])."""
    from tensordict import TensorDict

    from embodied import keys

    obs = torch.cat([env.reset(seed=s)[0] for s in seeds])
    return TensorDict({keys.OBS: obs, keys.ACTION: torch.zeros(len(obs), env.action_spec.shape[0])}, [len(obs)])


def goal_errors(policy, obs) -> torch.Tensor:
    """Metres between the aux head's target estimate and the true target (`privileged`'s first 3 rows) [B]."""
    from embodied import keys

    with torch.no_grad():
        return (policy.estimate_privileged(obs)[:, :3] - obs[keys.PRIVILEGED][:, :3]).norm(dim=-1)


def train_tower(policy, train, updates: int) -> float:
    """Fit the normalizers, then `updates` Adam steps of the tower and goal head on `policy.privileged_loss` alone
    (BC's lr and batch size); returns the last loss."""
    from embodied import keys

    policy.fit_normalizers(train)
    optimizer = torch.optim.Adam([*policy.vision.parameters(), *policy.aux_head.parameters()], lr=1e-3)
    for _ in range(updates):
        loss = policy.privileged_loss(train[torch.randint(len(train), (256,))][keys.OBS])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return float(loss.detach())


def main() -> None:
    from embodied import keys
    from embodied.build import make_env, make_policy
    from embodied.compose import compose
    from embodied.runner import checkpoint

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resets", type=int, default=16)
    parser.add_argument("--updates", type=int, default=600)
    parser.add_argument("--overrides", nargs="*", default=["experiment=mujoco_reach_rgb_vla_ppo"])
    args = parser.parse_args()
    config = compose([*args.overrides, f"seed={args.seed}", "device=cpu"])
    torch.manual_seed(args.seed)
    env = make_env(config, 256, torch.device("cpu"))
    data = reset_frames(env, [10_000 * (args.seed + 1) + r for r in range(args.resets + 2)])
    train, test = data[: 256 * args.resets], data[256 * args.resets :]
    policy = make_policy(config, env)
    env.close()
    train_tower(policy, train, args.updates)
    error = goal_errors(policy, test[keys.OBS])
    checkpoint.save_checkpoint(args.out, policy.state_dict(), {}, config)
    print(f"held-out median goal error {100 * float(error.median()):.1f} cm ({float((error < 0.03).float().mean()):.1%}"
          f" within 3 cm); the policy's weights in {args.out}")


if __name__ == "__main__":
    main()
