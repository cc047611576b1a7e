"""Multi-turn rollouts of a language-model policy in a text env, token-in/token-out.

    batch = collect_text(env, policy, seeds)          # one episode per seed; equal seeds form a GRPO group
    result = evaluate_text(policy, env, seeds)        # greedy (or sampled) replies: success and its 95% interval

Each episode is one token sequence, built as it happens and never re-rendered from text (veRL's agent
loop; re-templating changes tokens and breaks the PPO ratio): the opening messages encoded once, then
each reply's tokens exactly as sampled (ending at the model's end-of-turn token), then the env's next
messages encoded once (`encode_followup`: the template's glue, the messages, the generation prompt),
and so on until the env ends the episode. The batch ([B] = one episode each) holds:
    obs/tokens      int64 [B, T]  the sequence, right padded; obs/attention bool [B, T] True on its tokens
    action          int64 [B, T]  the same tokens: what `policy.evaluate` scores (log-prob of token t given < t)
    mask            bool [B, T]   True on the model's tokens (response mask), False on prompt/env/tool tokens
    log_prob        float32 [B, T] log-probs at sampling time (0 off the mask)
    extras/score    bool [B, T]   the mask again, for `policy.evaluate`: only these tokens need scoring
    reward          float32 [B]   the episode's return (sum of the env's per-turn rewards)
    success, truncated bool [B];  turns int64 [B];  group int64 [B] (episodes sharing a seed)
    policy_version int64 [B]      the sampling weights' version (a rollout worker's `version`; 0 for a policy)
An episode whose next prompt would not leave room for a reply in the policy's context window (`max_context`)
ends truncated there, without the env's last messages (the rollout does not crash; its return so far stands).

The policy side (policies/lm/policy.py, LMPolicy) provides `chat.encode_prompt(messages)`,
`chat.encode_followup(messages)`, `generate(prompts, deterministic=...)` (tokens, log_probs and overflow
per row), `tokenizer.decode`, `pad_id` and `max_context`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from tensordict import TensorDict

from embodied import keys
from embodied.keys import ATTENTION, TOKENS
from embodied.rollout import pop_means
from embodied.text_env import TRAIN_SEEDS, TextEnv, instance_seed


@torch.no_grad()
def run_episodes(env: TextEnv, policy, seeds: Sequence[int], deterministic: bool = False) -> dict:
    """Play one episode per seed to its end; per-episode token lists, response masks, log-probs and outcomes."""
    opening = env.reset(seeds)
    n = len(seeds)
    tokens = [list(policy.chat.encode_prompt(m)) for m in opening]
    mask = [[False] * len(t) for t in tokens]
    log_prob = [[0.0] * len(t) for t in tokens]
    ret = torch.zeros(n)
    cut = torch.zeros(n, dtype=torch.bool)  # ended by the context window, not by the env
    timed_out = torch.zeros(n, dtype=torch.bool)  # truncated by the env's turn limit
    while True:
        live = [i for i in range(n) if not env.done[i] and not cut[i]]
        if not live:
            break
        gen = policy.generate([tokens[i] for i in live], deterministic=deterministic)
        replies: list[str | None] = [None] * n  # None: no step (finished, or cut by the context window)
        for j, i in enumerate(live):
            if gen.overflow[j]:
                cut[i] = True
                continue
            tokens[i] += gen.tokens[j]
            mask[i] += [True] * len(gen.tokens[j])
            log_prob[i] += gen.log_probs[j].tolist()
            if gen.truncated[j] and len(tokens[i]) < policy.max_context:  # cut short: close the turn as the
                # template would (the env's messages then follow as they would after a finished reply), not as a
                # token the model chose
                tokens[i].append(policy.chat.end_of_turn)
                mask[i].append(False)
                log_prob[i].append(0.0)
            replies[i] = policy.tokenizer.decode(gen.tokens[j], skip_special_tokens=True)
        stepped = [i for i in live if not cut[i]]
        if not stepped:
            continue
        messages, reward, terminated, truncated, info = env.step(replies)
        ret += reward
        timed_out |= truncated & ~cut
        for i in stepped:
            if not env.done[i]:
                follow = policy.chat.encode_followup(messages[i])
                if len(tokens[i]) + len(follow) >= policy.max_context:  # no room left to reply: ends truncated
                    cut[i] = True
                    continue
                tokens[i] += follow
                mask[i] += [False] * len(follow)
                log_prob[i] += [0.0] * len(follow)
    success = env.success & ~cut
    truncated = cut | timed_out
    return {"tokens": tokens, "mask": mask, "log_prob": log_prob, "reward": ret, "success": success,
            "truncated": truncated, "turns": env.turns.clone()}


def collect_text(env: TextEnv, policy, seeds: Sequence[int]) -> TensorDict:
    """Sampled episodes as a right-padded token batch (layout in the module docstring)."""
    out = run_episodes(env, policy, seeds)
    n, length = len(seeds), max(len(t) for t in out["tokens"])
    tokens = torch.full((n, length), int(getattr(policy, "pad_id", 0)), dtype=torch.long)
    attention = torch.zeros(n, length, dtype=torch.bool)
    mask = torch.zeros(n, length, dtype=torch.bool)
    log_prob = torch.zeros(n, length)
    for i, row in enumerate(out["tokens"]):
        tokens[i, : len(row)] = torch.tensor(row)
        attention[i, : len(row)] = True
        mask[i, : len(row)] = torch.tensor(out["mask"][i])
        log_prob[i, : len(row)] = torch.tensor(out["log_prob"][i])
    _, group = torch.unique(torch.tensor([int(s) for s in seeds]), return_inverse=True)
    return TensorDict({
        keys.OBS: TensorDict({TOKENS: tokens, ATTENTION: attention}, batch_size=[n]),
        keys.ACTION: tokens, keys.MASK: mask, keys.LOG_PROB: log_prob, keys.REWARD: out["reward"],
        keys.SUCCESS: out["success"], keys.TRUNCATED: out["truncated"], "turns": out["turns"], keys.GROUP: group,
        keys.EXTRAS: TensorDict({"score": mask}, batch_size=[n]),  # the learner scores the model's tokens only
        keys.POLICY_VERSION: torch.full((n,), int(getattr(policy, "version", 0))),  # the weights that sampled it
    }, batch_size=[n])


def evaluate_text(policy, env: TextEnv, seeds: Sequence[int], deterministic: bool = True, batch_size: int = 64,
                  sample_seed: int = 0) -> dict[str, float]:
    """Episodes on `seeds` (held-out ones, for a score), greedy or sampled at the policy's temperature (from
    `sample_seed`, the caller's random stream left as it was): success rate with its 95% Wilson interval, mean
    return and turns."""
    was_training = policy.training
    policy.eval()
    success, ret, turns = [], [], []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(sample_seed)
        for start in range(0, len(seeds), batch_size):
            out = run_episodes(env, policy, seeds[start: start + batch_size], deterministic=deterministic)
            success.append(out["success"])
            ret.append(out["reward"])
            turns.append(out["turns"])
    policy.train(was_training)
    s = torch.cat(success).float()
    low, high = wilson_interval(int(s.sum()), len(s))
    return {"success": s.mean().item(), "success_low": low, "success_high": high,
            "return": torch.cat(ret).mean().item(), "turns": torch.cat(turns).float().mean().item(),
            "episodes": len(s)}


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a success rate (Wilson 1927): sound at rates near 0 or 1, unlike the
    normal approximation."""
    if n == 0:
        return 0.0, 0.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


class TextCollector:
    """A text env's rollouts for the Trainer: each `collect` draws `episodes // group_size` training instances
    (random indices into the train split, from the run's seed) and plays each `group_size` times (GRPO's groups;
    1 for PPO). The rollout worker is separate from the learner (`policy.sampler()`, policies/lm/rollout.py):
    each collect first syncs the learner's weights into it, and every episode carries the version it sampled
    with (`policy_version`: the learner updates before it).

        batch = collector.collect()       # collect_text's batch [episodes]
        collector.count(batch)            # env steps it took: the replies
    """

    def __init__(self, env: TextEnv, policy, episodes: int, group_size: int):
        if group_size < 1 or episodes % group_size:
            raise ValueError(f"train.num_envs={episodes} episodes per update must be a multiple of "
                             f"algo.group_size={group_size}")
        self.env, self.policy, self.episodes, self.group_size = env, policy, episodes, group_size
        self.sampler = policy.sampler()
        self.collects = 0  # collect calls so far: the learner's updates when the next one syncs
        self.generator = torch.Generator()
        self._finished: list[torch.Tensor] = []

    def synced_sampler(self):
        """The rollout worker holding the learner's current weights."""
        self.sampler.sync(self.policy, self.collects)
        return self.sampler

    def reset(self, seed: int | None = None) -> None:
        self.generator.manual_seed(int(seed or 0))

    def collect(self) -> TensorDict:
        index = torch.randint(len(TRAIN_SEEDS), (self.episodes // self.group_size,), generator=self.generator)
        seeds = [instance_seed("train", int(i)) for i in index.repeat_interleave(self.group_size)]
        batch = collect_text(self.env, self.synced_sampler(), seeds)
        self.collects += 1
        self._finished.append(torch.stack([batch[keys.REWARD], batch["turns"].float(),
                                           batch[keys.SUCCESS].float(), batch[keys.MASK].sum(1).float()], -1))
        return batch

    def count(self, batch: TensorDict) -> int:
        return int(batch["turns"].sum())

    def pop_episode_stats(self) -> dict[str, float]:
        return pop_means(self._finished, ("return", "length", "success", "response_tokens"))

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"generator": self.generator.get_state(), "collects": torch.tensor(self.collects)}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.generator.set_state(state["generator"])
        self.collects = int(state.get("collects", 0))
