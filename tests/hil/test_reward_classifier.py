"""The reward classifier: trained on labelled arm-reach frames, it must find the success frames of
held-out episodes and end a live episode at the goal (HIL-SERL's learned reward)."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from embodied import keys, registry
from embodied.data.store import EpisodeStore
from embodied.data.record import LIVE, collect_episodes
from embodied.hil.reward_classifier import (
    ClassifierReward,
    RewardClassifierConfig,
    labelled_frames,
    load_classifier,
    save_classifier,
    train_classifier,
)
from sims.arm_reach import kinematics as kin
from sims.arm_reach.scripted import scripted_action


class WrongBall:
    """The env as the scripted expert sees it, with the goal moved to another ball: a failure mode an
    operator labels 'n' (the arm reaches, for the wrong ball), so the frames at a ball are not all successes."""

    def __init__(self, env):
        self.env = env

    def __getattr__(self, name):
        return getattr(self.env, name)

    @property
    def goal_position(self):
        env = self.env
        return env.ball_pos[torch.arange(env.num_envs), (env.goal + 1) % env.ball_pos.shape[1]]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """160 scripted arm-reach episodes as a session writes them: the even envs reach the instructed ball
    (success, label 1), the odd ones the wrong ball until the time limit (label 0); the last is unlabelled."""
    env = registry.build("env", "arm_reach", {"max_episode_steps": 40}, num_envs=160)
    odd = (torch.arange(env.num_envs) % 2 == 1).unsqueeze(-1)

    class OperatorDemo:  # collect_episodes' policy: the expert, sent to the wrong ball in the odd envs
        def act(self, obs, deterministic):
            return SimpleNamespace(action=torch.where(odd, scripted_action(WrongBall(env)), env.expert_action()))

    episodes = collect_episodes(env, seed=0, policy=OperatorDemo())
    path = tmp_path_factory.mktemp("session") / "episodes.zarr"
    with EpisodeStore(path, mode="a") as writer:
        for n in range(env.num_envs):
            ep = episodes[:, n][episodes[LIVE][:, n]]
            label = 1 if bool(ep[keys.SUCCESS].any()) else 0
            if n == env.num_envs - 1:
                label = -1
            length = ep.batch_size[0]
            writer.append_episode({"obs/state": ep[keys.OBS][keys.STATE].numpy(),
                                   "obs/privileged": ep[keys.OBS][keys.PRIVILEGED].numpy(),
                                   "action": ep[keys.ACTION].numpy(), "label": np.full(length, label, np.int8),
                                   "rewound": np.zeros(length, bool)})
    return path


def test_labelled_frames_follow_the_episode_labels(store):
    with EpisodeStore(store) as reader:
        frames, labels, episode = labelled_frames(reader, success_frames=5)
        label = [int(reader.read("label", *reader.episode_range(i))[0]) for i in range(reader.num_episodes)]
    assert 0 < label.count(1) < 159 and label.count(0) > 0  # both outcomes, for the test to mean anything
    assert set(episode.tolist()) == {i for i, v in enumerate(label) if v in (0, 1)}  # the unlabelled one is out
    assert int(labels.sum()) == 5 * label.count(1)
    assert keys.STATE in frames.keys() and "privileged" not in frames.keys()


def test_classifier_finds_held_out_success_frames_and_ends_episodes_at_the_goal(store, tmp_path):
    with EpisodeStore(store) as reader:
        # the last 3 rows: the tip is inside the success radius there (the env succeeds after 5 steps inside)
        frames, labels, episode = labelled_frames(reader, success_frames=3)
    # it reads the goal offset (state[23:26]); on all 26 dimensions it overfits (see state_indices)
    config = RewardClassifierConfig(updates=600, lr=1e-3, hidden=(64, 64), val_fraction=0.25, state_indices=(23, 24, 25))
    model, report = train_classifier(frames, labels, episode, config)
    assert report["val_recall"] >= 0.9 and report["val_precision"] >= 0.85, report
    save_classifier(model, tmp_path / "clf")
    loaded = load_classifier(tmp_path / "clf")
    assert torch.equal(loaded(frames[:32]), model(frames[:32]))

    # a live episode whose own success never fires (hold_steps too long): the classifier ends it at the goal
    env = registry.build("env", "arm_reach", {"hold_steps": 150, "max_episode_steps": 160}, num_envs=1)
    wrapped = ClassifierReward(env, loaded)
    obs, _ = wrapped.reset(seed=7)
    for _ in range(env.max_episode_steps):
        obs, reward, terminated, truncated, info = wrapped.step(env.expert_action())
        if bool(terminated[0] | truncated[0]):
            break
    assert bool(terminated[0]) and float(reward[0]) == 1.0 and bool(info[keys.SUCCESS][0])
    distance = float(info["final_obs"][keys.PRIVILEGED][0, 3]) * kin.REACH  # privileged row 3: distance / REACH
    assert distance < 2 * env.config.success_radius, distance
    assert not torch.equal(obs[keys.STATE], info["final_obs"][keys.STATE])  # a new episode began

    with pytest.raises(ValueError, match="num_envs=1"):
        ClassifierReward(registry.build("env", "arm_reach", {}, num_envs=2), loaded)


def test_cli_trains_a_classifier_and_a_session_uses_it(store, ckpt, tmp_path, capsys):
    from embodied.cli import classifier_cmd, correct_cmd

    assert classifier_cmd([str(store), "--out", str(tmp_path / "clf"), "--updates", "300", "--state-indices", "23,24,25"]) == 0
    assert "val_recall" in capsys.readouterr().out
    assert classifier_cmd([str(tmp_path / "nowhere"), "--out", str(tmp_path / "x")]) == 1
    assert "no episode store" in capsys.readouterr().err
    code = correct_cmd([str(ckpt), "robot=sim", "teleop=scripted", "--episodes", "2", "--steps", "40", "--store",
                        str(tmp_path / "session"), "--reward-classifier", str(tmp_path / "clf"), "--no-status"])
    assert code == 0, capsys.readouterr().err
    assert correct_cmd([str(ckpt), "robot=sim", "--reward-classifier", str(tmp_path / "none"), "--no-status"]) == 1
    assert "no reward classifier" in capsys.readouterr().err


@pytest.mark.parametrize("how", [["--operator", "scripted", "--num-envs", "30"], ["--teleop", "scripted"]])
def test_a_recorded_store_trains_the_classifier(how, tmp_path, capsys):
    """`embodied record` stores: without a `label` column (--operator, --policy) each episode's `success` labels it;
    --teleop writes `label` (the sim's outcome here). A 20-step limit leaves the expert short of some balls, so both
    outcomes are there."""
    from embodied.cli import classifier_cmd, record_cmd

    store = tmp_path / "recorded.zarr"
    assert record_cmd(["env=arm_reach", "env.max_episode_steps=20", *how, "--episodes", "30",
                       "--store", str(store)]) == 0  # fmt: skip
    with EpisodeStore(store) as reader:
        assert ("label" in reader.keys) == ("--teleop" in how)
        frames, labels, episode = labelled_frames(reader, success_frames=3)
        outcome = [bool(reader.episode(i)[keys.SUCCESS][-1]) for i in range(reader.num_episodes)]
    assert 0 < sum(outcome) < 30 and int(labels.sum()) == 3 * sum(outcome)
    assert set(episode.tolist()) == set(range(30))  # every episode has an outcome: none left out
    capsys.readouterr()
    assert classifier_cmd([str(store), "--out", str(tmp_path / "clf"), "--updates", "100", "--success-frames", "3",
                           "--state-indices", "23,24,25"]) == 0  # fmt: skip
    assert "val_recall" in capsys.readouterr().out and (tmp_path / "clf" / "classifier.safetensors").exists()


def test_a_store_without_outcomes_is_refused_naming_what_it_needs(tmp_path):
    with EpisodeStore(tmp_path / "bare.zarr", mode="w") as writer:
        writer.append_episode({"obs/state": np.zeros((3, 26), np.float32), "action": np.zeros((3, 4), np.float32)})
        with pytest.raises(KeyError, match="each episode's outcome"):
            labelled_frames(writer)
