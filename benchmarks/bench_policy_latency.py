"""Batch-1 CPU latency of the generative policies, side by side in one process, interleaved.

    .venv/bin/python benchmarks/bench_policy_latency.py [--checkpoint bc/checkpoints/final] [--repeats 200]

Rows (median and interquartile range of per-call times over interleaved rounds):
- diffusion act, 10-step DDIM (deterministic)       vs  the one-step consistency student
- raw forward of the same modules (encoder, 10 denoiser steps; no TensorDict/ActOutput plumbing)
  vs the framework's `act`: the overhead the Policy contract adds
- flow act (10 Euler steps) likewise.
With --checkpoint (a diffusion BC run with distill_updates > 0) it also reports the success of both
samplers on `--episodes` arm-reach episodes: the distilled head's success drop.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from embodied import registry
from embodied.runner import checkpoint
from embodied.runner.evaluate import evaluate
from policies.diffusion.schedule import ddim_step


def timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def raw_ddim(policy, obs):
    """The same computation as act(deterministic=True), written against the modules directly."""
    cond = policy.encoder(obs)
    x = cond.new_zeros(1, policy.config.horizon, policy.action_dim)
    for i in range(policy.config.sample_steps):
        k = policy.steps[i]
        pred = policy.denoiser(x, k.expand(1), cond)
        x, _ = ddim_step(x, pred, policy.ab[i], policy.ab_prev[i], policy.config.prediction, 0.0, policy.config.min_std)
    return policy.action_norm.inverse(x[:, 0]).clamp(-1, 1)  # deterministic act skips the critic


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--repeats", type=int, default=200)  # calls per case per round
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--episodes", type=int, default=1000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    env = registry.build("env", "arm_reach", {}, num_envs=1)
    spec = dict(observation_spec=env.observation_spec, action_spec=env.action_spec)
    ddim = registry.build("policy", "diffusion", {}, **spec).eval()
    student = registry.build("policy", "diffusion", {"sampler": "consistency"}, **spec).eval()
    flow = registry.build("policy", "flow", {}, **spec).eval()
    if args.checkpoint:
        weights = checkpoint.load_model(args.checkpoint)
        ddim.load_state_dict(weights)
        student.load_state_dict(weights)
    student.load_state_dict(ddim.state_dict())
    obs, _ = env.reset(seed=0)
    cases = {
        "diffusion act, 10-step DDIM": lambda: ddim.act(obs, deterministic=True),
        "diffusion raw forward, 10-step DDIM": lambda: raw_ddim(ddim, obs),
        "diffusion act, one-step student": lambda: student.act(obs, deterministic=True),
        "flow act, 10 Euler steps": lambda: flow.act(obs, deterministic=True),
    }
    samples: dict[str, list[float]] = {name: [] for name in cases}
    with torch.inference_mode():
        for fn in cases.values():  # warm-up
            timed(fn, 20)
        for _ in range(args.rounds * args.repeats):  # call by call, round robin: contention hits every case alike
            for name, fn in cases.items():
                samples[name] += timed(fn, 1)
    med = {}
    for name, times in samples.items():
        q = statistics.quantiles(times, n=4)
        med[name] = statistics.median(times)
        print(f"{name:40s} median {med[name] * 1e6:8.1f} us   IQR {q[0] * 1e6:.1f}-{q[2] * 1e6:.1f} us")
    print(f"speed-up of the one-step student over 10-step DDIM: "
          f"{med['diffusion act, 10-step DDIM'] / med['diffusion act, one-step student']:.1f}x")
    print(f"framework act overhead over the raw forward: "
          f"{(med['diffusion act, 10-step DDIM'] / med['diffusion raw forward, 10-step DDIM'] - 1) * 100:+.1f}%")
    if args.checkpoint:
        config = checkpoint.load_config(args.checkpoint)
        eval_env = registry.build("env", "arm_reach", {k: v for k, v in config["env"].items() if k != "name"},
                                  num_envs=args.episodes)
        for name, policy in (("10-step DDIM", ddim), ("one-step student", student)):
            result = evaluate(policy, eval_env, seed=12345)
            print(f"success, {name}: {result['success']:.3f} over {args.episodes} episodes")


if __name__ == "__main__":
    main()
