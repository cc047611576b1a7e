"""A causal language model as a Policy: token-in/token-out generation for rollouts, per-token
log-probs for PPO/GRPO, LoRA (peft) or full fine-tuning.

    policy = LMPolicy(LMPolicy.Config(model="smollm2-135m-instruct"))
    ids = policy.chat.encode_prompt(messages)                 # policies/lm/chat.py
    gen = policy.generate([ids, ...])                         # gen.tokens[i], gen.log_probs[i] (float32)
    ids += gen.tokens[0] + policy.chat.encode_followup(env_messages)   # ... the next turn
    log_prob, entropy, value = policy.evaluate(obs, obs["tokens"])     # teacher-forced: [B, T], [B, T], [B]
    policy.save_adapter(path); policy.load_adapter(path)      # safetensors + the config as JSON

Training batches (right padded, leading dim B = one trajectory each):
    obs["tokens"]     int64 [B, T]  prompt + replies + env messages, exactly the ids generated and encoded
    obs["attention"]  bool  [B, T]  True on real tokens
    action            int64 [B, T]  the same tokens (the sequence is the action; which of its tokens the model
                                    chose is the algorithm's response mask, keys.MASK)

`evaluate` returns log_prob [B, T] (token t given tokens before it, at the sampling
temperature, so the PPO ratio is exactly 1 on-policy; 0 at t=0 and on padding), entropy
[B, T] of the same distributions, and value zeros [B] (critic-free: GRPO/RLOO). With
`value_head=True` a linear head on the last hidden state gives a value per token [B, T]
instead (PPO with a token-level critic, as veRL's critic and TRL's PPO value head: the
value at position t estimates the return after token t), 0 on padding.

`act` is not implemented: a reply is a variable-length token sequence produced inside a
multi-turn rollout, which calls `generate` on token lists (token-in/token-out) rather
than acting on a fixed-width observation batch.

Shared prompts (`share_prefix`, on by default): in a scored `evaluate` (`extras["score"]`), rows whose prompts are
equal (a GRPO group: the tokens before each row's first scored token) run their common leading tokens once, as one
row of a prefix batch with gradient, and only the rest of each row against that prefix's keys and values (indexed
out to the group's rows, so the gradient of every row flows back into the one prefix). The same computation as
running every row whole, up to float rounding; it falls back to that when no two rows share a prompt.

Dropout: generation always runs in eval mode; `evaluate` runs in the module's mode. With
lora_dropout > 0 a training-mode `evaluate` differs from the sampled log-probs, so the
default is 0.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import asdict, dataclass
from os.path import commonprefix
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from tensordict import TensorDict

from embodied import keys
from embodied.config import check
from embodied.policy import ActOutput, Policy
from policies.lm.chat import ChatEncoder
from policies.lm.load import MODELS, TINY, causal_lm, load_lm
from policies.lm.sampling import Generation, positions, sample

TOKENS, ATTENTION = keys.TOKENS, keys.ATTENTION  # obs entries of a token trajectory
CONFIG_FILE = "lm_config.json"
VALUE_HEAD_FILE = "value_head.safetensors"


@dataclass(frozen=True)
class LMConfig:
    model: str = "smollm2-135m-instruct"  # a name in policies.lm.load.MODELS, "tiny" (random test Llama) or a directory
    tokenizer: str = ""  # a model name or directory whose tokenizer replaces the model's own ("" = its own)
    # weights and activations; log-probs are float32 either way, but only float32 reproduces the sampled ones to 1e-5
    dtype: Literal["float32", "bfloat16"] = "float32"
    # LoRA (Hu et al. 2021) through peft; 0 = full fine-tuning. 16 / 32: TRL's ModelConfig defaults (lora_r, lora_alpha)
    lora_rank: int = 16
    lora_alpha: float = 32.0  # LoRA scale is alpha / rank (TRL ModelConfig lora_alpha=32)
    # TRL ModelConfig's default is 0.05; 0 here so that evaluate in training mode reproduces the sampled log-probs
    lora_dropout: float = 0.0
    # peft's "all-linear": every linear layer but the output head. LoRA on all layers, MLPs included, matches full
    # fine-tuning where attention-only LoRA falls short (QLoRA, Dettmers et al. 2023, Sec. 4; Schulman et al. 2025,
    # "LoRA Without Regret", also for RL)
    lora_targets: tuple[str, ...] = ("all-linear",)
    max_new_tokens: int = 256  # tokens per reply before it is cut (truncated)
    temperature: float = 1.0  # sampling temperature, and that of every log-prob (veRL's rollout default 1.0)
    max_context: int = 0  # longest trajectory in tokens; 0 = the model's max_position_embeddings
    seed: int = 0  # initialisation of the "tiny" model
    value_head: bool = False  # a per-token value head [B, T] on the last hidden state (PPO); False: value zeros [B]
    # a scored evaluate runs a prompt shared by several rows (a GRPO group) once, not once per row (module docstring):
    # the same log-probs and gradients up to float rounding, and ~1.9x fewer tokens through the decoder for 8 replies
    # of <= 32 tokens to a 44-token prompt (benchmarks/bench_lm.py). With lora_dropout > 0 they share one dropout mask
    share_prefix: bool = True

    def __post_init__(self):
        check(self.lora_rank >= 0, f"lora_rank={self.lora_rank} must be >= 0 (0 = full fine-tuning)")
        check(self.lora_alpha > 0, f"lora_alpha={self.lora_alpha} must be > 0")
        check(0 <= self.lora_dropout < 1, f"lora_dropout={self.lora_dropout} must be in [0, 1)")
        check(len(self.lora_targets) > 0, "lora_targets must name at least one module (or 'all-linear')")
        check(self.max_new_tokens > 0, f"max_new_tokens={self.max_new_tokens} must be > 0")
        check(self.temperature > 0, f"temperature={self.temperature} must be > 0 (greedy: deterministic=True)")
        check(self.max_context >= 0, f"max_context={self.max_context} must be >= 0 (0 = the model's limit)")
        check(bool(self.model), f"model must be one of {', '.join([*MODELS, TINY])} or a directory")


class LMPolicy(Policy):
    Config = LMConfig

    def __init__(self, config: LMConfig = LMConfig(), observation_spec: Any = None, action_spec: Any = None):
        """`observation_spec` / `action_spec` are accepted for the builder and unused: text has no fixed shape."""
        super().__init__()
        self.config = config
        model, self.tokenizer = load_lm(config.model, getattr(torch, config.dtype), config.tokenizer, config.seed)
        eos = model.generation_config.eos_token_id if model.generation_config is not None else None
        self.chat = ChatEncoder(self.tokenizer, [eos] if isinstance(eos, int) else list(eos or []))
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.chat.stop_ids[0]
        self.max_context = config.max_context or model.config.max_position_embeddings
        if config.lora_rank > 0:
            import peft

            targets = config.lora_targets
            lora = peft.LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                                   target_modules="all-linear" if targets == ("all-linear",) else list(targets),
                                   bias="none", task_type="CAUSAL_LM")
            with warnings.catch_warnings():  # peft 0.21 calls transformers' deprecated is_gradient_checkpointing
                warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
                model = peft.get_peft_model(model, lora)
        self.model = model
        self.value_head = None
        if config.value_head:  # zero init: the critic starts at 0, as the critic-free policy's values
            self.value_head = torch.nn.Linear(model.config.hidden_size, 1, dtype=getattr(torch, config.dtype))
            torch.nn.init.zeros_(self.value_head.weight)
            torch.nn.init.zeros_(self.value_head.bias)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # ---- rollouts
    def generate(self, prompts: list[list[int]], max_new_tokens: int | None = None, temperature: float | None = None,
                 deterministic: bool = False, generator: torch.Generator | None = None) -> Generation:
        """One reply per prompt (token ids); see policies/lm/sampling.py. Defaults come from the config."""
        was_training = self.training
        self.eval()
        try:
            return sample(self.model, prompts,
                          self.config.max_new_tokens if max_new_tokens is None else max_new_tokens,
                          self.config.temperature if temperature is None else temperature,
                          self.chat.stop_ids, self.pad_id, self.max_context, deterministic, generator)
        finally:
            self.train(was_training)

    def sampler(self):
        """A rollout worker: a separate copy of this policy's model for generation (policies/lm/rollout.py)."""
        from policies.lm.rollout import LMSampler

        return LMSampler(self)

    def act(self, obs: TensorDict, deterministic: bool = False) -> ActOutput:
        raise NotImplementedError("LMPolicy replies with variable-length token lists inside a multi-turn rollout: "
                                  "call policy.generate(prompts) with token ids (policy.chat encodes messages)")

    # ---- training
    def forward(self, obs: TensorDict) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Float32 logits [B, T, V] of the next token at each position, divided by the temperature, and the value
        head's values [B, T] (None without one)."""
        tokens, attention = obs[TOKENS], obs[ATTENTION]
        out = self.model(input_ids=tokens, attention_mask=attention.long(), position_ids=positions(attention),
                         use_cache=False, output_hidden_states=self.value_head is not None)
        values = None
        if self.value_head is not None:
            values = self._values(out.hidden_states[-1], attention)
        return out.logits.float() / self.config.temperature, values

    def evaluate(self, obs: TensorDict, action: torch.Tensor, extras: dict[str, Any] | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log_prob [B, T], entropy [B, T], value) of the token trajectories `action` (= obs["tokens"]); value: zeros
        [B], or [B, T] with the value head. With `extras["score"]` (bool [B, T], the rollout's response mask) only
        those tokens are scored (0 elsewhere): the output head then runs on the model's tokens alone, not on every
        prompt and env token (a [B, T, vocabulary] tensor: 2.5 GB for 32 SmolLM2 turns of 400 tokens)."""
        score = None if extras is None else extras.get("score", None)
        if score is not None:
            return self._score(obs, action, score)
        logits, values = self(obs)
        logp = torch.log_softmax(logits[:, :-1], dim=-1)  # position t-1 predicts token t
        valid = obs[ATTENTION][:, 1:]
        chosen = logp.gather(-1, torch.where(valid, action[:, 1:], 0)[..., None]).squeeze(-1)  # any padding id
        entropy = -(logp.exp() * logp).sum(-1)
        zero = logp.new_zeros(action.shape[0], 1)
        log_prob = torch.cat([zero, torch.where(valid, chosen, 0.0)], dim=1)
        entropy = torch.cat([zero, torch.where(valid, entropy, 0.0)], dim=1)
        return log_prob, entropy, logp.new_zeros(action.shape[0]) if values is None else values

    def _hidden(self, obs: TensorDict, score: torch.Tensor | None = None) -> torch.Tensor:
        """The decoder's last hidden state [B, T, H] (LoRA applied), without the output head; with `score` (the
        scored tokens, bool [B, T]) and `share_prefix`, rows of one prompt run their common tokens once."""
        attention = obs[ATTENTION]
        if score is not None and self.config.share_prefix:
            plan = shared_prefixes(obs[TOKENS], attention, score)
            if plan is not None:
                return self._hidden_shared(obs, *plan)
        return causal_lm(self.model).get_decoder()(input_ids=obs[TOKENS], attention_mask=attention.long(),
                                            position_ids=positions(attention), use_cache=False).last_hidden_state

    def _hidden_shared(self, obs: TensorDict, leaders: list[int], source: list[int], shared: list[int],
                       start: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
        """`_hidden` as two passes (see `shared_prefixes` for the plan): the prefixes [C, P] (right padded, one row
        per prompt, with gradient), then every row's own tokens [B, S] after its prefix's keys and values."""
        tokens = obs[TOKENS]
        device, last = tokens.device, tokens.shape[1] - 1
        decoder = causal_lm(self.model).get_decoder()
        lead, source = torch.tensor(leaders, device=device), torch.tensor(source, device=device)
        shared = torch.tensor(shared, device=device)
        width, own = int(shared.max()), length - shared  # own: the row's tokens after its prefix (>= 1)
        steps = int(own.max())

        def take(rows, first, n):  # n tokens of `rows` from column `first` on (padding past the end: masked)
            return tokens[rows].gather(1, (first[:, None] + torch.arange(n, device=device)).clamp(max=last))

        col = torch.arange(width, device=device)
        prefix_mask = col < shared[lead, None]
        prefix = decoder(input_ids=take(lead, start[lead], width), attention_mask=prefix_mask.long(),
                         position_ids=col.expand(len(leaders), -1), use_cache=True)
        cache = prefix.past_key_values
        cache.batch_select_indices(source)  # each row its prefix's keys and values: an index, gradients flow back
        step = torch.arange(steps, device=device)
        own_mask = step < own[:, None]
        mask = torch.cat([prefix_mask[source] & (shared[:, None] > 0), own_mask], 1)  # shared 0: no prefix
        rest = decoder(input_ids=take(torch.arange(len(source), device=device), start + shared, steps),
                       attention_mask=mask.long(), position_ids=shared[:, None] + step, past_key_values=cache,
                       use_cache=True).last_hidden_state
        hidden = torch.cat([prefix.last_hidden_state[source], rest], 1)  # [B, width + steps, H]
        # column c of row r is its real token c - start; from the prefix before `shared`, after it from `rest`
        real = torch.arange(tokens.shape[1], device=device) - start[:, None]
        index = torch.where(real < shared[:, None], real, width + real - shared[:, None])
        index = index.clamp(0, width + steps - 1)  # padding columns: any row, masked by the callers
        return hidden.gather(1, index[..., None].expand(-1, -1, hidden.shape[-1]))

    def _values(self, hidden: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
        return torch.where(attention, self.value_head(hidden).squeeze(-1).float(), 0.0)

    def _score(self, obs: TensorDict, action: torch.Tensor, score: torch.Tensor):
        attention = obs[ATTENTION]
        causal = causal_lm(self.model)
        hidden = self._hidden(obs, score)
        where = (score & attention)[:, 1:].nonzero(as_tuple=True)  # (row, t - 1): the position predicting token t
        logits = causal.get_output_embeddings()(hidden[where]).float() / self.config.temperature  # [N, V]
        logp = torch.log_softmax(logits, dim=-1)
        chosen = logp.gather(-1, action[:, 1:][where][:, None]).squeeze(-1)
        log_prob = logp.new_zeros(action.shape)
        entropy = logp.new_zeros(action.shape)
        log_prob[where[0], where[1] + 1] = chosen
        entropy[where[0], where[1] + 1] = -(logp.exp() * logp).sum(-1)
        value = logp.new_zeros(action.shape[0]) if self.value_head is None else self._values(hidden, attention)
        return log_prob, entropy, value

    @property
    def critic(self) -> torch.nn.Module | None:
        """The value head, for PPO's own critic step size (algo.critic_lr); None without one."""
        return self.value_head

    def value(self, obs: TensorDict) -> torch.Tensor:
        """Zeros [B], or the value head's [B, T]."""
        if self.value_head is None:
            return torch.zeros(obs.batch_size[0], device=self.device)
        return self._values(self._hidden(obs), obs[ATTENTION])

    def bc_loss(self, batch: TensorDict) -> torch.Tensor:
        """Supervised fine-tuning: mean token cross-entropy (temperature 1) over batch[keys.MASK] [B, T] (the tokens
        to imitate, e.g. the assistant's), or over every real token after the first when there is no mask."""
        obs = batch[keys.OBS]
        tokens = obs[TOKENS]
        logits = self(obs)[0][:, :-1] * self.config.temperature
        mask = batch.get(keys.MASK, obs[ATTENTION])[:, 1:] & obs[ATTENTION][:, 1:]
        nll = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten(), reduction="none").view_as(mask)
        return (nll * mask).sum() / mask.sum().clamp(min=1)

    # ---- weights
    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.parameters() if p.requires_grad]

    def state_dict(self, *args, **kwargs) -> dict[str, Any]:
        """What a run's checkpoints hold: with LoRA only the trained tensors (adapters, value head; ~2 MB for
        SmolLM2-135M at rank 16 instead of 517 MB), the frozen base weights coming from `config.model`; with
        full fine-tuning everything."""
        state = super().state_dict(*args, **kwargs)
        if self.config.lora_rank == 0:
            return state
        prefix = kwargs.get("prefix", "")
        trained = {prefix + name for name, p in self.named_parameters() if p.requires_grad}
        return type(state)((k, v) for k, v in state.items() if k in trained)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Loads what `state_dict` returns: with LoRA, every trained tensor must be there (the base stays as loaded
        from `config.model`); a tensor this policy does not have is an error either way."""
        if self.config.lora_rank == 0:
            return super().load_state_dict(state_dict, strict, assign)
        result = super().load_state_dict(state_dict, strict=False, assign=assign)
        trained = {name for name, p in self.named_parameters() if p.requires_grad}
        missing = sorted(trained & set(result.missing_keys))
        if strict and (missing or result.unexpected_keys):
            raise RuntimeError(f"LMPolicy.load_state_dict: missing trained tensors {missing[:5]}, unexpected "
                               f"{list(result.unexpected_keys)[:5]} (a checkpoint of another model or LoRA setting?)")
        return result

    def save_adapter(self, path: str | Path) -> Path:
        """The trained weights as safetensors (LoRA: peft's adapter_model.safetensors + adapter_config.json; full
        fine-tuning: the whole model and tokenizer; the value head, if any), with the config as lm_config.json."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(path)
        if self.config.lora_rank == 0:
            self.tokenizer.save_pretrained(path)
        if self.value_head is not None:
            from safetensors.torch import save_file

            save_file(self.value_head.state_dict(), path / VALUE_HEAD_FILE)
        (path / CONFIG_FILE).write_text(json.dumps(asdict(self.config), indent=1))
        return path

    def load_adapter(self, path: str | Path) -> None:
        """Load weights written by `save_adapter` into this policy in place (an optimizer's parameters stay valid)."""
        from safetensors.torch import load_file

        path = Path(path)
        file = path / ("adapter_model.safetensors" if self.config.lora_rank else "model.safetensors")
        if not file.is_file():
            kind = "a LoRA adapter" if self.config.lora_rank else "full model weights"
            raise FileNotFoundError(f"{path}: no {file.name}; this policy (lora_rank={self.config.lora_rank}) "
                                    f"loads {kind} written by save_adapter")
        state = load_file(file, device=str(self.device))
        if self.config.lora_rank:
            import peft

            result = peft.set_peft_model_state_dict(self.model, state)
            problems = list(result.unexpected_keys) + [k for k in result.missing_keys if "lora_" in k]
        else:
            result = self.model.load_state_dict(state, strict=False)
            tied = {"lm_head.weight"} if self.model.config.tie_word_embeddings else set()
            problems = list(result.unexpected_keys) + [k for k in result.missing_keys if k not in tied]
        if problems:
            raise ValueError(f"{file} does not match this policy's model: {problems[:5]}")
        if self.value_head is not None:
            if not (path / VALUE_HEAD_FILE).is_file():
                raise FileNotFoundError(f"{path}: no {VALUE_HEAD_FILE}, and this policy has a value head")
            self.value_head.load_state_dict(load_file(path / VALUE_HEAD_FILE, device=str(self.device)))


def shared_prefixes(tokens: torch.Tensor, attention: torch.Tensor, score: torch.Tensor):
    """How `LMPolicy._hidden_shared` splits a batch: rows whose prompts are equal (their real tokens before the first
    scored one; left or right padding) share their common leading tokens, all but each row's last at most. Returns
    (leaders: the first row of each sharing prompt, source: per row the index of its prompt in `leaders`,
    shared: per row the number of leading tokens it takes from there (0: none, the row runs whole), start: int64
    [B] column of each row's first real token, length: int64 [B] real tokens per row), or None when sharing
    saves no tokens or a row's real tokens are not one contiguous run."""
    start, length = attention.long().argmax(1), attention.sum(1)
    col = torch.arange(attention.shape[1], device=attention.device)
    if not (attention == ((col >= start[:, None]) & (col < (start + length)[:, None]))).all() or (length == 0).any():
        return None
    scored = (score & attention).gather(1, (start[:, None] + col).clamp(max=attention.shape[1] - 1))
    prompt = torch.where(scored.any(1), scored.long().argmax(1), length)
    rows = [t[s:s + n] for t, s, n in zip(tokens.tolist(), start.tolist(), length.tolist())]
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, (row, p) in enumerate(zip(rows, prompt.tolist())):
        groups.setdefault(tuple(row[:p]), []).append(i)
    leaders, source, shared = [], [0] * len(rows), [0] * len(rows)
    for members in groups.values():
        # commonprefix compares lists element-wise; every row keeps at least its last token to run on its own
        n = min(len(commonprefix([rows[i] for i in members])), min(len(rows[i]) for i in members) - 1)
        if len(members) > 1 and n > 0:
            for i in members:
                source[i], shared[i] = len(leaders), n
            leaders.append(members[0])
    if not leaders:
        return None
    lengths = length.tolist()
    cost = len(leaders) * max(shared) + len(rows) * max(n - s for n, s in zip(lengths, shared))
    return (leaders, source, shared, start, length) if cost < len(rows) * max(lengths) else None
