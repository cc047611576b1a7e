"""Multi-turn text environments: the contract of the language-agent path.

    env = CalculatorEnv(CalculatorEnv.Config())                  # sims/text; registered as lm_calculator
    seeds = [instance_seed("train", i) for i in (0, 0, 0, 0, 1, 1, 1, 1)]   # two GRPO groups of 4
    messages = env.reset(seeds)                                  # list[N] of list[message]
    while not env.done.all():
        replies = [...]                                          # list[N] of str, the model's decoded replies
        messages, reward, terminated, truncated, info = env.step(replies)

- A message is a chat dict `{"role": "system" | "user" | "tool", "content": str}`. `reset` returns each
  episode's opening messages (system prompt, then the task as "user"); `step` returns the env's next
  messages per episode: role "tool" for a tool's result (or its error), role "user" for feedback. An
  episode that ends at this step, or ended before, gets an empty list.
- `reward` float32 [N]; `terminated`, `truncated` bool [N] are True only at the step an episode ends
  (terminated: the task decided it, e.g. an answer; truncated: `max_turns` replies used up). Replies to
  episodes already done are ignored: reward 0, no messages, both flags False. `env.done` bool [N] is
  sticky: which episodes have ended since `reset`.
- `info["success"]` bool [N]: the episode's outcome so far (True from the step that solves the task on).
  `info["invalid"]` bool [N]: this reply was penalized (no parsable action, a tool error, an illegal
  move). `info["tool_call"]` bool [N]: this reply's tool call ran and returned a result.
- The env sees text only: tokenizing messages and decoding replies is the rollout's job.

Reply syntax (one action per reply; the first tag in the reply counts): a tool call is the tool's name as
a tag around its argument, `<calculator>12*7</calculator>`; a final answer is `<answer>84</answer>`. The
closing tag may be missing at the very end of a reply (a rollout that stops on `</calculator>` may cut
it off). `parse` reads this syntax; a reply it cannot read, or a call the tool refuses, gets the task's
`invalid_reward` for that turn plus a message saying what was wrong, and the episode goes on.

Instances come from seeds, deterministically: the same seed gives the same task (so equal seeds make a
GRPO group), and training and held-out seeds are disjoint ranges (`TRAIN_SEEDS`, `HELDOUT_SEEDS`);
`reset` refuses a seed in neither. A task with a large instance space may also split by content (see
its docstring), so that no held-out problem is ever trained on.

Subclasses implement `_new_episode(seed)`, `_opening(episode)` and `_respond(episode, reply) -> Turn`
for one episode; this base class does the batching, the turn limit and the done bookkeeping.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

Message = dict[str, str]  # {"role": "system" | "user" | "tool", "content": str}
Split = Literal["train", "heldout"]

TRAIN_SEEDS = range(0, 1_000_000)
HELDOUT_SEEDS = range(1_000_000, 1_100_000)
SPLITS: dict[str, range] = {"train": TRAIN_SEEDS, "heldout": HELDOUT_SEEDS}


def instance_seed(split: Split, index: int) -> int:
    """The seed of the `index`-th instance of `split` ("train" or "heldout")."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r} must be one of {', '.join(SPLITS)}")
    seeds = SPLITS[split]
    if not 0 <= index < len(seeds):
        raise ValueError(f"index={index} out of range for split {split!r} (0 <= index < {len(seeds)})")
    return seeds[index]


def split_of(seed: int) -> Split:
    """Which split `seed` belongs to; a ValueError for a seed in neither."""
    for split, seeds in SPLITS.items():
        if seed in seeds:
            return split  # type: ignore[return-value]
    raise ValueError(
        f"seed {seed} is in no split: train seeds are [{TRAIN_SEEDS.start}, {TRAIN_SEEDS.stop}), held-out seeds "
        f"[{HELDOUT_SEEDS.start}, {HELDOUT_SEEDS.stop}); use instance_seed(split, index)"
    )


@dataclass(frozen=True)
class ToolCall:
    """One action read from a reply: a tool call (`name` is the tool) or the final answer (`name="answer"`)."""

    name: str
    argument: str  # the text between the tags, stripped


Syntax = Literal["tags", "plain"]


def parse(reply: str, names: Collection[str], syntax: Syntax = "tags") -> ToolCall | None:
    """The first `<name>argument</name>` in `reply` whose name is in `names`, or None if there is none.

    The closing tag may be missing when the argument runs to the end of the reply. `syntax="plain"` also reads
    a line `Name ...: argument` (any case, up to 24 characters between the name and the colon; the argument runs
    to the line's end), the form a small chat model writes unprompted ("Calculator: 3 + 4", "Answer: 7", "Guess
    the number: 12"): a task's easier setting for models that do not follow tags.
    """
    if not names:
        return None
    pattern = "|".join(re.escape(name) for name in names)
    match = re.search(rf"<({pattern})>(.*?)(?:</\1>|$)", reply, flags=re.DOTALL)
    if match is not None:
        return ToolCall(match.group(1), match.group(2).strip())
    if syntax == "plain":
        match = re.search(rf"^\W*({pattern})\b[^:\n]{{0,24}}:[ \t]*(.*)$", reply, flags=re.IGNORECASE | re.MULTILINE)
        if match is not None:
            return ToolCall(match.group(1).lower(), match.group(2).strip().rstrip("."))
    return None


@dataclass
class Turn:
    """What one episode's env answers to one reply (returned by `TextEnv._respond`)."""

    messages: list[Message] = field(default_factory=list)  # the env's next messages (dropped if the episode ends)
    reward: float = 0.0
    terminated: bool = False  # the task ended the episode (an answer, a solved game)
    success: bool = False  # the task is solved
    invalid: bool = False  # the reply was penalized (unparsable, a tool error, an illegal move)
    tool_call: bool = False  # a tool ran and returned a result


class TextEnv:
    """Base class: a batch of independent multi-turn text episodes, one per seed of the last `reset`."""

    Config: type
    max_turns: int  # replies per episode before it is truncated; subclasses set it from their config

    def reset(self, seeds: Sequence[int]) -> list[list[Message]]:
        """Start one episode per seed (batch size N = len(seeds)); returns each episode's opening messages."""
        seeds = [int(seed) for seed in seeds]
        if not seeds:
            raise ValueError("reset needs at least one seed")
        for seed in seeds:
            split_of(seed)  # raises for a seed outside both splits
        self.seeds = seeds
        self._episodes = [self._new_episode(seed) for seed in seeds]
        self.turns = torch.zeros(len(seeds), dtype=torch.long)  # [N] replies consumed
        self.done = torch.zeros(len(seeds), dtype=torch.bool)  # [N] sticky: the episode has ended
        self.success = torch.zeros(len(seeds), dtype=torch.bool)  # [N] sticky: the episode was solved
        return [self._opening(episode) for episode in self._episodes]

    def step(self, replies: Sequence[str | None]) -> tuple[list[list[Message]], torch.Tensor, torch.Tensor,
                                                           torch.Tensor, dict[str, Any]]:
        """One reply per episode -> next messages, reward, flags, info. An episode already done, or given None
        (its rollout ended it, e.g. at the context window), takes no step: no turn, reward 0."""
        if not hasattr(self, "_episodes"):
            raise RuntimeError(f"{type(self).__name__}.step called before reset")
        n = len(self._episodes)
        if len(replies) != n:
            raise ValueError(f"step got {len(replies)} replies for a batch of {n} episodes")
        messages: list[list[Message]] = [[] for _ in range(n)]
        reward = torch.zeros(n, dtype=torch.float32)
        terminated = torch.zeros(n, dtype=torch.bool)
        truncated = torch.zeros(n, dtype=torch.bool)
        invalid = torch.zeros(n, dtype=torch.bool)
        tool_call = torch.zeros(n, dtype=torch.bool)
        for i, (episode, reply) in enumerate(zip(self._episodes, replies)):
            if self.done[i] or reply is None:
                continue
            if not isinstance(reply, str):
                raise TypeError(f"reply {i} is a {type(reply).__name__}, not a str (decode tokens in the rollout)")
            turn = self._respond(episode, reply)
            self.turns[i] += 1
            reward[i], invalid[i], tool_call[i] = turn.reward, turn.invalid, turn.tool_call
            terminated[i] = turn.terminated
            truncated[i] = not turn.terminated and bool(self.turns[i] >= self.max_turns)
            self.success[i] |= turn.success
            if terminated[i] or truncated[i]:
                self.done[i] = True
            else:
                messages[i] = turn.messages
        info = {"success": self.success.clone(), "invalid": invalid, "tool_call": tool_call}
        return messages, reward, terminated, truncated, info

    # --- one episode, implemented by each task -----------------------------------------

    def _new_episode(self, seed: int) -> Any:
        """The state of a new episode of instance `seed` (deterministic in `seed`)."""
        raise NotImplementedError

    def _opening(self, episode: Any) -> list[Message]:
        """The episode's opening messages: a system prompt (the reply syntax) and the task."""
        raise NotImplementedError

    def _respond(self, episode: Any, reply: str) -> Turn:
        """Apply one reply to the episode (mutating it) and say what the env answers."""
        raise NotImplementedError
