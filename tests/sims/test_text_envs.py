"""Text envs: the TextEnv contract (seeds, splits, batching, turn limit), the calculator, the two tasks."""

import random
from fractions import Fraction

import pytest
import torch

from embodied.config import ConfigError
from embodied.text_env import HELDOUT_SEEDS, TRAIN_SEEDS, ToolCall, instance_seed, parse, split_of
from sims.text.tools import ToolError, calculate, format_number, parse_number

pytest.importorskip("reasoning_gym", reason="lm_calculator needs reasoning-gym")
pytest.importorskip("textarena", reason="lm_guess_number needs textarena")
from sims.text import CalculatorEnv, GuessNumberEnv  # noqa: E402

TRAIN = [instance_seed("train", i) for i in range(6)]
HELDOUT = [instance_seed("heldout", i) for i in range(3)]


def calculator(**config):
    return CalculatorEnv(CalculatorEnv.Config(**config))


def guesser(**config):
    return GuessNumberEnv(GuessNumberEnv.Config(**config))


def tool_oracle(env, i):
    """The calculator oracle's two replies for episode i: call the calculator on the problem, answer its result."""
    problem = env._episodes[i].problem
    return f"<calculator>{problem.expression}</calculator>", f"<answer>{format_number(problem.answer)}</answer>"


# --- the contract's helpers -------------------------------------------------------------


def test_splits_are_disjoint_and_other_seeds_refused():
    assert set(TRAIN_SEEDS).isdisjoint(HELDOUT_SEEDS)
    assert split_of(instance_seed("train", 5)) == "train" and split_of(instance_seed("heldout", 5)) == "heldout"
    for bad in (-1, HELDOUT_SEEDS.stop):
        with pytest.raises(ValueError, match="in no split"):
            split_of(bad)
        with pytest.raises(ValueError, match="in no split"):
            calculator().reset([0, bad])
    with pytest.raises(ValueError, match="out of range"):
        instance_seed("heldout", len(HELDOUT_SEEDS))
    with pytest.raises(ValueError, match="split"):
        instance_seed("test", 0)


def test_parse_takes_the_first_known_tag_and_tolerates_a_cut_off_close():
    assert parse("ok <calculator> 12*7 </calculator> then <answer>84</answer>", ("calculator", "answer")) == \
        ToolCall("calculator", "12*7")
    assert parse("<search>x</search> <answer>84</answer>", ("calculator", "answer")) == ToolCall("answer", "84")
    assert parse("<calculator>12*7", ("calculator",)) == ToolCall("calculator", "12*7")
    assert parse("no tags at all", ("calculator", "answer")) is None


@pytest.mark.parametrize("expression, value", [("12*7", 84), ("2+3*4", 14), ("10/4*2", 5), ("-(3-5)", 2),
                                               ("7 / 2", Fraction(7, 2)), ("20 - -59", 79), ("1.5*2", 3)])
def test_calculator_values(expression, value):
    assert calculate(expression) == value


@pytest.mark.parametrize("expression", ["__import__('os').system('echo pwned')", "().__class__", "open('x')",
                                        "2**10**10", "2^8", "x + 1", "lambda: 1", "True + 1", "1/0", "1e999",
                                        "3 +* 4", "", "1" * 300, "(" * 150 + "1" + ")" * 150])
def test_calculator_refuses_anything_but_arithmetic(expression):
    with pytest.raises(ToolError):
        calculate(expression)


def test_number_helpers():
    assert format_number(Fraction(8272)) == "8272" and format_number(Fraction(10, 3)) == "3.333333333"
    assert parse_number(" 1,000 ") == 1000 and parse_number("-3") == -3 and parse_number("1.25") == Fraction(5, 4)
    assert parse_number("3/4") is None and parse_number("eighty") is None and parse_number("") is None


# --- the calculator task ----------------------------------------------------------------


def test_calculator_oracle_solves_and_the_tool_result_is_the_answer():
    env = calculator(max_digits=3, operators=("+", "-", "*", "/"), max_terms=3)
    opening = env.reset(TRAIN + HELDOUT)
    assert [m["role"] for m in opening[0]] == ["system", "user"] and "<calculator>" in opening[0][0]["content"]
    calls, answers = zip(*(tool_oracle(env, i) for i in range(len(opening))))
    messages, reward, terminated, truncated, info = env.step(calls)
    assert all(m == [{"role": "tool", "content": a[8:-9]}] for m, a in zip(messages, answers))
    assert info["tool_call"].all() and not (terminated | truncated).any() and (reward == 0).all()
    messages, reward, terminated, truncated, info = env.step(answers)
    assert (reward == 1).all() and terminated.all() and not truncated.any() and info["success"].all()
    assert messages == [[] for _ in answers] and env.done.all()


@pytest.mark.parametrize("syntax", ["tags", "plain"])
def test_calculator_worked_example_is_a_solved_exchange_in_the_configured_syntax(syntax):
    """The one-shot example: the env's own parser reads its call and answer, and its tool result is the calculator's."""
    opening = calculator(worked_example=True, syntax=syntax).reset(TRAIN[:1])[0]
    assert [m["role"] for m in opening] == ["system", "user", "assistant", "tool", "assistant", "user"]
    call, answer = parse(opening[2]["content"], ("calculator",), syntax), parse(opening[4]["content"], ("answer",), syntax)
    assert format_number(calculate(call.argument, 200)) == opening[3]["content"] == answer.argument == "8"
    assert opening[-1]["content"] == calculator(syntax=syntax).reset(TRAIN[:1])[0][-1]["content"]  # the same problem


def test_calculator_wrong_or_untooled_answers_earn_nothing():
    env = calculator()
    env.reset(TRAIN[:3])
    right = [format_number(env._episodes[i].problem.answer) for i in range(3)]
    env.step(["<calculator>1+1</calculator>", "<calculator>1+1</calculator>", "thinking..."])
    _, reward, terminated, _, info = env.step(
        [f"<answer>{int(right[0]) + 1}</answer>", f"<answer>{right[1]}</answer>", f"<answer>{right[2]}</answer>"])
    # wrong; right but not what the calculator returned (require_tool); right without any calculator call
    assert reward.tolist() == [0, 0, 0] and terminated.all() and not info["success"].any()
    env = calculator(require_tool=False)
    env.reset(TRAIN[:1])
    _, reward, _, _, info = env.step([f"<answer>{format_number(env._episodes[0].problem.answer)}</answer>"])
    assert reward.tolist() == [1] and info["success"].all()


@pytest.mark.parametrize("reply, role, says", [("I think it is 84", "user", "no calculator call"),
                                               ("<calculator>__import__('os').getcwd()</calculator>", "tool", "Error"),
                                               ("<calculator>12 * (3</calculator>", "tool", "Error"),
                                               ("<answer>eighty-four</answer>", "user", "not a number")])
def test_calculator_invalid_reply_is_penalized_and_the_episode_goes_on(reply, role, says):
    env = calculator(invalid_reward=-0.25)
    env.reset(TRAIN[:1])
    messages, reward, terminated, truncated, info = env.step([reply])
    assert reward.tolist() == pytest.approx([-0.25]) and info["invalid"].all() and not (terminated | truncated).any()
    assert messages[0][0]["role"] == role and says in messages[0][0]["content"]
    for reply in tool_oracle(env, 0):  # still solvable
        _, reward, terminated, _, info = env.step([reply])
    assert reward.tolist() == [1] and terminated.all() and info["success"].all()


def test_calculator_truncates_at_max_turns_and_pays_the_tool_bonus_once():
    env = calculator(max_turns=3, tool_reward=0.1)
    env.reset(TRAIN[:2])
    rewards = []
    for turn in range(3):
        messages, reward, terminated, truncated, info = env.step(["<calculator>2*3</calculator>"] * 2)
        rewards.append(reward[0].item())
        assert truncated.all() == (turn == 2) and not terminated.any()
    assert rewards == pytest.approx([0.1, 0, 0]) and messages == [[], []] and not info["success"].any()


def test_an_episode_given_none_takes_no_step():
    """The rollout ends an episode at the context window by passing None: no turn, no reward, no penalty."""
    env = calculator(invalid_reward=-0.25)
    env.reset(TRAIN[:2])
    messages, reward, terminated, truncated, _ = env.step([None, "no call"])
    assert env.turns.tolist() == [0, 1] and reward.tolist() == [0, -0.25] and messages[0] == []
    assert not (terminated | truncated).any() and not env.done.any()
    with pytest.raises(TypeError, match="not a str"):
        env.step([b"bytes", "x"])


def test_calculator_instances_are_deterministic_and_equal_seeds_equal():
    seeds = [TRAIN[0], TRAIN[1], TRAIN[0], HELDOUT[0], HELDOUT[0]]
    first, second = calculator(max_digits=3), calculator(max_digits=3)
    opening = first.reset(seeds)
    assert opening == second.reset(seeds)
    assert opening[0] == opening[2] and opening[3] == opening[4] and opening[0] != opening[1]
    assert first.problem(TRAIN[5]) == second.problem(TRAIN[5])


def test_calculator_heldout_problems_never_occur_in_training():
    env = calculator(min_digits=1, max_digits=1, operators=("+",))  # a space of 19 * 19 problems
    train = {env.problem(instance_seed("train", i)).expression for i in range(400)}
    heldout = {env.problem(instance_seed("heldout", i)).expression for i in range(40)}
    assert train.isdisjoint(heldout) and len(heldout) > 5


def test_reasoning_gym_answers_agree_with_the_calculator():
    env = calculator(max_terms=4, max_digits=3, operators=("+", "-", "*", "/"))
    for i in range(200):
        item = env.dataset[i]
        assert calculate(item["metadata"]["expression"]) == int(item["answer"]), item


# --- the guess-the-number task -----------------------------------------------------------


def binary_search(env, steps=20):
    """The oracle: guess the middle of the interval the feedback leaves; returns the last step's outputs."""
    n = len(env.seeds)
    low, high = [env.config.min_number] * n, [env.config.max_number] * n
    for _ in range(steps):
        guesses = [(lo + hi) // 2 for lo, hi in zip(low, high)]
        messages, reward, terminated, truncated, info = env.step([f"<answer>{g}</answer>" for g in guesses])
        for i, (message, g) in enumerate(zip(messages, guesses)):
            if message and "higher" in message[0]["content"]:
                low[i] = g + 1
            elif message and "lower" in message[0]["content"]:
                high[i] = g - 1
        if env.done.all():
            return reward, terminated, truncated, info
    raise AssertionError("binary search did not finish")


@pytest.mark.parametrize("syntax", ["tags", "plain"])
def test_guess_worked_example_is_a_game_won_with_the_envs_own_feedback(syntax):
    """The one-shot example: binary search to a known number, each reply readable by the env's parser, each
    feedback line the one the env itself gives for that guess, then the real game's first prompt."""
    env = guesser(max_number=10, max_turns=5, syntax=syntax, worked_example=True)
    opening = env.reset(TRAIN[:1])[0]
    example = opening[1:]
    guesses = [int(parse(m["content"], ("answer",), syntax).argument) for m in example if m["role"] == "assistant"]
    assert guesses == [5, 8, 6, 7] and example[-1]["content"].endswith("Make your first guess.")
    player = guesser(max_number=10, max_turns=5, syntax=syntax)
    secret = 7
    seed = next(s for s in TRAIN if player.secret(s) == secret)  # a game hiding the example's number
    player.reset([seed])
    feedback = [m["content"] for m in example[1:-1] if m["role"] == "user"]
    for guess, said in zip(guesses, feedback):
        messages, *_ = player.step([f"<answer>{guess}</answer>" if syntax == "tags" else f"Answer: {guess}"])
        assert messages[0][0]["content"] == said
    assert opening[0] == guesser(max_number=10, max_turns=5, syntax=syntax).reset(TRAIN[:1])[0][0]  # same rules


def test_guess_oracle_always_wins_within_search_turns():
    env = guesser(max_number=50, max_turns=6)
    assert env.config.search_turns == 6
    seeds = TRAIN + HELDOUT
    env.reset(seeds)
    binary_search(env)
    assert env.success.all() and (env.turns <= 6).all()
    # each episode ends with reward 1 on the winning step (all wrong legal guesses earn 0)
    env.reset(seeds)
    total = torch.zeros(len(seeds))
    low, high = [1] * len(seeds), [50] * len(seeds)
    while not env.done.all():
        guesses = [(lo + hi) // 2 for lo, hi in zip(low, high)]
        messages, reward, terminated, _, info = env.step([f"<answer>{g}</answer>" for g in guesses])
        total += reward
        for i, (message, g) in enumerate(zip(messages, guesses)):
            if message:
                low[i], high[i] = (g + 1, high[i]) if "higher" in message[0]["content"] else (low[i], g - 1)
    assert total.tolist() == [1.0] * len(seeds)


def test_guess_wrong_guesses_earn_nothing_and_truncate():
    env = guesser(max_turns=3)
    env.reset(TRAIN[:4])
    wrong = [[n for n in range(1, 21) if n != env.secret(s)][:3] for s in TRAIN[:4]]
    for turn in range(3):
        messages, reward, terminated, truncated, info = env.step([f"<answer>{w[turn]}</answer>" for w in wrong])
        assert (reward == 0).all() and not terminated.any() and truncated.all() == (turn == 2)
    assert messages == [[]] * 4 and not info["success"].any()


@pytest.mark.parametrize("reply, says", [("ten", "no guess"), ("<answer>99</answer>", "not from 1 to 20"),
                                         ("<answer>-3</answer>", "no guess")])
def test_guess_invalid_guess_is_penalized_and_the_game_goes_on(reply, says):
    env = guesser()
    env.reset(TRAIN[:1])
    for _ in range(3):  # textarena alone would end the game at the second illegal move
        messages, reward, terminated, truncated, info = env.step([reply])
        assert reward.tolist() == pytest.approx([-0.1]) and info["invalid"].all() and not (terminated | truncated).any()
        assert says in messages[0][0]["content"].lower()
    secret = env.secret(TRAIN[0])
    messages, reward, terminated, _, info = env.step([f"<answer>{secret}</answer>"])
    assert reward.tolist() == [1] and terminated.all() and info["success"].all()


def test_guess_repeated_guess_is_penalized():
    env = guesser()
    env.reset(TRAIN[:1])
    wrong = 1 if env.secret(TRAIN[0]) != 1 else 2
    env.step([f"<answer>{wrong}</answer>"])
    messages, reward, _, _, info = env.step([f"<answer>{wrong}</answer>"])
    assert reward.tolist() == pytest.approx([-0.1]) and "guessed before" in messages[0][0]["content"]


def test_guess_instances_are_deterministic_equal_seeds_equal_and_leave_global_random_alone():
    random.seed(123)
    expected = random.random()
    random.seed(123)
    secrets = [guesser(max_number=1000).secret(s) for s in TRAIN + HELDOUT]
    assert random.random() == expected
    assert secrets == [guesser(max_number=1000).secret(s) for s in TRAIN + HELDOUT] and len(set(secrets)) > 5
    env = guesser()
    env.reset([TRAIN[0]] * 3)
    messages, *_ = env.step(["<answer>10</answer>"] * 3)
    assert messages[0] == messages[1] == messages[2]


# --- batching and errors -----------------------------------------------------------------


def test_batch_with_mixed_done_episodes_ignores_replies_to_finished_ones():
    env = guesser()
    seeds = TRAIN[:3]
    env.reset(seeds)
    secret = env.secret(seeds[0])
    other = [1 if env.secret(s) != 1 else 2 for s in seeds]
    messages, reward, terminated, truncated, _ = env.step([f"<answer>{secret}</answer>", f"<answer>{other[1]}</answer>",
                                                           "garbage"])
    assert reward.tolist() == pytest.approx([1, 0, -0.1]) and terminated.tolist() == [True, False, False]
    assert messages[0] == [] and messages[1] and messages[2] and env.done.tolist() == [True, False, False]
    messages, reward, terminated, truncated, info = env.step(["<answer>", "garbage", "garbage"])
    assert reward.tolist() == pytest.approx([0, -0.1, -0.1]) and messages[0] == []
    assert not terminated[0] and not truncated[0] and info["success"].tolist() == [True, False, False]
    assert env.turns.tolist() == [1, 2, 2]


def test_step_errors_and_config_validation():
    env = calculator()
    with pytest.raises(RuntimeError, match="before reset"):
        env.step(["x"])
    env.reset(TRAIN[:2])
    with pytest.raises(ValueError, match="2 episodes"):
        env.step(["x"])
    with pytest.raises(TypeError, match="not a str"):
        env.step([[1, 2], "x"])
    with pytest.raises(ConfigError, match="operators"):
        CalculatorEnv.Config(operators=("%",))
    with pytest.raises(ConfigError, match="min_digits"):
        CalculatorEnv.Config(min_digits=3, max_digits=2)
    with pytest.raises(ConfigError, match="invalid_reward"):
        GuessNumberEnv.Config(invalid_reward=0.5)
    with pytest.raises(ConfigError, match="min_number < max_number"):
        GuessNumberEnv.Config(min_number=5, max_number=5)
