"""Batch-1 CPU latency of the VLA policy's act against a raw forward of the same modules, and
KV-cached against uncached decoding, interleaved call by call in one process.

    .venv/bin/python benchmarks/bench_vla.py [--horizon 4] [--repeats 50] [--rounds 5]

Rows (median and interquartile range per call):
- VLA act (greedy, KV cache): the Policy contract's act
- raw forward: the same prefix + cached greedy token loop written against the transformers model
  directly (no ActOutput, no value head, no de-tokenization)
- VLA act without the KV cache (the whole sequence re-run per token)
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from embodied import registry


def raw_greedy(policy, obs):
    """act(deterministic=True)'s model calls with nothing around them."""
    lm, first = policy.lm, policy.layout.first_action
    out = lm(inputs_embeds=policy.prefix(obs), use_cache=True, logits_to_keep=1)
    ids = []
    for k in range(policy.tokens):
        ids.append(out.logits[:, -1, first:].argmax(-1) + first)
        if k < policy.tokens - 1:
            out = lm(inputs_embeds=lm.get_input_embeddings()(ids[-1]).unsqueeze(1),
                     past_key_values=out.past_key_values, use_cache=True, logits_to_keep=1)
    return torch.stack(ids, 1)


def round_robin(cases: dict, calls: int) -> dict[str, float]:
    """Time each case `calls` times, round robin after one warm-up call each (contention hits every case alike);
    print median and interquartile range, return the medians in seconds."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    with torch.inference_mode():
        for fn in cases.values():
            fn()
        for _ in range(calls):
            for name, fn in cases.items():
                start = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - start)
    med = {}
    width = max(map(len, cases))
    for name, times in samples.items():
        q = statistics.quantiles(times, n=4)
        med[name] = statistics.median(times)
        print(f"{name:{width}s} median {med[name] * 1e3:8.2f} ms   IQR {q[0] * 1e3:.2f}-{q[2] * 1e3:.2f} ms")
    return med


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--horizon", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    env = registry.build("env", "arm_reach", {}, num_envs=1)
    spec = dict(observation_spec=env.observation_spec, action_spec=env.action_spec)
    cached = registry.build("policy", "vla", {"horizon": args.horizon}, **spec).eval()
    uncached = registry.build("policy", "vla", {"horizon": args.horizon, "use_cache": False}, **spec).eval()
    uncached.load_state_dict(cached.state_dict())
    obs, _ = env.reset(seed=0)
    cases = {
        "VLA act, greedy, KV cache": lambda: cached.act(obs, deterministic=True),
        "raw forward, greedy, KV cache": lambda: raw_greedy(cached, obs),
        "VLA act, greedy, no cache": lambda: uncached.act(obs, deterministic=True),
    }
    assert torch.equal(cases["raw forward, greedy, KV cache"](), cached.act(obs, True).extras["tokens"])
    med = round_robin(cases, args.rounds * args.repeats)
    print(f"{cached.tokens} action tokens; framework act overhead over the raw forward: "
          f"{(med['VLA act, greedy, KV cache'] / med['raw forward, greedy, KV cache'] - 1) * 100:+.1f}%")
    print(f"KV cache speed-up: {med['VLA act, greedy, no cache'] / med['VLA act, greedy, KV cache']:.2f}x")


if __name__ == "__main__":
    main()
