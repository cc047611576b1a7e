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

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space
from gymnasium.wrappers.vector import NormalizeReward, RecordEpisodeStatistics, RecordVideo

from embodied import keys, registry
from embodied.envs import VecEnv
from embodied.gym_view import GymView, NumpyView
from embodied.specs import decode_text

N = 8
# ManiSkill's CPU backend simulates one PhysX scene per env, stepped in turn (~5 ms each): 2 keep the suite fast
NUM_ENVS = {"maniskill": 2, "maniskill[rgb]": 1}


def _registered(name: str) -> Callable[[int, str], VecEnv]:
    return lambda n, device: registry.build("env", name, {}, num_envs=n, device=device)


def _mujoco_cameras(n: int, device: str) -> VecEnv:
    return registry.build("env", "mujoco_reach", {"cameras": ["front", "side"], "image_size": 32}, num_envs=n, device=device)


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


def _gym(env_id: str) -> Callable[[int, str], VecEnv]:
    return lambda n, device: registry.build("env", "gym", {"id": env_id}, num_envs=n, device=device)


# env=gym has no task without an id (its default Config): its cases name gymnasium ids below
CASES: dict[str, Callable[[int, str], VecEnv]] = {
    name: _registered(name) for name in registry.names("env", text=False) if name != "gym"
}
CASES |= {
    "gym[Pendulum-v1]": _gym("Pendulum-v1"),
    "gym[HalfCheetah-v5]": _gym("HalfCheetah-v5"),
    "maniskill[rgb]": _maniskill_rgb,
    "mujoco_reach[cameras]": _mujoco_cameras,
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
    return {"SameStep": "same_step", "NextStep": "next_step"}[env.metadata["autoreset_mode"].value]


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
    obs, _ = env.reset(seed=0)
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
        out = [env.reset(seed=seed)[0]]
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
    texts = decode_text(env.reset(seed=0)[0][keys.LANGUAGE])
    assert len(texts) == env.num_envs and all(isinstance(t, str) and len(t) > 3 for t in texts)


@pytest.mark.parametrize("name", CASES)
def test_image_layout(name):
    env = make(name)
    cameras = [k for k in env.observation_spec if k.startswith(f"{keys.IMAGES}/")]
    if not cameras:
        pytest.skip(f"{name} has no cameras")
    flat = env.reset(seed=0)[0].flatten_keys("/")
    for key in cameras:
        spec, image = env.observation_spec[key], flat[key]
        assert spec.dtype == torch.uint8 and len(spec.shape) == 3 and spec.shape[-1] == 3, f"{key}: [H, W, 3] uint8"
        assert min(spec.shape[:2]) >= 16, f"{key}: {spec.shape}"
        assert image.shape == (env.num_envs, *spec.shape)
        assert image.float().std(dim=(1, 2)).min() > 1.0, f"{key}: a blank frame, nothing was rendered"


# Cases with spaces no finite bound holds, and why: for these gymnasium's check_env may warn that a Box is infinite
# (for actions: also that the space is not normalized); any other warning fails the test. Every bound an env does
# declare is held on every step (check_obs: spec.contains).
UNBOUNDED = {
    # a free body's position and velocities: the crash limits hold only until the step that crosses them
    **dict.fromkeys(["quadrotor_hover", "quadrotor_waypoint"], ("observation",)),
    # joint velocities and the free cube's position
    **dict.fromkeys(["mujoco_reach", "mujoco_push", "mujoco_pick", "mujoco_reach[cameras]"], ("observation",)),
    # joint velocities and object poses, which ManiSkill declares unbounded
    **dict.fromkeys(["maniskill", "maniskill[rgb]"], ("observation",)),
    "gym[HalfCheetah-v5]": ("observation",),  # gymnasium declares HalfCheetah's observation (velocities) unbounded
    # Isaac Lab declares observations unbounded, and actions too (clip_actions=0 passes them through)
    "isaaclab[fake direct cartpole]": ("observation", "action"),
    "isaaclab[fake manager-based cartpole]": ("observation", "action"),
}


def _unexpected_warnings(caught: list[warnings.WarningMessage], unbounded: tuple[str, ...]) -> list[str]:
    out = []
    for w in caught:
        text = str(w.message)
        infinite = next((s for s in ("observation", "action") if f"A Box {s} space m" in text and "infinity" in text),
                        None)  # fmt: skip
        if infinite in unbounded or ("symmetric and normalized space" in text and "action" in unbounded):
            continue
        if issubclass(w.category, DeprecationWarning) and "/mani_skill/" in w.filename:
            continue  # ManiSkill 3.0.1's own code under NumPy 2: not ours to fix
        out.append(f"{w.category.__name__}: {text} ({w.filename}:{w.lineno})")
    return out


@pytest.mark.parametrize("name", CASES)
def test_single_env_view_passes_gymnasium_check_env(name):
    """check_env (its render check too, on camera envs) warns about nothing but UNBOUNDED's spaces; `privileged`
    enters the view only when asked for."""
    from gymnasium.utils.env_checker import check_env
    from gymnasium.utils.passive_env_checker import env_render_passive_checker

    try:  # a fresh env, not the cached one: check_env closes what it checks
        env = CASES[name](1, "cpu")
    except registry.MissingExtraError as err:
        pytest.skip(str(err))
    views = [GymView(env)] + ([GymView(env, privileged=True)] if keys.PRIVILEGED in env.observation_spec else [])
    for view in views:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # check_env's render check also remakes the env from its registered spec, which a view has not (and
            # warns so): its render part runs alone below
            check_env(view, skip_render_check=True)
            if view.render_mode is not None:
                env_render_passive_checker(view)
        unexpected = _unexpected_warnings(caught, UNBOUNDED.get(name, ()))
        assert not unexpected, "\n".join(unexpected)
        obs, _ = view.reset(seed=0)
        assert view.observation_space.contains(obs) and set(obs) == set(view.observation_space.spaces)
    assert keys.PRIVILEGED not in views[0].observation_space.spaces
    assert all(keys.PRIVILEGED in view.observation_space.spaces for view in views[1:])


@pytest.mark.parametrize("name", CASES)
@pytest.mark.gpu
def test_runs_on_cuda(name):
    try:
        env = CASES[name](NUM_ENVS.get(name, N), "cuda")
    except registry.MissingExtraError as err:
        pytest.skip(str(err))
    obs, _ = env.reset(seed=0)
    check_obs(env, obs)
    out = env.step(torch.zeros((env.num_envs, *env.action_spec.shape), device="cuda"))
    check_step(env, out)
    assert out[1].device.type == "cuda"


# --- gymnasium's vector API: the same object a gymnasium, ManiSkill3 or Isaac Lab user expects ------------------
@pytest.mark.parametrize("name", CASES)
def test_is_a_gymnasium_vector_env(name):
    env = make(name)
    assert isinstance(env, gymnasium.vector.VectorEnv)
    assert isinstance(env.metadata["autoreset_mode"], AutoresetMode)
    assert env.observation_space == batch_space(env.single_observation_space, env.num_envs)
    assert env.action_space == batch_space(env.single_action_space, env.num_envs)
    obs, info = env.reset(seed=0, options=None)
    assert isinstance(info, dict)
    assert env.observation_space.contains(obs.cpu().numpy()), "the reset observation lies outside observation_space"
    env.action_space.seed(0)
    obs, _, terminated, truncated, info = env.step(env.action_space.sample())  # numpy actions, as gymnasium's users send
    assert env.observation_space.contains(obs.cpu().numpy())
    assert torch.equal(info["_final_obs"], terminated | truncated)
    with pytest.raises(ValueError, match="unknown options"):
        env.reset(seed=0, options={"no_such_option": 1})


@pytest.mark.parametrize("name", CASES)
def test_numpy_and_torch_actions_step_alike(name):
    env = make(name)
    gen = torch.Generator().manual_seed(3)
    actions = [random_actions(env, gen) for _ in range(4)]
    runs = []
    for to_numpy in (False, True):
        env.reset(seed=4)
        runs.append([env.step(a.cpu().numpy() if to_numpy else a)[:2] for a in actions])
    for (obs, reward), (obs2, reward2) in zip(*runs):
        assert (obs == obs2).all() and torch.equal(reward, reward2)


@pytest.mark.parametrize("name", CASES)
def test_gymnasium_vector_wrappers_run_on_it(name):
    """gymnasium's own episode statistics (checked against our sums) and reward normalisation, through NumpyView
    (gymnasium's wrappers compute in numpy). Its observation wrappers refuse any same-step autoreset env, gymnasium's
    own SyncVectorEnv included; our policies normalise observations themselves."""
    env = make(name)
    stats = RecordEpisodeStatistics(NumpyView(env))
    stats.reset(seed=0)
    zero = np.zeros((env.num_envs, *env.action_spec.shape), np.float32)
    returns = np.zeros(env.num_envs)
    resetting = np.zeros(env.num_envs, bool)  # next-step autoreset: that step only resets the env
    episodes = 0
    for _ in range(env.max_episode_steps + 2):
        obs, reward, terminated, truncated, info = stats.step(zero)
        assert env.observation_space.contains(obs) and reward.dtype == np.float32
        done = terminated | truncated
        returns = np.where(resetting, 0.0, returns + reward)
        if "episode" in info:
            assert np.array_equal(info["_episode"], done)
            np.testing.assert_allclose(info["episode"]["r"][done], returns[done], rtol=1e-5)
            episodes += int(done.sum())
        if autoreset_mode(env) == "same_step":
            assert np.array_equal(info["_final_obs"], done) and env.observation_space.contains(info["final_obs"])
            returns[done] = 0.0
        else:
            resetting = done
    assert episodes >= env.num_envs

    normalized = NormalizeReward(RecordEpisodeStatistics(NumpyView(env)))
    normalized.reset(seed=0)
    for _ in range(5):
        assert np.isfinite(normalized.step(zero)[1]).all()


@pytest.mark.parametrize("name", CASES)
def test_gymnasium_records_video_of_camera_envs(name, tmp_path):
    env = make(name)
    if env.render_mode is None:
        pytest.skip(f"{name} has no camera to record")
    pytest.importorskip("moviepy", reason="gymnasium's RecordVideo needs moviepy (the dev extra installs it)")
    recorder = RecordVideo(env, str(tmp_path / "videos"), step_trigger=lambda step: step == 0, video_length=6)
    recorder.reset(seed=0)
    for _ in range(8):
        recorder.step(np.zeros((env.num_envs, *env.action_spec.shape), np.float32))
    recorder.close()
    videos = list((tmp_path / "videos").glob("*.mp4"))
    assert len(videos) == 1 and videos[0].stat().st_size > 1000
