"""CPU latency of one VLA action: autoregressive decoding with the KV cache vs parallel decoding
(`policy.decoding=parallel`, OpenVLA-OFT) vs a raw `transformers` forward of the same backbone,
at each batch size, interleaved call by call in one process, 1 thread.

    .venv/bin/python benchmarks/bench_vla_decoding.py [--batches 1 64] [--horizon 1] [--repeats 20] [--rounds 3]
    .venv/bin/python benchmarks/bench_vla_decoding.py --backbone smollm2-135m-instruct --batches 1 8

The policy is experiment=arm_reach_vla_ppo's (2-layer, 64-wide Llama unless --backbone; 32 bins,
40 instruction bytes, 12 instruction tokens with a pretrained backbone, the MLP critic), on
arm_reach observations. Rows per batch size (median and interquartile range per call):
- act, autoregressive, KV cache: the prefix pass, then one cached pass per action token (H*A of them)
- act, parallel: one pass over the prefix and H*A placeholders
- raw forward: `lm(inputs_embeds=...)` over the same P + H*A positions, embeddings made beforehand, no
  prefix building, sampling or value: the floor under the parallel act
Both acts sample (deterministic=False), as rollouts do.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere
from benchmarks.bench_vla import round_robin  # noqa: E402
from embodied import registry  # noqa: E402

POLICY = {"n_bins": 32, "language_tokens": 12, "critic": "mlp"}  # configs/experiment/arm_reach_vla_ppo.yaml
ENV = {"max_instruction_bytes": 40}


def cases_for(batch: int, backbone: str, horizon: int) -> dict:
    env = registry.build("env", "arm_reach", ENV, num_envs=batch)
    spec = dict(observation_spec=env.observation_spec, action_spec=env.action_spec)
    torch.manual_seed(0)
    serial = registry.build("policy", "vla", {**POLICY, "backbone": backbone, "horizon": horizon}, **spec).eval()
    parallel = registry.build("policy", "vla", {**POLICY, "backbone": backbone, "horizon": horizon,
                                                "decoding": "parallel"}, **spec, backbone=serial.lm,
                              tokenizer=serial.tokenizer).eval()  # the very same backbone module
    obs, _ = env.reset(seed=0)
    with torch.inference_mode():
        seq = torch.cat([parallel.prefix(obs), parallel.action_queries.expand(batch, -1, -1)], 1)
    k = parallel.tokens
    print(f"batch {batch}: {serial.lm.config.model_type}, {sum(p.numel() for p in serial.lm.parameters()) / 1e6:.2f}M "
          f"backbone parameters, prefix {seq.shape[1] - k} positions, {k} action tokens")
    return {
        f"b{batch} act, autoregressive, KV cache": lambda: serial.act(obs),
        f"b{batch} act, parallel": lambda: parallel.act(obs),
        f"b{batch} raw transformers forward, P+K positions": lambda: serial.lm(
            inputs_embeds=seq, use_cache=False, logits_to_keep=k),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--backbone", default="llama")
    parser.add_argument("--horizon", type=int, default=1)  # the experiment's: one action of A=4 tokens
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    cases = {}
    for batch in args.batches:
        cases.update(cases_for(batch, args.backbone, args.horizon))
    med = round_robin(cases, args.rounds * args.repeats)
    for batch in args.batches:
        serial, parallel, raw = (med[f"b{batch} {c}"] for c in (
            "act, autoregressive, KV cache", "act, parallel", "raw transformers forward, P+K positions"))
        print(f"batch {batch}: parallel speed-up over autoregressive {serial / parallel:.2f}x; "
              f"parallel act over the raw forward {(parallel / raw - 1) * 100:+.1f}%")


if __name__ == "__main__":
    main()
