"""How well a pixel VLA's cameras locate the goal: the error of its auxiliary head (policy.privileged_aux, a linear
map of the cameras' features onto the privileged goal rows) in metres, on fresh episodes the policy acts in greedily.

    .venv/bin/python benchmarks/vla_goal_probe.py .s19bc/bc_seed0 .s19bc/ppo_seed0 [--envs 128] [--steps 40]

Per run or checkpoint: the median distance between the estimated and the true target position (`privileged`'s
first 3 rows, metres) at the episodes' first frame and over `--steps` steps, and the share of estimates within 3 cm
(MujocoReachEnv's success radius). Episodes from one seed (12345) for every checkpoint.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def probe(path: Path, envs: int, steps: int) -> dict[str, float]:
    from embodied.build import make_env, make_policy
    from embodied.runner import checkpoint
    from embodied.runner.perception import privileged_errors

    ckpt = checkpoint.find_checkpoint(path)
    config = checkpoint.load_config(ckpt)
    env = make_env(config, envs, "cpu")
    policy = make_policy(config, env)
    policy.load_state_dict(checkpoint.load_model(ckpt))
    if not getattr(policy, "has_aux_loss", False):
        raise SystemExit(f"{path}: its policy has no auxiliary head (policy.privileged_aux > 0)")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", type=Path, nargs="+", help="run directories or checkpoints of a pixel VLA")
    parser.add_argument("--envs", type=int, default=128)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("| run | median error, first frame (m) | median error, all steps | within 3 cm |\n|---|---|---|---|")
    for path in args.paths:
        r = probe(path, args.envs, args.steps)
        print(f"| {path} | {r['first']:.4f} | {r['all']:.4f} | {r['within']:.1%} |", flush=True)


if __name__ == "__main__":
    main()
