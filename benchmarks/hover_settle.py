"""Where a trained hover policy settles: after 2.8 s of its 3 s episodes, from the run's own evaluation states, the
mean offset from the target, the median distance and speed, and the fraction within the success radius (0.1 m),
with the mean action and with sampled actions.

    .venv/bin/python benchmarks/hover_settle.py runs/quadrotor_hover/<run> [<run> ...]

A run whose deterministic success is far below its training (sampled) success usually settles just outside the
radius (benchmarks/RESULTS.md, 2026-11-27).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from embodied.build import make_env, make_policy  # noqa: E402
from embodied.runner import checkpoint  # noqa: E402
from embodied.runner.evaluate import eval_seed  # noqa: E402

EPISODES, STEPS = 1000, 280  # 2.8 s at 100 Hz: before the time limit resets the envs


@torch.no_grad()
def settle(run: Path, deterministic: bool) -> dict[str, float]:
    ckpt = checkpoint.find_checkpoint(run)
    config = checkpoint.load_config(ckpt)
    radius = float(config["env"].get("success_radius", 0.1))
    torch.manual_seed(0)
    env = make_env(config, EPISODES, torch.device("cpu"))
    policy = make_policy(config, env)
    policy.load_state_dict(checkpoint.load_model(ckpt))
    policy.eval()
    obs, _ = env.reset(seed=eval_seed(int(config["seed"])))
    for _ in range(STEPS):
        obs, *_ = env.step(policy.act(obs, deterministic=deterministic).action)
    offset, velocity = obs["state"][:, 0:3], obs["state"][:, 3:6]  # position - target, velocity (the env's layout)
    distance = offset.norm(dim=1)
    return {"offset": offset.mean(0).tolist(), "distance": distance.median().item(),
            "speed": velocity.norm(dim=1).median().item(), "inside": (distance < radius).float().mean().item()}


def main() -> None:
    print("| run | actions | mean offset x / y / z (m) | median distance (m) | median speed (m/s) | within 0.1 m |")
    print("|---|---|---|---|---|---|")
    for run in map(Path, sys.argv[1:]):
        for deterministic in (True, False):
            s = settle(run, deterministic)
            offset = " / ".join(f"{v:+.3f}" for v in s["offset"])
            print(f"| {run.name} | {'mean' if deterministic else 'sampled'} | {offset} | {s['distance']:.3f} | "
                  f"{s['speed']:.3f} | {100 * s['inside']:.1f}% |", flush=True)


if __name__ == "__main__":
    main()
