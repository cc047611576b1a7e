"""Arithmetic with a calculator tool (registered as `lm_calculator`): call the calculator, answer its result.

    env = CalculatorEnv(CalculatorEnv.Config(max_digits=3))
    env.reset([instance_seed("train", 0)])
    # system: how to call the calculator and answer;  user: "Calculate -62 * 51 - -18."
    env.step(["<calculator>-62 * 51 - -18</calculator>"])    # tool: "-3144"
    env.step(["<answer>-3144</answer>"])                       # reward 1, terminated, success

Problems are reasoning-gym's `basic_arithmetic` (its generator with parentheses, the one whose answers are
right: its parenthesis-free generator ignores operator precedence and prints a different divisor than it
divides by, in reasoning-gym 0.1.25). Every answer is an integer; a division always divides exactly.

Rewards: `<answer>` ends the episode; it earns 1 if it is the problem's value and, with `require_tool`,
that value came back from a calculator call in this episode (success); any other answer earns 0. A reply
without a calculator call or an answer, a calculator expression that is not arithmetic (or divides by zero)
and an answer that is not a number each earn `invalid_reward` and get a message saying what was wrong.
`tool_reward` (0 by default) is added once, for the episode's first calculator call that returns a value:
a shaped bonus, so an episode's return is at most 1 + tool_reward.

Held-out problems: besides disjoint seeds, a problem's content decides its split (a hash of its expression
against `heldout_fraction`); an instance draws problems from its seed until one of its own split comes up,
so no held-out problem is ever a training problem, even where the problem space is small.

reasoning-gym is imported when the env is built, not with this module: it takes ~0.9 s (scipy, matplotlib), and
`embodied train` imports every registered env to read its `Config`.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from fractions import Fraction

from embodied.config import check
from embodied.text_env import Message, Syntax, TextEnv, Turn, parse, split_of
from sims.text.tools import ToolError, calculate, format_number, parse_number

# the reply syntax as each setting asks for it: (how to call, how to answer), in the system prompt and in the
# message after an unreadable reply
SYNTAX = {"tags": ("in calculator tags, for example <calculator>12*7</calculator>",
                   "in answer tags, for example <answer>84</answer>"),
          "plain": ("on a line 'Calculator: <expression>', for example 'Calculator: 12*7'",
                    "on a line 'Answer: <number>', for example 'Answer: 84'")}
SYSTEM_PROMPT = ("Solve the arithmetic problem with the calculator. To use the calculator, write the expression {call}, "
                 "and it replies with the result. Then give the result as your final answer {answer}.")
NO_ACTION = "I found no calculator call and no answer. Write the expression {call}, or answer {answer}."
# the worked example's replies in each syntax (a call, then the answer), after the user's "Calculate 3 + 5."
EXAMPLE = {"tags": ("<calculator>3 + 5</calculator>", "<answer>8</answer>"),
           "plain": ("Calculator: 3 + 5", "Answer: 8")}
OPERATORS = ("+", "-", "*", "/")
DRAWS_PER_SEED = 1024  # problems an instance may draw to find one of its split (1024 draws fail 1 in 1e47 at 10%)


@dataclass(frozen=True)
class CalculatorConfig:
    """Difficulty and reward settings of `CalculatorEnv`; the problem settings are reasoning-gym's."""

    min_terms: int = 2  # numbers in a problem, at least
    max_terms: int = 2  # numbers in a problem, at most
    min_digits: int = 2  # a problem's numbers are uniform in +-(10^d - 1), d drawn from [min_digits, max_digits]
    max_digits: int = 2  # (so numbers are often negative and may have fewer digits than min_digits)
    operators: tuple[str, ...] = ("+", "-", "*")  # any of + - * /; divisions always come out exact
    max_turns: int = 4  # replies per episode (calculator calls and the answer) before truncation
    require_tool: bool = True  # success needs the answer to be a value the calculator returned in this episode
    # "tags": <calculator>...</calculator>, <answer>...</answer>; "plain" also reads "Calculator: ..." and
    # "Answer: ..." lines (embodied/text_env.py parse), which SmolLM2-135M writes where it never writes tags
    syntax: Syntax = "tags"
    # a solved problem as the conversation's first exchange (user, call, tool result, answer) before the real one:
    # one-shot prompting, the way tool-use RL recipes give a small model the format; off = instructions only
    worked_example: bool = False
    invalid_reward: float = -0.1  # reward for an unreadable reply, a refused calculator call, a non-numeric answer
    tool_reward: float = 0.0  # shaped bonus for the episode's first calculator call that returns a value; 0 = off
    heldout_fraction: float = 0.1  # share of all problems (by content) reserved for held-out seeds
    max_expression_chars: int = 200  # longer calculator arguments are refused

    def __post_init__(self):
        check(self.syntax in ("tags", "plain"), f"syntax={self.syntax!r} must be 'tags' or 'plain'")
        check(1 <= self.min_terms <= self.max_terms, f"need 1 <= min_terms <= max_terms, got {self.min_terms}, "
                                                     f"{self.max_terms}")
        check(1 <= self.min_digits <= self.max_digits <= 9, f"need 1 <= min_digits <= max_digits <= 9, got "
                                                            f"{self.min_digits}, {self.max_digits}")
        check(len(self.operators) > 0, "operators must not be empty")
        unknown = sorted(set(self.operators) - set(OPERATORS))
        check(not unknown, f"operators {unknown} are not supported; valid: {', '.join(OPERATORS)}")
        check(self.max_turns >= 1, f"max_turns={self.max_turns} must be >= 1")
        check(not (self.require_tool and self.max_turns < 2), "require_tool needs max_turns >= 2 (call, answer)")
        check(self.invalid_reward <= 0, f"invalid_reward={self.invalid_reward} must be <= 0 (a penalty)")
        check(self.tool_reward >= 0, f"tool_reward={self.tool_reward} must be >= 0")
        check(0 < self.heldout_fraction < 1, f"heldout_fraction={self.heldout_fraction} must be in (0, 1)")
        check(self.max_expression_chars >= 16, f"max_expression_chars={self.max_expression_chars} must be >= 16")


@dataclass
class Problem:
    question: str  # reasoning-gym's question, e.g. "Calculate 20 - -59."
    expression: str  # the expression in it, e.g. "20 - -59"
    answer: Fraction  # its exact value (an integer)


@dataclass
class Episode:
    problem: Problem
    results: list[Fraction] = field(default_factory=list)  # values the calculator returned so far


class CalculatorEnv(TextEnv):
    """A batch of arithmetic problems; the model calls `<calculator>` and answers with `<answer>`."""

    Config = CalculatorConfig

    def __init__(self, config: CalculatorConfig):
        from reasoning_gym.arithmetic.basic_arithmetic import BasicArithmeticDataset, BasicArithmeticDatasetConfig

        self.config = config
        self.max_turns = config.max_turns
        self.dataset = BasicArithmeticDataset(BasicArithmeticDatasetConfig(
            min_terms=config.min_terms, max_terms=config.max_terms, min_digits=config.min_digits,
            max_digits=config.max_digits, operators=config.operators, allow_parentheses=True,
            allow_negation=True, seed=0, size=2**31 - 1, format_style="simple", whitespace="single"))

    def problem(self, seed: int) -> Problem:
        """The problem of instance `seed`: the first of its draws whose content belongs to the seed's split."""
        split = split_of(seed)
        for draw in range(DRAWS_PER_SEED):
            item = self.dataset[seed * DRAWS_PER_SEED + draw]  # reasoning-gym seeds item i with Random(0 + i)
            expression = item["metadata"]["expression"]
            if self._content_split(expression) == split:
                # the calculator's value, not reasoning-gym's string: both agree (tested), and the model is
                # graded against what its tool returns
                return Problem(item["question"], expression, calculate(expression, max_chars=10_000))
        raise RuntimeError(f"no {split} problem in {DRAWS_PER_SEED} draws for seed {seed}; raise heldout_fraction")

    def _content_split(self, expression: str) -> str:
        heldout = zlib.crc32(expression.encode()) < self.config.heldout_fraction * 2**32
        return "heldout" if heldout else "train"

    # --- one episode ---------------------------------------------------------------------

    def _new_episode(self, seed: int) -> Episode:
        return Episode(self.problem(seed))

    def _opening(self, episode: Episode) -> list[Message]:
        call, answer = SYNTAX[self.config.syntax]
        system = SYSTEM_PROMPT.format(call=call, answer=answer)
        example = []
        if self.config.worked_example:
            call, answer = EXAMPLE[self.config.syntax]
            example = [{"role": "user", "content": "Calculate 3 + 5."}, {"role": "assistant", "content": call},
                       {"role": "tool", "content": "8"}, {"role": "assistant", "content": answer}]
        return [{"role": "system", "content": system}, *example, {"role": "user", "content": episode.problem.question}]

    def _respond(self, episode: Episode, reply: str) -> Turn:
        cfg = self.config
        call = parse(reply, ("calculator", "answer"), cfg.syntax)
        if call is None:
            call, answer = SYNTAX[cfg.syntax]
            message = NO_ACTION.format(call=call, answer=answer)
            return Turn([{"role": "user", "content": message}], reward=cfg.invalid_reward, invalid=True)
        if call.name == "calculator":
            try:
                value = calculate(call.argument, cfg.max_expression_chars)
            except ToolError as err:
                return Turn([{"role": "tool", "content": f"Error: {err}."}], reward=cfg.invalid_reward, invalid=True)
            reward = cfg.tool_reward if not episode.results else 0.0
            episode.results.append(value)
            return Turn([{"role": "tool", "content": format_number(value)}], reward=reward, tool_call=True)
        answer = parse_number(call.argument)
        if answer is None:
            message = f"Your answer {call.argument!r} is not a number. Answer with a number {SYNTAX[cfg.syntax][1]}."
            return Turn([{"role": "user", "content": message}], reward=cfg.invalid_reward, invalid=True)
        solved = answer == episode.problem.answer and (not cfg.require_tool or answer in episode.results)
        return Turn(reward=float(solved), terminated=True, success=solved)
