"""One contract suite, run against every registered environment."""

import pytest
import torch

from embodied import keys, registry
from embodied.envs import VecEnv
from embodied.specs import decode_text

N = 8
ENV_NAMES = registry.names("env")


def make(name: str, num_envs: int = N) -> VecEnv:
    try:
        return registry.build("env", name, {}, num_envs=num_envs, device="cpu")
    except registry.MissingExtraError as err:
        pytest.skip(str(err))


def random_actions(env: VecEnv, gen: torch.Generator) -> torch.Tensor:
    spec = env.action_spec
    return torch.rand((env.num_envs, *spec.shape), generator=gen) * (spec.high - spec.low) + spec.low


def check_obs(env: VecEnv, obs) -> None:
    assert obs.batch_size == torch.Size([env.num_envs])
    flat = obs.flatten_keys("/")
    assert set(flat.keys()) == set(env.observation_spec), "observation keys must match observation_spec"
    for key, spec in env.observation_spec.items():
        value = flat[key]
        assert value.device == env.device, key
        assert spec.contains(value), f"{key}: {value.dtype} {tuple(value.shape)} outside {spec}"
        if value.dtype.is_floating_point:
            assert torch.isfinite(value).all(), key


@pytest.mark.parametrize("name", ENV_NAMES)
def test_specs_and_step_shapes(name):
    env = make(name)
    assert isinstance(env, VecEnv) and env.num_envs == N and env.max_episode_steps >= 1
    assert keys.STATE in env.observation_spec
    obs = env.reset(seed=0)
    check_obs(env, obs)
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        obs, reward, terminated, truncated, info = env.step(random_actions(env, gen))
        check_obs(env, obs)
        assert reward.shape == (N,) and reward.dtype == torch.float32 and torch.isfinite(reward).all()
        assert terminated.shape == (N,) and terminated.dtype == torch.bool
        assert truncated.shape == (N,) and truncated.dtype == torch.bool
        assert info[keys.SUCCESS].shape == (N,) and info[keys.SUCCESS].dtype == torch.bool
        check_obs(env, info["final_obs"])


@pytest.mark.parametrize("name", ENV_NAMES)
def test_seeding_is_deterministic(name):
    a, b = make(name), make(name)
    oa, ob = a.reset(seed=123), b.reset(seed=123)
    assert (oa == ob).all()
    gen = torch.Generator().manual_seed(1)
    for _ in range(10):
        action = random_actions(a, gen)
        ra, rb = a.step(action), b.step(action)
        assert (ra[0] == rb[0]).all() and torch.equal(ra[1], rb[1])
    other = make(name).reset(seed=124)
    assert not torch.equal(other[keys.STATE], make(name).reset(seed=123)[keys.STATE])


@pytest.mark.parametrize("name", ENV_NAMES)
def test_time_limit_truncates_and_auto_resets(name):
    env = make(name)
    env.reset(seed=0)
    zero = torch.zeros((N, *env.action_spec.shape))
    ended = torch.zeros(N, dtype=torch.bool)
    for t in range(1, env.max_episode_steps + 1):
        obs, _, terminated, truncated, info = env.step(zero)
        assert not (terminated & truncated).any(), "an env is either terminated or truncated, never both"
        if t < env.max_episode_steps:
            assert not (truncated & ~ended).any(), f"truncated early at step {t}"
        done = terminated | truncated
        if done.any():
            # the returned obs is the reset one; the final one differs and is in info
            final, fresh = info["final_obs"][keys.STATE][done], obs[keys.STATE][done]
            assert not torch.equal(final, fresh)
        ended |= done
    assert ended.all(), "every episode must end by max_episode_steps"


@pytest.mark.parametrize("name", ENV_NAMES)
def test_snapshot_restore_is_exact(name):
    env = make(name)
    env.reset(seed=5)
    gen = torch.Generator().manual_seed(2)
    for _ in range(3):
        env.step(random_actions(env, gen))
    snapshot = {k: v.clone() for k, v in env.get_state().items()}
    actions = [random_actions(env, gen) for _ in range(env.max_episode_steps // 2 + 5)]
    first = [env.step(a) for a in actions]
    env.set_state(snapshot)
    for a, (obs, reward, terminated, truncated, _) in zip(actions, first):
        obs2, reward2, terminated2, truncated2, _ = env.step(a)
        assert (obs2 == obs).all() and torch.equal(reward2, reward)
        assert torch.equal(terminated2, terminated) and torch.equal(truncated2, truncated)


@pytest.mark.parametrize("name", ENV_NAMES)
def test_language_field(name):
    env = make(name)
    if keys.LANGUAGE not in env.observation_spec:
        pytest.skip(f"{name} has no language instruction")
    texts = decode_text(env.reset(seed=0)[keys.LANGUAGE])
    assert len(texts) == N and all(isinstance(t, str) and len(t) > 3 for t in texts)


@pytest.mark.parametrize("name", ENV_NAMES)
@pytest.mark.gpu
def test_runs_on_cuda(name):
    env = registry.build("env", name, {}, num_envs=N, device="cuda")
    obs = env.reset(seed=0)
    check_obs(env, obs)
    out = env.step(torch.zeros((N, *env.action_spec.shape), device="cuda"))
    assert out[1].device.type == "cuda"
