"""The rollout side of a language agent: a sampler holding its own copy of the model, apart from the learner.

    sampler = LMSampler(policy)          # a plain copy of the policy's causal LM, LoRA merged into its weights
    sampler.sync(policy, version=3)      # after an update: the learner's weights in, and which version they are
    gen = sampler.generate(prompts)      # as LMPolicy.generate, from the copy (policies/lm/sampling.py)
    sampler.version                      # the learner version the copy holds; collect_text stamps it on every episode

Rollout and learner meet only at `sync`: the shape distributed RL needs (RLinf's and veRL's rollout workers hold
their own weights and receive the learner's after each update), so a worker process can take the sampler as it
is and receive the same tensors. On one machine the copy pays for itself: generation runs one forward per token
at small batch, where peft's LoRA branch on every linear layer (two extra matmuls and an add) makes a step
1.01-1.26x slower (batch 32, 32 tokens, SmolLM2-135M, 1 thread, 2026-11-25); the copy carries W + (alpha / r) B A
in one matrix.

The merge rounds differently from the learner's unmerged forward: sampled log-probs and the learner's
recomputation differ by float32 rounding (tested within 1e-5 on the tiny model; the PPO ratio starts at 1 up to
that rounding, as with any separate rollout engine).
"""

from __future__ import annotations

import copy

import torch

from policies.lm.load import causal_lm
from policies.lm.sampling import Generation, sample


def merged_weights(policy) -> dict[str, torch.Tensor]:
    """The learner's weights that can change, by the plain model's parameter names: every LoRA-wrapped linear
    layer's W + delta (peft's own `get_delta_weight`), and every other trainable parameter of the causal LM (all
    of them under full fine-tuning)."""
    return {name: weight() for name, weight in _changing(policy)}


def _changing(policy):
    """(plain name, a function computing its current weight) for each weight `merged_weights` returns."""
    model = causal_lm(policy.model)
    for name, module in model.named_modules():
        if hasattr(module, "get_delta_weight") and hasattr(module, "base_layer"):  # a peft LoRA layer
            for adapter in module.active_adapters:
                yield f"{name}.weight", lambda m=module, a=adapter: m.base_layer.weight + m.get_delta_weight(a)
    for name, param in model.named_parameters():
        if param.requires_grad and "lora_" not in name:
            yield name.replace(".base_layer", ""), lambda p=param: p


class LMSampler(torch.nn.Module):
    """Generates with a copy of `policy`'s model; `sync(policy)` refreshes it. Offers what a rollout needs of a
    policy (embodied/text_rollout.py run_episodes): chat, tokenizer, pad_id, max_context, generate."""

    def __init__(self, policy):
        super().__init__()
        self.config, self.chat, self.tokenizer = policy.config, policy.chat, policy.tokenizer
        self.pad_id, self.max_context = policy.pad_id, policy.max_context
        model = copy.deepcopy(policy.model)
        self.model = (model.merge_and_unload() if hasattr(model, "merge_and_unload") else model)
        self.eval().requires_grad_(False)
        self.version = 0
        self._params = dict(self.model.named_parameters())
        missing = sorted({name for name, _ in _changing(policy)} - set(self._params))
        if missing:
            raise ValueError(f"the sampler's copy has no parameters {missing[:3]}: cannot sync from this model")

    def train(self, mode: bool = True) -> LMSampler:
        """Always in eval mode: the copy only generates."""
        return super().train(False)

    @torch.no_grad()
    def sync(self, policy, version: int) -> None:
        """Copy the learner's current weights in (merged LoRA, trainable parameters); `version`: the learner's
        update count they carry."""
        for name, value in merged_weights(policy).items():
            self._params[name].copy_(value)
        self.version = int(version)

    def generate(self, prompts: list[list[int]], deterministic: bool = False,
                 generator: torch.Generator | None = None) -> Generation:
        cfg = self.config
        return sample(self.model, prompts, cfg.max_new_tokens, cfg.temperature, self.chat.stop_ids, self.pad_id,
                      self.max_context, deterministic, generator)
