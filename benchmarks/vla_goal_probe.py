"""How well a pixel VLA's cameras locate the goal: the error of its auxiliary head (policy.privileged_aux, a linear
map of the cameras' features onto the privileged goal rows) in metres, on fresh episodes the policy acts in greedily.

    .venv/bin/python benchmarks/vla_goal_probe.py .s19bc/bc_seed0 .s19bc/ppo_seed0 [--envs 128] [--steps 40]

Per run or checkpoint: the median distance between the estimated and the true target position (`privileged`'s
first 3 rows, metres) at the episodes' first frame and over `--steps` steps, and the share of estimates within 3 cm
(MujocoReachEnv's success radius). Episodes from one seed (12345) for every checkpoint. `--misses`: one greedy episode
per env instead, the success rate by the first frame's goal error, and how close the failed episodes came.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def load(path: Path, envs: int):
    """The run's (or checkpoint's) policy with an aux head, and its env with `envs` envs on the CPU."""
    from embodied.build import make_env, make_policy
    from embodied.runner import checkpoint

    ckpt = checkpoint.find_checkpoint(path)
    config = checkpoint.load_config(ckpt)
    env = make_env(config, envs, "cpu")
    policy = make_policy(config, env)
    policy.load_state_dict(checkpoint.load_model(ckpt))
    if not getattr(policy, "has_aux_loss", False):
        raise SystemExit(f"{path}: its policy has no auxiliary head (policy.privileged_aux > 0)")
    return policy, env


def probe(path: Path, envs: int, steps: int) -> dict[str, float]:
    from embodied.runner.perception import privileged_errors

    policy, env = load(path, envs)
    obs, _ = env.reset(seed=12345)
    errors = []
    for _ in range(steps):
        errors.append(privileged_errors(policy, obs, slice(0, 3)))  # the goal rows
        with torch.no_grad():
            obs = env.step(policy.act(obs, deterministic=True).action)[0]
    env.close()
    every = torch.stack(errors)
    return {"first": float(every[0].median()), "all": float(every.median()),
            "within": float((every < 0.03).float().mean())}


def misses(path: Path, envs: int) -> None:
    """One greedy episode per env (seed 777): success by the first frame's goal error, and how close the failed
    episodes came to the goal (`privileged` rows 3-5: target - tcp)."""
    from embodied import keys
    from embodied.runner.perception import privileged_errors

    policy, env = load(path, envs)
    obs, _ = env.reset(seed=777)
    first = privileged_errors(policy, obs, slice(0, 3))
    closest = obs[keys.PRIVILEGED][:, 3:6].norm(dim=-1)
    success, finished = torch.zeros(envs, dtype=torch.bool), torch.zeros(envs, dtype=torch.bool)
    while not finished.all():
        with torch.no_grad():
            obs, _, terminated, truncated, info = env.step(policy.act(obs, deterministic=True).action)
        done = terminated | truncated
        distance = obs[keys.PRIVILEGED][:, 3:6].norm(dim=-1)  # a done env's obs is its next episode's first
        closest = torch.where(finished | done, closest, torch.minimum(closest, distance))
        success |= done & ~finished & info[keys.SUCCESS]
        finished |= done
    env.close()
    print(f"{path}: success {float(success.float().mean()):.1%} over {envs} episodes")
    for low, high in ((0, 0.01), (0.01, 0.02), (0.02, 0.03), (0.03, 0.05), (0.05, float("inf"))):
        rows = (first >= low) & (first < high)
        if rows.any():
            print(f"  first-frame goal error {100 * low:.0f}-{100 * high:.0f} cm: {int(rows.sum())} episodes, "
                  f"success {float(success[rows].float().mean()):.0%}")
    quantiles = torch.tensor([0.1, 0.25, 0.5, 0.75, 0.9])
    if (~success).any():
        cm = ", ".join(f"{100 * float(v):.1f}" for v in closest[~success].quantile(quantiles))
        print(f"  failed episodes' closest approach to the goal, 10/25/50/75/90th percentiles: {cm} cm")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", type=Path, nargs="+", help="run directories or checkpoints of a pixel VLA")
    parser.add_argument("--envs", type=int, default=128)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--misses", action="store_true", help="success by first-frame goal error, and the failed "
                        "episodes' closest approach, instead")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.misses:
        for path in args.paths:
            misses(path, args.envs)
        return
    print("| run | median error, first frame (m) | median error, all steps | within 3 cm |\n|---|---|---|---|")
    for path in args.paths:
        r = probe(path, args.envs, args.steps)
        print(f"| {path} | {r['first']:.4f} | {r['all']:.4f} | {r['within']:.1%} |", flush=True)


if __name__ == "__main__":
    main()
