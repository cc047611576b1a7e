"""One contract suite, run against every registered environment and the adapters' fake-backed cases.

Cases: every registry env with its default config, plus variants the defaults
do not reach (ManiSkill with RGB cameras, and the Isaac Gym / Isaac Lab
adapters over the fakes in `embodied.testing`). Built envs are cached per
module (every test starts with a seeded reset), since ManiSkill's scenes take
about a second each to build.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch

from embodied import keys, registry
from embodied.envs import VecEnv
from embodied.gym_view import GymView
from embodied.specs import decode_text

N = 8
# ManiSkill's CPU backend simulates one PhysX scene per env, stepped in turn (~5 ms each): 2 keep the suite fast
NUM_ENVS = {"maniskill": 2, "maniskill[rgb]": 1}


def _registered(name: str) -> Callable[[int, str], VecEnv]:
    return lambda n, device: registry.build("env", name, {}, num_envs=n, device=device)


def _maniskill_rgb(n: int, device: str) -> VecEnv:
    return registry.build("env", "maniskill", {"obs_mode": "rgb", "image_size": 64}, num_envs=n, device=device)


def _isaacgym_fake(n: int, device: str) -> VecEnv:
    from embodied.testing.fake_isaacgym import FakeCartpoleTask, cartpole_config
    from sims.isaacgym.env import IsaacGymEnv

    config = cartpole_config(n, max_episode_length=60, num_states=5)
    task = FakeCartpoleTask(config, rl_device=device, sim_device=device)
    return IsaacGymEnv.from_task(task, IsaacGymEnv.Config(instruction="balance the pole"))


def _isaaclab_fake(cls_name: str) -> Callable[[int, str], VecEnv]:
    def build(n: int, device: str) -> VecEnv:
        from embodied.testing import fake_isaaclab
        from sims.isaaclab import IsaacLabEnv

        cfg = fake_isaaclab.FakeEnvCfg(num_envs=n, device=device, episode_length_s=1.0, asymmetric=True)
        return IsaacLabEnv.from_env(getattr(fake_isaaclab, cls_name)(cfg))

    return build


CASES: dict[str, Callable[[int, str], VecEnv]] = {name: _registered(name) for name in registry.names("env")}
CASES |= {
    "maniskill[rgb]": _maniskill_rgb,
    "isaacgym[fake cartpole]": _isaacgym_fake,
    "isaaclab[fake direct cartpole]": _isaaclab_fake("FakeCartpoleDirectEnv"),
    "isaaclab[fake manager-based cartpole]": _isaaclab_fake("FakeManagerBasedRLEnv"),
}
_cache: dict[tuple, VecEnv] = {}


def make(case: str, num_envs: int | None = None, copy: int = 0) -> VecEnv:
    """The cached env of `case` (copy > 0: another instance), or skip when its backend is missing."""
    n = num_envs or NUM_ENVS.get(case, N)
    key = (case, n, copy)
    if key not in _cache:
        try:
            _cache[key] = CASES[case](n, "cpu")
        except registry.MissingExtraError as err:
            pytest.skip(str(err))
    return _cache[key]


def random_actions(env: VecEnv, gen: torch.Generator) -> torch.Tensor:
    spec = env.action_spec
    shape = (env.num_envs, *spec.shape)
    if spec.low is None or spec.high is None:  # unbounded (Isaac Lab): unit-scale actions
        return torch.randn(shape, generator=gen).clamp(-3, 3).to(env.device)
    return (torch.rand(shape, generator=gen) * (spec.high - spec.low) + spec.low).to(env.device)


def autoreset_mode(env: VecEnv) -> str:
    """"same_step" (the contract) or "next_step" (Isaac Gym, which resets during the following step)."""
    return getattr(env, "autoreset_mode", "same_step")


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


def check_step(env: VecEnv, out) -> None:
    obs, reward, terminated, truncated, info = out
    n = env.num_envs
    check_obs(env, obs)
    check_obs(env, info["final_obs"])
    for name, value, dtype in (("reward", reward, torch.float32), ("terminated", terminated, torch.bool),
                               ("truncated", truncated, torch.bool), ("success", info[keys.SUCCESS], torch.bool)):
        assert value.shape == (n,) and value.dtype == dtype, f"{name}: {value.dtype} {tuple(value.shape)}"
        assert value.device == env.device, f"{name} on {value.device}, env on {env.device}"
    assert torch.isfinite(reward).all()
    assert not (terminated & truncated).any(), "an env is either terminated or truncated, never both"


@pytest.mark.parametrize("name", CASES)
def test_specs_and_step_shapes(name):
    env = make(name)
    assert isinstance(env, VecEnv) and env.max_episode_steps >= 1
    assert env.num_envs == NUM_ENVS.get(name, N)
    assert keys.STATE in env.observation_spec
    assert env.action_spec.dtype == torch.float32 and len(env.action_spec.shape) >= 1
    for key, spec in env.observation_spec.items():
        assert spec.dtype in (torch.float32, torch.uint8), f"{key}: observations are float32 or uint8"
        assert spec.to_gym().shape == spec.shape
    obs = env.reset(seed=0)
    check_obs(env, obs)
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        check_step(env, env.step(random_actions(env, gen)))


@pytest.mark.parametrize("name", CASES)
def test_seeding_is_deterministic(name):
    """Same seed and actions -> same trajectory, on a second instance and on the same one again."""
    a, b = make(name), make(name, copy=1)

    def rollout(env, seed):
        gen = torch.Generator().manual_seed(1)
        out = [env.reset(seed=seed)]
        for _ in range(10):
            obs, reward, terminated, truncated, _ = env.step(random_actions(env, gen))
            out += [obs, reward, terminated, truncated]
        return out

    first = rollout(a, 123)
    for again in (rollout(b, 123), rollout(a, 123)):
        for x, y in zip(first, again):
            assert (x == y).all()
    assert not torch.equal(rollout(a, 124)[0][keys.STATE], first[0][keys.STATE])


@pytest.mark.parametrize("name", CASES)
def test_time_limit_truncates_and_auto_resets(name):
    env = make(name)
    n = env.num_envs
    env.reset(seed=0)
    zero = torch.zeros((n, *env.action_spec.shape), device=env.device)
    ended = torch.zeros(n, dtype=torch.bool, device=env.device)
    just_done = torch.zeros_like(ended)
    slack = getattr(env, "time_limit_slack", 0)  # Isaac Lab: a task may time out one step early
    for t in range(1, env.max_episode_steps + 1):
        obs, _, terminated, truncated, info = env.step(zero)
        assert not (terminated & truncated).any(), "an env is either terminated or truncated, never both"
        if t < env.max_episode_steps - slack:
            assert not (truncated & ~ended).any(), f"truncated early at step {t}"
        done = terminated | truncated
        final, fresh = info["final_obs"][keys.STATE], obs[keys.STATE]
        # rows of envs that did not finish hold their current observation
        assert torch.equal(final[~done], fresh[~done])
        if autoreset_mode(env) == "same_step":
            if done.any():  # the returned obs is the reset one; the final one differs and is in info
                assert not torch.equal(final[done], fresh[done])
        else:  # next_step: the final obs is returned as is; the reset comes with the next step
            assert torch.equal(final[done], fresh[done])
            assert torch.equal(info["autoreset"], just_done)
            just_done = done
        ended |= done
    assert ended.all(), "every episode must end by max_episode_steps"


@pytest.mark.parametrize("name", CASES)
def test_snapshot_restore_is_exact(name):
    env = make(name)
    env.reset(seed=5)
    gen = torch.Generator().manual_seed(2)
    for _ in range(3):
        env.step(random_actions(env, gen))
    try:
        snapshot = {k: v.clone() for k, v in env.get_state().items()}
    except NotImplementedError as err:
        pytest.skip(str(err))
    actions = [random_actions(env, gen) for _ in range(env.max_episode_steps // 2 + 5)]
    first = [env.step(a) for a in actions]
    env.set_state(snapshot)
    for a, (obs, reward, terminated, truncated, _) in zip(actions, first):
        obs2, reward2, terminated2, truncated2, _ = env.step(a)
        assert (obs2 == obs).all() and torch.equal(reward2, reward)
        assert torch.equal(terminated2, terminated) and torch.equal(truncated2, truncated)


@pytest.mark.parametrize("name", CASES)
def test_language_field(name):
    env = make(name)
    if keys.LANGUAGE not in env.observation_spec:
        pytest.skip(f"{name} has no language instruction")
    texts = decode_text(env.reset(seed=0)[keys.LANGUAGE])
    assert len(texts) == env.num_envs and all(isinstance(t, str) and len(t) > 3 for t in texts)


@pytest.mark.parametrize("name", CASES)
def test_image_layout(name):
    env = make(name)
    cameras = [k for k in env.observation_spec if k.startswith(f"{keys.IMAGES}/")]
    if not cameras:
        pytest.skip(f"{name} has no cameras")
    flat = env.reset(seed=0).flatten_keys("/")
    for key in cameras:
        spec, image = env.observation_spec[key], flat[key]
        assert spec.dtype == torch.uint8 and len(spec.shape) == 3 and spec.shape[-1] == 3, f"{key}: [H, W, 3] uint8"
        assert min(spec.shape[:2]) >= 16, f"{key}: {spec.shape}"
        assert image.shape == (env.num_envs, *spec.shape)
        assert image.float().std(dim=(1, 2)).min() > 1.0, f"{key}: a blank frame, nothing was rendered"


@pytest.mark.parametrize("name", CASES)
def test_single_env_view_passes_gymnasium_check_env(name):
    from gymnasium.utils.env_checker import check_env

    try:  # a fresh env, not the cached one: check_env closes what it checks
        env = CASES[name](1, "cpu")
    except registry.MissingExtraError as err:
        pytest.skip(str(err))
    view = GymView(env)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # check_env warns about unbounded Boxes and the like; errors still raise
        check_env(view, skip_render_check=True)
    obs, _ = view.reset(seed=0)
    assert view.observation_space.contains(obs)


@pytest.mark.parametrize("name", CASES)
@pytest.mark.gpu
def test_runs_on_cuda(name):
    try:
        env = CASES[name](NUM_ENVS.get(name, N), "cuda")
    except registry.MissingExtraError as err:
        pytest.skip(str(err))
    obs = env.reset(seed=0)
    check_obs(env, obs)
    out = env.step(torch.zeros((env.num_envs, *env.action_spec.shape), device="cuda"))
    check_step(env, out)
    assert out[1].device.type == "cuda"
