"""Guess the number with higher/lower feedback (registered as `lm_guess_number`), on textarena's game.

    env = GuessNumberEnv(GuessNumberEnv.Config(max_number=20, max_turns=6))
    env.reset([instance_seed("train", 0)])
    # system: the rules and the reply syntax;  user: "Make your first guess."
    env.step(["<answer>10</answer>"])     # user: "10 is too high: the number is lower. 5 guesses left."
    env.step(["<answer>5</answer>"])      # reward 1, terminated, success (if it was 5)

The game is textarena's `GuessTheNumber-v0` (`GuessTheNumberEnv`, one per episode): it draws the secret
number from the seed, judges each guess (higher, lower, correct) and refuses illegal ones (outside the
range, or guessed before). We keep our own rules where textarena's differ from this contract: the reply
syntax is `<answer>N</answer>` (textarena reads `[N]`), an illegal or unreadable guess costs
`invalid_reward` and the game goes on (textarena ends it at the second illegal move in a row), every
reply counts towards `max_turns` (textarena counts legal guesses only), and a game not won earns 0
(textarena pays partial credit by distance). The game needs no word lists, so it runs offline.

textarena is imported when the env is built, not with this module: it takes ~1.3 s (it loads nltk), and
`embodied train` imports every registered env to read its `Config`.

textarena seeds Python's global `random` to draw the number; `_new_episode` saves and restores that
state around it, so building episodes does not disturb anyone else's random numbers.

Rewards: 1 for the guess that hits the number (success, terminated); 0 for a legal wrong guess;
`invalid_reward` for an unreadable, out-of-range or repeated guess. Held-out seeds are disjoint from
training seeds, but with R numbers in the range there are only R distinct games, so both splits play
the same secrets; what a model learns here is the search, not the instances.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from embodied.config import check
from embodied.text_env import Message, Syntax, TextEnv, Turn, parse

if TYPE_CHECKING:
    from textarena.envs.GuessTheNumber.env import GuessTheNumberEnv

# how to write a guess, in each setting's words (the system prompt and the message after an unreadable reply)
SYNTAX = {"tags": "in answer tags, for example <answer>{example}</answer>",
          "plain": "on a line 'Answer: <number>', for example 'Answer: {example}'"}
EXAMPLE = {"tags": "<answer>{guess}</answer>", "plain": "Answer: {guess}"}  # a reply in the worked example
NO_GUESS = "I found no guess. Reply with a whole number {how}."


@dataclass(frozen=True)
class GuessNumberConfig:
    """Difficulty and reward settings of `GuessNumberEnv`."""

    min_number: int = 1  # the secret number is at least this
    max_number: int = 20  # and at most this (textarena's GuessTheNumber-v0: 1 to 20 in 10 turns)
    max_turns: int = 10  # replies per episode (guesses, legal or not) before truncation
    invalid_reward: float = -0.1  # reward for an unreadable, out-of-range or repeated guess
    # "tags": <answer>N</answer>; "plain" also reads "Answer: N" / "Guess ...: N" lines (embodied/text_env.py parse)
    syntax: Syntax = "tags"
    # a won game played before the real one (binary search, in the reply syntax, with the env's own feedback), as
    # lm_calculator's worked example: it shows the small model the syntax and the use of the feedback
    worked_example: bool = False

    def __post_init__(self):
        check(self.min_number < self.max_number, f"need min_number < max_number, got {self.min_number}, "
                                                 f"{self.max_number}")
        check(self.min_number >= 0, f"min_number={self.min_number} must be >= 0 (textarena reads digits only)")
        check(self.max_turns >= 1, f"max_turns={self.max_turns} must be >= 1")
        check(self.invalid_reward <= 0, f"invalid_reward={self.invalid_reward} must be <= 0 (a penalty)")
        check(self.syntax in ("tags", "plain"), f"syntax={self.syntax!r} must be 'tags' or 'plain'")

    @property
    def search_turns(self) -> int:
        """Guesses that binary search needs at worst: with max_turns >= this, the game is always winnable."""
        return math.ceil(math.log2(self.max_number - self.min_number + 2))


@dataclass
class Episode:
    game: GuessTheNumberEnv  # textarena's game, seeded with the instance seed
    replies: int = 0  # replies so far, legal or not


class GuessNumberEnv(TextEnv):
    """A batch of guess-the-number games; the model guesses with `<answer>N</answer>`."""

    Config = GuessNumberConfig

    def __init__(self, config: GuessNumberConfig):
        # here, not at module level (see the module's docstring): a missing textarena fails at construction
        from textarena.envs.GuessTheNumber.env import GuessTheNumberEnv  # noqa: F401

        self.config = config
        self.max_turns = config.max_turns
        self.example = (config.min_number + config.max_number) // 2

    def secret(self, seed: int) -> int:
        """The number instance `seed` hides."""
        return self._new_episode(seed).game.state.game_state["game_number"]

    # --- one episode ---------------------------------------------------------------------

    def _new_episode(self, seed: int) -> Episode:
        from textarena.envs.GuessTheNumber.env import GuessTheNumberEnv

        cfg = self.config
        game = GuessTheNumberEnv(min_number=cfg.min_number, max_number=cfg.max_number, max_turns=cfg.max_turns + 1)
        saved = random.getstate()
        try:
            game.reset(num_players=1, seed=seed)  # textarena: random.seed(seed), then random.randint(min, max)
        finally:
            random.setstate(saved)
        # illegal moves never end the game (our turn limit does), nor does textarena's own turn limit, set
        # one past ours; textarena counts legal moves only
        game.state.error_allowance = cfg.max_turns + 1
        game.state.get_current_player_observation()  # drop textarena's prompt: ours names our reply syntax
        return Episode(game)

    def _opening(self, episode: Episode) -> list[Message]:
        cfg = self.config
        system = (
            f"You are playing Guess The Number. I have picked a whole number from {cfg.min_number} to "
            f"{cfg.max_number}. You have {cfg.max_turns} guesses. Reply with one guess "
            f"{SYNTAX[cfg.syntax].format(example=self.example)}. After each wrong guess I say whether the number is "
            "higher or lower."
        )
        first = self._example() if cfg.worked_example else [{"role": "user", "content": "Make your first guess."}]
        return [{"role": "system", "content": system}, *first]

    def _example(self) -> list[Message]:
        """A game won by binary search (the secret two thirds up the range), then the real game's first prompt."""
        cfg = self.config
        secret = cfg.min_number + 2 * (cfg.max_number - cfg.min_number) // 3
        low, high, messages = cfg.min_number, cfg.max_number, [{"role": "user", "content": "Make your first guess."}]
        for replies in range(1, cfg.max_turns + 1):
            guess = (low + high) // 2
            messages.append({"role": "assistant", "content": EXAMPLE[cfg.syntax].format(guess=guess)})
            if guess == secret:
                break
            hint = "higher" if secret > guess else "lower"
            low, high = (guess + 1, high) if hint == "higher" else (low, guess - 1)
            messages.append({"role": "user", "content": feedback(guess, hint, cfg.max_turns - replies)})
        won = (f"{secret} is right: you won. New game: I have picked a new whole number from {cfg.min_number} to "
               f"{cfg.max_number}, and you have {cfg.max_turns} guesses again. Make your first guess.")
        return messages + [{"role": "user", "content": won}]

    def _respond(self, episode: Episode, reply: str) -> Turn:
        import textarena

        cfg, game = self.config, episode.game
        episode.replies += 1
        call = parse(reply, ("answer", "guess"), cfg.syntax)
        guess = call.argument if call is not None else ""
        if re.fullmatch(r"[0-9]{1,12}", guess) is None:
            message = NO_GUESS.format(how=SYNTAX[cfg.syntax].format(example=self.example))
            return Turn([{"role": "user", "content": message}], reward=cfg.invalid_reward, invalid=True)
        game.step(f"[{int(guess)}]")
        observations = game.state.get_current_player_observation()
        if game.state.done:  # only at the right guess: neither illegal moves nor its turn limit end it (_new_episode)
            won = int(guess) == game.state.game_state["game_number"]
            return Turn(reward=float(won), terminated=True, success=won)
        left = f" {cfg.max_turns - episode.replies} guesses left."
        if any(kind == textarena.ObservationType.GAME_ADMIN for _, _, kind in observations):  # textarena refused it
            # its reasons are written for its own prompt ("Player 0 ..."); say it plainly
            number = int(guess)
            inside = cfg.min_number <= number <= cfg.max_number
            why = "was guessed before" if inside else f"is not from {cfg.min_number} to {cfg.max_number}"
            message = f"{number} {why}: that guess does not count.{left}"
            return Turn([{"role": "user", "content": message}], reward=cfg.invalid_reward, invalid=True)
        last, hint = game.state.game_state["guess_history"][-1]
        return Turn([{"role": "user", "content": feedback(last, hint, cfg.max_turns - episode.replies)}])


def feedback(guess: int, hint: str, left: int) -> str:
    """The message after a legal wrong guess; `hint` is textarena's "higher" or "lower"."""
    too = "low" if hint == "higher" else "high"
    return f"{guess} is too {too}: the number is {hint}. {left} guesses left."
