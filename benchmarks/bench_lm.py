"""Language-model RL speed: one GRPO step, ours vs TRL's GRPOTrainer; and sampling tokens/s vs `model.generate`.

    .venv/bin/python benchmarks/bench_lm.py --out /tmp/bench_lm.json   # both parts, defaults, 1 thread (~25 min)
    .venv/bin/python benchmarks/bench_lm.py --only grpo --steps 5 --prompts 4 --group 8 --max-new-tokens 32
    .venv/bin/python benchmarks/bench_lm.py --only generate --batches 1 16 64 --repeats 5 --lengths fixed
    .venv/bin/python benchmarks/bench_lm.py --steps 2 --group 4 --prompts 2 --max-new-tokens 16 --batches 1 16 \
        --repeats 2                                                      # smoke test, ~2 min

Part 1, one GRPO step. Both sides train SmolLM2-135M-Instruct (float32, CPU; the cached safetensors directory
that policies/lm/load.py writes, read with local_files_only) through the same LoRA (rank 16, alpha 32,
"all-linear", dropout 0) on the same `--prompts` single-turn arithmetic questions rendered by the model's chat
template, `--group` completions each, at most `--max-new-tokens` tokens each (stopping at EOS), temperature 1.0
with no top-k/top-p, no KL term, lr 1e-6, clip 0.2, token-mean loss (TRL's "dapo"), max grad norm 1.0, and one
optimizer step over the whole batch of prompts x group per generation batch. The reward is `score`: 1 when the
reply contains the correct number. One step:
    ours  the rollout worker's sync (policies/lm/rollout.py: a copy of the model with LoRA merged in, as the
          Trainer's TextCollector keeps) + collect_text over `ArithmeticEnv` (a TextEnv whose episode ends after
          one reply; one episode per seed, `--group` equal seeds per question) + GRPO.update with
          GRPO.Config(minibatches=1, epochs=1)
    TRL   one optimizer step of GRPOTrainer.train(): GRPOConfig(num_iterations=1, gradient_accumulation_steps=1,
          per_device_train_batch_size=prompts x group, num_generations=group, beta=0, use_cpu=True, bf16=False,
          gradient_checkpointing=False), the model handed over with peft_config
The steps interleave (ours, TRL, ours, ...) after one warm-up step each: our step runs from a TrainerCallback's
`on_step_begin`, and TRL's step is timed from that callback's `on_step_begin` to its `on_step_end` (generation,
reward, loss, backward and the optimizer step; not the dataloader's fetch of a handful of prompts). Replies stop at
EOS on both sides, so the two may generate different numbers of tokens: the table gives the mean completion length
(tokens, EOS included) of each side's steps; compare steps/s with it in view. Each step is also split into rollout
(ours: sync + collect_text; TRL: from the step's start to the reward function's call, which follows generation) and the
rest (advantages, loss, backward, optimizer step). Memory: our update scores the completion tokens only (the
rollout's `extras["score"]`, as TRL does); 4 prompts x 8 completions x 32 tokens peaked at 11 GiB (2026-11-25).

Part 2, sampling tokens/s at each `--batches` size: `policies.lm.sampling.sample` (through LMPolicy.generate) vs
`model.generate(do_sample=True, temperature=1.0, top_k=0, top_p=1.0)` on the same model object (no LoRA), the same
left-padded chat prompts and the same `--max-new-tokens`. Only generated tokens count (up to and including the
first EOS per row). Variant "eos" stops rows at EOS; variant "fixed" makes every row generate exactly
`--max-new-tokens` (ours: a stop id that is never sampled; plain: min_new_tokens), so both do the same work.
Repeats interleave ours and plain; ratios are medians of per-repeat ratios.

Numbers depend on the host's load and thread count (`--threads`, default 1): report the ratios, and rerun the
baseline on the same machine before comparing absolute seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # TRL, datasets and transformers must never reach the network
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from embodied import keys  # noqa: E402
from embodied.algorithms.grpo import GRPO  # noqa: E402
from embodied.text_env import Message, TextEnv, Turn, instance_seed  # noqa: E402
from embodied.text_rollout import collect_text  # noqa: E402
from policies.lm.policy import LMPolicy  # noqa: E402

MODEL = "smollm2-135m-instruct"
NEVER = -1  # a stop id no sampled token equals: rows run to max_new_tokens


# --- the task both sides train on ------------------------------------------------------------


def arithmetic_problems(n: int, seed: int = 0) -> list[tuple[str, int]]:
    """`n` (question, answer) pairs: one-digit additions (which the 135M model sometimes gets right, so rewards
    vary within a group), deterministic in `seed`."""
    rng = random.Random(seed)
    problems = []
    for _ in range(n):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        problems.append((f"What is {a} + {b}? Reply with the number.", a + b))
    return problems


def score(reply: str, answer: int) -> float:
    """1.0 when the reply holds the correct number (not as part of a longer one), else 0.0."""
    return float(re.search(rf"(?<!\d){answer}(?!\d)", reply) is not None)


def chat(question: str) -> list[Message]:
    return [{"role": "user", "content": question}]


class ArithmeticEnv(TextEnv):
    """Single-turn: the episode of seed i (a train seed) asks problems[i] and ends after one reply, reward `score`."""

    max_turns = 1

    def __init__(self, problems: list[tuple[str, int]]):
        self.problems = problems

    def _new_episode(self, seed: int) -> tuple[str, int]:
        return self.problems[seed]

    def _opening(self, episode: tuple[str, int]) -> list[Message]:
        return chat(episode[0])

    def _respond(self, episode: tuple[str, int], reply: str) -> Turn:
        reward = score(reply, episode[1])
        return Turn(reward=reward, terminated=True, success=reward > 0)


# --- part 1: one GRPO step ---------------------------------------------------------------------


class Ours:
    """Sync the rollout worker (policies/lm/rollout.py: a copy with LoRA merged) + collect_text + GRPO.update, one
    optimizer step over the whole batch: the Trainer's step."""

    def __init__(self, problems: list[tuple[str, int]], group: int, max_new_tokens: int):
        self.policy = LMPolicy(LMPolicy.Config(model=MODEL, max_new_tokens=max_new_tokens, temperature=1.0)).train()
        # kl_coef 0, lr 1e-6, clip 0.2, token-mean, max_grad_norm 1.0 are GRPO.Config's defaults (and TRL's)
        self.algo = GRPO(GRPO.Config(minibatches=1, epochs=1, group_size=group, kl_coef=0.0), self.policy)
        self.env = ArithmeticEnv(problems)
        self.seeds = [instance_seed("train", i) for i in range(len(problems)) for _ in range(group)]
        self.sampler, self.updates = self.policy.sampler(), 0

    def step(self) -> dict[str, float]:
        start = time.perf_counter()
        self.sampler.sync(self.policy, self.updates)
        batch = collect_text(self.env, self.sampler, self.seeds)
        self.updates += 1
        rollout = time.perf_counter() - start
        metrics = self.algo.update(batch)
        return {"rollout_seconds": rollout, "completion_tokens": batch[keys.MASK].sum(1).float().mean().item(),
                "reward": metrics["reward_mean"]}


class Trl:
    """GRPOTrainer on the same model, LoRA, prompts and reward; `train()` runs warm-up + `steps` optimizer steps and
    calls `between(i)` before each (our side's step i, interleaved). The reward function is called right after
    generation, so the time from the step's start to that call is TRL's rollout time (`rollout_seconds`)."""

    def __init__(self, problems: list[tuple[str, int]], group: int, max_new_tokens: int, steps: int, workdir: str,
                 seed: int = 0):
        import peft
        from datasets import Dataset
        from transformers import TrainerCallback
        from trl import GRPOConfig, GRPOTrainer

        from policies.lm.load import load_lm

        model, tokenizer = load_lm(MODEL, torch.float32)  # the cached directory, local_files_only=True
        lora = LMPolicy.Config()  # the LoRA settings our side uses
        peft_config = peft.LoraConfig(r=lora.lora_rank, lora_alpha=lora.lora_alpha, lora_dropout=lora.lora_dropout,
                                      target_modules="all-linear", bias="none", task_type="CAUSAL_LM")
        dataset = Dataset.from_list([{"prompt": chat(q), "answer": a} for q, a in problems])
        args = GRPOConfig(
            output_dir=workdir, use_cpu=True, bf16=False, fp16=False, report_to=[], logging_strategy="no",
            save_strategy="no", disable_tqdm=True, seed=seed, dataloader_num_workers=0,
            gradient_checkpointing=False,  # TRL's default is True; ours keeps activations
            max_steps=steps + 1, per_device_train_batch_size=len(problems) * group, gradient_accumulation_steps=1,
            num_generations=group, num_iterations=1, max_completion_length=max_new_tokens,
            temperature=1.0, top_k=0, top_p=1.0, beta=0.0, epsilon=0.2, loss_type="dapo", scale_rewards="group",
            learning_rate=1e-6, lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=1.0, weight_decay=0.0,
        )
        self.lengths: list[list[int]] = []  # completion lengths (EOS included) per generation batch
        self.rewards: list[float] = []

        def correct(completions, answer, completion_ids, **_):
            self.rollout_seconds.append(time.perf_counter() - self._start)
            self.lengths.append([len(ids) for ids in completion_ids])
            rewards = [score(c[-1]["content"], a) for c, a in zip(completions, answer)]
            self.rewards.append(sum(rewards) / len(rewards))
            return rewards

        bench = self

        class Interleave(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                bench.between(state.global_step)
                bench.threads.append(torch.get_num_threads())
                bench._start = time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):
                bench.seconds.append(time.perf_counter() - bench._start)

        self.seconds: list[float] = []
        self.rollout_seconds: list[float] = []
        self._start = time.perf_counter()
        self.threads: list[int] = []
        self.between = lambda step: None
        self.trainer = GRPOTrainer(model=model, reward_funcs=correct, args=args, train_dataset=dataset,
                                   processing_class=tokenizer, peft_config=peft_config, callbacks=[Interleave()])

    def train(self) -> None:
        self.trainer.train()


def bench_grpo(args: argparse.Namespace) -> dict:
    problems = arithmetic_problems(args.prompts)
    ours = Ours(problems, args.group, args.max_new_tokens)
    with tempfile.TemporaryDirectory() as workdir:
        trl = Trl(problems, args.group, args.max_new_tokens, args.steps, workdir, args.seed)
        torch.set_num_threads(args.threads)  # in case building the trainer changed it
        check_same_prompts(ours, trl, problems)
        rows: list[dict[str, float]] = []

        def our_step(step: int) -> None:  # before TRL's step `step`: step 0 is TRL's warm-up, ours ran before
            if step == 0:
                return
            start = time.perf_counter()
            out = ours.step()
            rows.append({"seconds": time.perf_counter() - start, **out, "threads": torch.get_num_threads()})
            print(f"step {step}: ours {rows[-1]['seconds']:.2f} s ({out['completion_tokens']:.1f} tokens)", flush=True)

        start = time.perf_counter()
        ours.step()  # warm-up
        print(f"warm-up: ours {time.perf_counter() - start:.2f} s", flush=True)
        trl.between = our_step
        trl.train()
    tl = [sum(x) / len(x) for x in trl.lengths]
    for step, seconds in enumerate(trl.seconds):
        print(f"step {step}: trl  {seconds:.2f} s ({tl[step]:.1f} tokens){'  (warm-up)' if step == 0 else ''}")
    result = {
        "ours": {"seconds": [r["seconds"] for r in rows], "rollout_seconds": [r["rollout_seconds"] for r in rows],
                 "completion_tokens": [r["completion_tokens"] for r in rows],
                 "reward": [r["reward"] for r in rows], "threads": [r["threads"] for r in rows]},
        "trl": {"seconds": trl.seconds[1:], "rollout_seconds": trl.rollout_seconds[1:], "completion_tokens": tl[1:],
                "reward": trl.rewards[1:], "threads": trl.threads[1:], "warmup_seconds": trl.seconds[0]},
    }
    ratios = [t / o for o, t in zip(result["ours"]["seconds"], result["trl"]["seconds"])]  # steps/s ours / TRL
    result["ratio_steps_per_s"] = ratios
    print(f"\n### One GRPO step: SmolLM2-135M-Instruct float32 CPU, LoRA r16, {args.prompts} prompts x {args.group} "
          f"completions, <= {args.max_new_tokens} new tokens, {args.threads} thread(s), {args.steps} timed steps\n")
    print("| side | s/step median | min | max | steps/s | rollout s median | update s median | "
          "mean completion tokens | mean reward |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in ("ours", "trl"):
        side = result[name]
        med = statistics.median(side["seconds"])
        rollout = statistics.median(side["rollout_seconds"])
        update = statistics.median([s - r for s, r in zip(side["seconds"], side["rollout_seconds"])])
        tokens, reward = statistics.mean(side["completion_tokens"]), statistics.mean(side["reward"])
        print(f"| {name} | {med:.2f} | {min(side['seconds']):.2f} | {max(side['seconds']):.2f} | {1 / med:.3f} | "
              f"{rollout:.2f} | {update:.2f} | {tokens:.1f} | {reward:.2f} |")
    print(f"\nsteps/s ours / TRL: median {statistics.median(ratios):.2f}x (min {min(ratios):.2f}x, "
          f"max {max(ratios):.2f}x), per interleaved pair")
    return result


def check_same_prompts(ours: Ours, trl: Trl, problems: list[tuple[str, int]]) -> None:
    """Both sides must feed the model the same prompt tokens (TRL renders through apply_chat_template itself)."""
    tok = trl.trainer.processing_class
    for question, _ in problems:
        theirs = tok.apply_chat_template(chat(question), add_generation_prompt=True, tokenize=True, return_dict=True)
        if list(theirs["input_ids"]) != ours.policy.chat.encode_prompt(chat(question)):
            raise AssertionError(f"prompt tokens differ between the sides for {question!r}")
    if set(trl.trainer.eos_token_ids) != set(ours.policy.chat.stop_ids):
        raise AssertionError(f"stop tokens differ: TRL {trl.trainer.eos_token_ids}, ours {ours.policy.chat.stop_ids}")


# --- part 2: sampling tokens/s -----------------------------------------------------------------


def generated(tokens: torch.Tensor, stops: tuple[int, ...]) -> int:
    """Tokens [B, L] generated by `model.generate` (after the prompt), counted up to and including each row's first
    stop token."""
    is_stop = torch.isin(tokens, torch.tensor(stops))
    first = torch.where(is_stop.any(1), is_stop.int().argmax(1) + 1, tokens.shape[1])
    return int(first.sum())


def bench_generate(args: argparse.Namespace) -> dict:
    policy = LMPolicy(LMPolicy.Config(model=MODEL, lora_rank=0, max_new_tokens=args.max_new_tokens)).eval()
    model, m = policy.model, args.max_new_tokens
    stops = policy.chat.stop_ids
    questions = [q for q, _ in arithmetic_problems(max(args.batches))]
    result: dict = {}
    for variant in args.lengths:
        fixed = variant == "fixed"
        for batch in args.batches:
            prompts = [policy.chat.encode_prompt(chat(q)) for q in questions[:batch]]
            width = max(map(len, prompts))
            ids = torch.full((batch, width), policy.pad_id, dtype=torch.long)
            attention = torch.zeros(batch, width, dtype=torch.long)
            for i, p in enumerate(prompts):  # left padding, as `sample` pads
                ids[i, width - len(p):] = torch.tensor(p)
                attention[i, width - len(p):] = 1

            def ours() -> int:
                if fixed:
                    from policies.lm.sampling import sample

                    gen = sample(model, prompts, m, 1.0, (NEVER,), policy.pad_id, policy.max_context)
                else:
                    gen = policy.generate(prompts)
                return sum(map(len, gen.tokens))

            def plain() -> int:
                with torch.inference_mode():
                    out = model.generate(input_ids=ids, attention_mask=attention, do_sample=True, temperature=1.0,
                                         top_k=0, top_p=1.0, max_new_tokens=m, min_new_tokens=m if fixed else 0,
                                         eos_token_id=list(stops), pad_token_id=policy.pad_id)
                return generated(out[:, width:], stops)

            rates: dict[str, list[float]] = {"ours": [], "plain": []}
            counts: dict[str, list[int]] = {"ours": [], "plain": []}
            ours(), plain()  # warm-up
            for _ in range(args.repeats):
                for name, run in (("ours", ours), ("plain", plain)):
                    start = time.perf_counter()
                    n = run()
                    rates[name].append(n / (time.perf_counter() - start))
                    counts[name].append(n)
            ratios = [o / p for o, p in zip(rates["ours"], rates["plain"])]
            result[f"{variant}/{batch}"] = {"tokens_per_s": rates, "tokens": counts, "ratio": ratios}
            print(f"{variant} batch {batch}: ours {statistics.median(rates['ours']):.1f} tok/s, plain "
                  f"{statistics.median(rates['plain']):.1f} tok/s", flush=True)
    print(f"\n### Sampling tokens/s: SmolLM2-135M-Instruct float32 CPU (no LoRA), <= {m} new tokens, temperature 1.0, "
          f"{args.threads} thread(s), median of {args.repeats} interleaved repeats\n")
    print("| variant | batch | ours tok/s (min-max) | plain generate tok/s (min-max) | ours / plain | "
          "tokens per row ours / plain |")
    print("|---|---|---|---|---|---|")
    for name, row in result.items():
        variant, batch = name.split("/")
        o, p = row["tokens_per_s"]["ours"], row["tokens_per_s"]["plain"]
        per_row = [statistics.mean(row["tokens"][s]) / int(batch) for s in ("ours", "plain")]
        print(f"| {variant} | {batch} | {statistics.median(o):.1f} ({min(o):.1f}-{max(o):.1f}) | "
              f"{statistics.median(p):.1f} ({min(p):.1f}-{max(p):.1f}) | {statistics.median(row['ratio']):.2f}x | "
              f"{per_row[0]:.1f} / {per_row[1]:.1f} |")
    return result


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", choices=("grpo", "generate"), help="run one part only (default: both)")
    p.add_argument("--steps", type=int, default=5, help="timed GRPO steps per side, after one warm-up step each")
    p.add_argument("--prompts", type=int, default=4, help="questions per GRPO step")
    p.add_argument("--group", type=int, default=8, help="completions per question (GRPO group size G)")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64], help="sampling batch sizes")
    p.add_argument("--lengths", nargs="+", choices=("eos", "fixed"), default=["eos", "fixed"],
                   help="sampling variants: stop at EOS, or exactly --max-new-tokens per row")
    p.add_argument("--repeats", type=int, default=5, help="timed sampling repeats per side and batch size")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, help="write every timing as JSON here")
    args = p.parse_args(argv)
    if args.group < 2 or args.steps < 1 or args.prompts < 1 or args.repeats < 1:
        p.error("--group must be >= 2; --steps, --prompts and --repeats >= 1")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    warnings.filterwarnings("ignore", category=FutureWarning)
    results: dict = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                     "torch": torch.__version__}
    if args.only in (None, "grpo"):
        import trl

        results["trl"] = trl.__version__
        results["grpo"] = bench_grpo(args)
    if args.only in (None, "generate"):
        results["generate"] = bench_generate(args)
    results["max_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux: KiB
    print(f"\npeak resident memory {results['max_rss_gib']:.1f} GiB")
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1))
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
