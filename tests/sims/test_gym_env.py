"""GymEnv: any gymnasium id behind the VecEnv contract (the contract suite runs it too, on Pendulum and HalfCheetah)."""

from __future__ import annotations

import textwrap

import gymnasium
import numpy as np
import pytest
import torch

from embodied import keys, registry
from embodied.config import ConfigError
from sims.gym import GymEnv
from sims.gym.env import action_mapping

# a user's own env, registered by its module: Dict observations with a camera, a [0, 2] action box,
# termination at the time limit's step, and an is_success entry
USER_MODULE = """
import gymnasium
import numpy as np
from gymnasium import spaces

class Drift(gymnasium.Env):
    def __init__(self, horizon=7):
        self.horizon = horizon
        self.observation_space = spaces.Dict({
            "pos": spaces.Box(-np.inf, np.inf, (2,), np.float64),
            "camera": spaces.Box(0, 255, (16, 16, 3), np.uint8),
            "goal": spaces.Box(-1.0, 1.0, (1,), np.float32),
        })
        self.action_space = spaces.Box(0.0, 2.0, (2,), np.float32)

    def _obs(self):
        camera = np.full((16, 16, 3), self.t, np.uint8)
        return {"pos": self.pos.copy(), "camera": camera, "goal": self.goal.copy()}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos, self.t = self.np_random.uniform(-1, 1, 2), 0
        self.goal = self.np_random.uniform(-1, 1, 1).astype(np.float32)
        return self._obs(), {}

    def step(self, action):
        self.pos = self.pos + action
        self.t += 1
        done = self.t >= self.horizon
        return self._obs(), float(action.sum()), done, False, {"is_success": done}

gymnasium.register(id="Drift-v0", entry_point=f"{__name__}:Drift", max_episode_steps=7)
"""


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "embodied_test_drift.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "embodied_test_drift"


def make(env_id: str, n: int = 3, **config) -> GymEnv:
    return GymEnv(GymEnv.Config(id=env_id, **config), num_envs=n)


def test_pendulum_shapes_dtypes_and_action_bounds():
    env = registry.build("env", "gym", {"id": "Pendulum-v1"}, num_envs=3)
    assert env.observation_spec[keys.STATE].shape == (3,) and env.max_episode_steps == 200
    assert (env.action_spec.shape, env.action_spec.low, env.action_spec.high) == ((1,), -1.0, 1.0)
    obs, _ = env.reset(seed=0)
    assert obs[keys.STATE].shape == (3, 3) and obs[keys.STATE].dtype == torch.float32
    obs, reward, terminated, truncated, info = env.step(np.zeros((3, 1), np.float32))  # numpy actions too
    assert reward.dtype == torch.float32 and reward.shape == (3,)
    assert terminated.dtype == truncated.dtype == info[keys.SUCCESS].dtype == torch.bool
    assert not info[keys.SUCCESS].any() and info["final_obs"] is obs
    env.close()


def test_actions_map_from_unit_box_onto_the_bounds_after_clipping():
    spec, to_gym = action_mapping(gymnasium.spaces.Box(np.array([-2, 0], np.float32), np.array([2, 10], np.float32)))
    assert (spec.low, spec.high) == (-1.0, 1.0)
    out = to_gym(torch.tensor([[1.0, -1.0], [-3.0, 0.0]]))
    np.testing.assert_allclose(out, [[2.0, 0.0], [-2.0, 5.0]])
    spec, to_gym = action_mapping(gymnasium.spaces.Box(-np.inf, np.inf, (2,)))  # unbounded: passed through
    assert spec.low is None and np.allclose(to_gym(torch.tensor([[5.0, -7.0]])), [[5.0, -7.0]])


def test_seeded_determinism():
    def rollout(env, seed):
        gen = torch.Generator().manual_seed(0)
        out = [env.reset(seed=seed)[0][keys.STATE]]
        for _ in range(20):
            obs, reward, *_ = env.step(torch.rand(env.num_envs, 1, generator=gen) * 2 - 1)
            out += [obs[keys.STATE], reward]
        return out

    a, b = make("Pendulum-v1"), make("Pendulum-v1")
    first = rollout(a, 7)
    assert all(torch.equal(x, y) for x, y in zip(first, rollout(b, 7)))
    assert all(torch.equal(x, y) for x, y in zip(first, rollout(a, 7)))
    assert not torch.equal(rollout(a, 8)[0], first[0])


def test_time_limit_truncates_and_final_obs_is_the_last_one():
    """With a 5-step limit, final_obs at step 5 is what a 10-step env observes at step 5; obs is a fresh start."""
    short, long = make("Pendulum-v1", max_episode_steps=5), make("Pendulum-v1", max_episode_steps=10)
    assert short.max_episode_steps == 5
    short.reset(seed=3), long.reset(seed=3)
    action = torch.full((3, 1), 0.5)
    for t in range(1, 6):
        obs, _, terminated, truncated, info = short.step(action)
        long_obs = long.step(action)[0]
        assert not terminated.any() and truncated.all() == (t == 5) and torch.equal(info["_final_obs"], truncated)
    assert torch.equal(info["final_obs"][keys.STATE], long_obs[keys.STATE])
    assert not torch.equal(obs[keys.STATE], long_obs[keys.STATE])


def test_sync_and_async_give_the_same_trajectory():
    def rollout(env):
        out = [env.reset(seed=11)[0][keys.STATE]]
        for t in range(12):
            obs, reward, _, truncated, info = env.step(torch.full((2, 1), (t % 5 - 2) / 2))
            out += [obs[keys.STATE], reward, truncated, info["final_obs"][keys.STATE]]
        env.close()
        return out

    sync = rollout(make("Pendulum-v1", 2, max_episode_steps=5))
    asynchronous = rollout(make("Pendulum-v1", 2, max_episode_steps=5, vectorization="async"))
    assert all(torch.equal(x, y) for x, y in zip(sync, asynchronous))


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_user_env_from_module_id(user_module, vectorization):
    """"module:Id" imports the module (which registers Id) first; Dict observations map to state + images."""
    env = make(f"{user_module}:Drift-v0", 2, vectorization=vectorization)
    # Dict keys sorted by gymnasium: camera -> image; goal [1] then pos [2] -> state [3]
    assert set(env.observation_spec) == {keys.STATE, f"{keys.IMAGES}/camera"}
    assert env.observation_spec[keys.STATE].shape == (3,)
    assert env.observation_spec[f"{keys.IMAGES}/camera"].shape == (16, 16, 3)
    obs, _ = env.reset(seed=0)
    start = obs[keys.STATE][:, 1:].clone()
    action = torch.tensor([[-1.0, 1.0], [0.0, 0.0]])  # -> [0, 2] and [1, 1] in the env's box
    for t in range(1, 8):
        obs, reward, terminated, truncated, info = env.step(action)
        assert torch.allclose(reward, torch.tensor([2.0, 2.0]))
        # the 7th step ends by the env's own termination and by the time limit: terminated only
        assert terminated.all() == (t == 7) and not truncated.any() and torch.equal(info[keys.SUCCESS], terminated)
    final = info["final_obs"]
    moved = 7 * torch.tensor([[0.0, 2.0], [1.0, 1.0]])  # 7 steps of the mapped actions
    assert torch.allclose(final[keys.STATE][:, 1:], start + moved, atol=1e-5)
    assert (final[keys.IMAGES]["camera"] == 7).all() and (obs[keys.IMAGES]["camera"] == 0).all()
    env.close()


def test_discrete_actions_are_refused_by_name():
    with pytest.raises(ConfigError, match=r"CartPole-v1.*Discrete\(2\).*Gaussian"):
        make("CartPole-v1")


def test_unsupported_observation_space_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"observation is Discrete\(16\)"):
        make("FrozenLake-v1")


def test_unknown_or_empty_id_lists_close_matches():
    with pytest.raises(ConfigError, match=r"Pendulm-v1.*close matches: Pendulum-v1.*pprint_registry"):
        make("Pendulm-v1")
    with pytest.raises(ConfigError, match=r"env.id is empty.*pprint_registry"):
        make("")
    with pytest.raises(ConfigError, match=r"cannot import module 'no_such_module'"):
        make("no_such_module:Foo-v0")
    with pytest.raises(ConfigError, match=r"env.kwargs=\{'gravity': 3\}.*gravity"):
        make("Pendulum-v1", kwargs={"gravity": 3})
    with pytest.raises(ConfigError, match="vectorization"):
        GymEnv.Config(id="Pendulum-v1", vectorization="ray")


def test_snapshots_are_refused_clearly():
    env = make("Pendulum-v1", 1)
    with pytest.raises(NotImplementedError, match="does not support snapshots"):
        env.get_state()
