"""Batched sampling from a causal LM with a KV cache, keeping the log-prob of every sampled token.

    gen = sample(model, prompts, max_new_tokens=64, temperature=1.0, stop_ids=(2,), pad_id=0, max_context=2048)
    gen.tokens[i]      list[int]   row i's tokens, up to and including its stop token
    gen.log_probs[i]   float32 [len(gen.tokens[i])]  log softmax(logits / temperature) of each sampled token

The loop is written on the model's forward rather than `model.generate`, whose scores
are processed (temperature, top-k/p warpers) in ways that are hard to match exactly in a
teacher-forced pass: here a log-prob is exactly what `LMPolicy.evaluate` recomputes.
One forward per generated token: the prompts run once (left padded, with position ids
counting real tokens only, so a row's positions do not depend on its padding), then each
step feeds the last token with the cache. Every row stops at its own stop token; a
finished row feeds padding until all rows are done.

Limits: a row may generate `min(max_new_tokens, max_context - len(prompt))` tokens and is
marked `truncated` when it hits that without a stop token. A prompt that already fills the
context window generates nothing and is marked `overflow` (and `truncated`): the
caller ends the episode as truncated instead of failing the whole batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch


class Generation(NamedTuple):
    tokens: list[list[int]]  # per row: sampled ids, up to and including the stop token
    log_probs: list[torch.Tensor]  # per row: float32 [len(tokens[i])], at the sampling temperature
    finished: torch.Tensor  # bool [B]: the row ended at a stop token
    truncated: torch.Tensor  # bool [B]: cut at max_new_tokens or the context window without a stop token
    overflow: torch.Tensor  # bool [B]: the prompt alone filled the context window, nothing was generated


def positions(attention: torch.Tensor) -> torch.Tensor:
    """Position ids [B, T] counting real tokens only (0 at a row's first real token), for left or right padding."""
    return (attention.long().cumsum(-1) - 1).clamp(min=0)


@torch.inference_mode()
def sample(model, prompts: Sequence[Sequence[int]], max_new_tokens: int, temperature: float,
           stop_ids: Sequence[int], pad_id: int, max_context: int, deterministic: bool = False,
           generator: torch.Generator | None = None) -> Generation:
    """Sample a reply to each prompt (see the module docstring); greedy when `deterministic` (the log-probs are
    still those of the tempered distribution). `generator` lives on the model's device."""
    if temperature <= 0:
        raise ValueError(f"temperature={temperature} must be > 0 (use deterministic=True for greedy decoding)")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 1")
    if not prompts:
        return Generation([], [], *torch.zeros(3, 0, dtype=torch.bool))
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    vocab = model.get_input_embeddings().num_embeddings
    if max(map(max, prompts)) >= vocab or min(map(min, prompts)) < 0:
        raise ValueError(f"a prompt holds a token id outside the model's vocabulary [0, {vocab}): prompts must be "
                         "encoded by this policy's tokenizer")
    device = next(model.parameters()).device
    n = len(prompts)
    lengths = torch.tensor([len(p) for p in prompts])
    budget = (max_context - lengths).clamp(min=0, max=max_new_tokens)
    overflow = budget == 0
    tokens: list[list[int]] = [[] for _ in range(n)]
    log_probs = [torch.zeros(0) for _ in range(n)]
    finished = torch.zeros(n, dtype=torch.bool)
    active = (budget > 0).nonzero().flatten().tolist()
    if active:
        gen, lp, count, stopped = _decode(model, [prompts[i] for i in active], budget[active].to(device),
                                          temperature, stop_ids, pad_id, deterministic, generator, device)
        for j, i in enumerate(active):
            tokens[i] = gen[j, : count[j]].tolist()
            log_probs[i] = lp[j, : count[j]].clone()
        finished[active] = stopped
    return Generation(tokens, log_probs, finished, ~finished, overflow)


def _decode(model, prompts, budget, temperature, stop_ids, pad_id, deterministic, generator, device):
    n, width, steps = len(prompts), max(len(p) for p in prompts), int(budget.max())
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.zeros(n, width + steps, dtype=torch.long)
    for i, p in enumerate(prompts):  # left padding: every row's next token goes in the same column
        ids[i, width - len(p):] = torch.as_tensor(p)
        attention[i, width - len(p): width] = 1
    ids, attention = ids.to(device), attention.to(device)
    attention[:, width:] = 1  # generated columns; a finished row's padding is never read back
    stops = torch.as_tensor(list(stop_ids), device=device)
    out_tokens = torch.full((n, steps), pad_id, dtype=torch.long, device=device)
    out_lp = torch.zeros(n, steps, dtype=torch.float32, device=device)
    count = torch.zeros(n, dtype=torch.long, device=device)
    stopped = torch.zeros(n, dtype=torch.bool, device=device)
    done = torch.zeros(n, dtype=torch.bool, device=device)
    position = positions(attention[:, :width])
    next_position = position[:, -1:] + 1
    out = model(input_ids=ids, attention_mask=attention[:, :width], position_ids=position, use_cache=True,
                logits_to_keep=1)
    for step in range(steps):
        logp = torch.log_softmax(out.logits[:, -1].float() / temperature, dim=-1)
        if deterministic:
            token = logp.argmax(-1)
        else:
            token = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
        out_lp[:, step] = logp.gather(-1, token[:, None]).squeeze(-1)
        token = torch.where(done, pad_id, token)
        out_tokens[:, step] = token
        count += ~done
        stopped |= ~done & torch.isin(token, stops)
        done |= stopped | (count >= budget)
        if step == steps - 1 or bool(done.all()):  # the one host sync per token
            break
        out = model(input_ids=token[:, None], attention_mask=attention[:, : width + step + 1],
                    position_ids=next_position, past_key_values=out.past_key_values, use_cache=True)
        next_position = next_position + 1
    return out_tokens.cpu(), out_lp.cpu(), count.cpu(), stopped.cpu()
