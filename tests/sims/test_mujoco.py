"""The batched MuJoCo Panda tasks: kinematics, stepping, snapshots, success logic, cameras, randomization."""

import math
import threading

import numpy as np
import pytest
import torch

pytest.importorskip("sims.mujoco")  # imports mujoco after setting MUJOCO_GL=egl; skips where mujoco is missing
from sims.mujoco import MujocoPickEnv, MujocoPushEnv, MujocoReachEnv, kinematics, scene  # noqa: E402

import mujoco  # noqa: E402

from embodied.config import ConfigError  # noqa: E402
from embodied.specs import decode_text  # noqa: E402
from sims.mujoco.physics import make_stepper  # noqa: E402
from embodied import keys  # noqa: E402

# m: a frame's depth moves by up to ~1.3e-5 m (float32 rounding of the rasterizer's z) with where in a GL buffer it
# is drawn (sims/mujoco/render.py's tiles)
DEPTH_ROUNDING = 1e-4
from embodied.data.record import collect_episodes  # noqa: E402


def run_expert(env, seed=0):
    """Success rate of the env's scripted expert (env.expert_action) over one episode per env."""
    episodes = collect_episodes(env, seed=seed)
    return episodes[keys.SUCCESS].any(0).float().mean().item()


def test_kinematics_match_mujoco():
    model = scene.build_model()
    data = mujoco.MjData(model)
    qpos = np.random.default_rng(0).uniform(scene.JOINT_LOWER, scene.JOINT_UPPER, (4, 7))
    frames = kinematics.joint_frames(qpos)
    pos, rot, jac = frames.tcp, frames.rot, kinematics.jacobian(frames)
    site = model.site("tcp").id
    for i in range(4):
        data.qpos[:7] = qpos[i]
        mujoco.mj_kinematics(model, data)
        mujoco.mj_comPos(model, data)
        jp, jr = np.zeros((3, model.nv)), np.zeros((3, model.nv))
        mujoco.mj_jacSite(model, data, jp, jr, site)
        np.testing.assert_allclose(pos[i], data.site_xpos[site], atol=1e-8)
        np.testing.assert_allclose(rot[i].ravel(), data.site_xmat[site], atol=1e-6)
        np.testing.assert_allclose(jac[i], np.concatenate([jp[:, :7], jr[:, :7]]), atol=1e-8)


def test_rollout_and_thread_steppers_agree_bitwise():
    env = MujocoPushEnv(MujocoPushEnv.Config(), num_envs=6)
    env.reset(seed=0)
    ctrl = np.tile(np.r_[scene.HOME_QPOS, 0.0, 0.0], (6, 1)) + np.random.default_rng(1).normal(0, 0.1, (6, 9))
    results = []
    for kind in ("rollout", "threads"):
        stepper = make_stepper(kind, env.model, 2)
        state = env.physics.copy()
        for _ in range(5):
            state, sensors = stepper.step(env.models, state, ctrl, 10)
        results.append((state.copy(), sensors.copy()))
        stepper.close()
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])
    assert not np.array_equal(results[0][0], env.physics), "stepping changed nothing"


def _step_and_send(stepper, env, ctrl, conn) -> None:
    conn.send(stepper.step(env.models, env.physics.copy(), ctrl, 10)[0])


@pytest.mark.parametrize("kind", ["rollout", "threads"])
def test_a_stepper_steps_on_in_a_forked_process(kind):
    """train.collect_ahead steps the envs in a forked worker. A fork copies no threads, so the parent's pool waited
    there forever on workers that were not there; the child now makes a pool of its own, and steps as the parent."""
    import multiprocessing

    env = MujocoPushEnv(MujocoPushEnv.Config(), num_envs=6)
    env.reset(seed=0)
    ctrl = np.tile(np.r_[scene.HOME_QPOS, 0.0, 0.0], (6, 1)) + np.random.default_rng(1).normal(0, 0.1, (6, 9))
    stepper = make_stepper(kind, env.model, 2)
    stepper.step(env.models, env.physics.copy(), ctrl, 10)  # the pool is up and has worked in this process
    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe()
    process = context.Process(target=_step_and_send, args=(stepper, env, ctrl, child), daemon=True)
    process.start()
    try:
        assert parent.poll(120), "the forked process did not step within 120 s (hung on the parent's pool)"
        np.testing.assert_array_equal(parent.recv(), stepper.step(env.models, env.physics.copy(), ctrl, 10)[0])
    finally:
        process.kill()
        stepper.close()


@pytest.mark.parametrize("control, dim", [("ee_delta", 4), ("joint_delta", 8)])
def test_shapes_and_control_modes(control, dim):
    env = MujocoReachEnv(MujocoReachEnv.Config(control=control), num_envs=3)
    obs, _ = env.reset(seed=0)
    assert env.action_spec.shape == (dim,) and obs["state"].shape == (3, 31)
    before = obs["state"][:, 15:18].clone()
    action = torch.zeros(3, dim)
    action[:, 0] = 1.0  # +x in ee_delta; joint 1 (base yaw) in joint_delta
    for t in range(10):  # 4 steps of motion, then the servos settle (they lag ~0.1 s)
        obs, reward, *_ = env.step(action if t < 4 else torch.zeros(3, dim))
    moved = (obs["state"][:, 15:18] - before).norm(dim=-1)
    assert (moved > 0.03).all(), moved
    if control == "ee_delta":  # 4 x 2.5 cm along +x, holding height and the hand pointing down
        delta = obs["state"][:, 15:18] - before
        assert (delta[:, 0] - 0.1).abs().max() < 0.012 and delta[:, 1:].abs().max() < 0.01, delta
    with pytest.raises(ValueError, match="action shape"):
        env.step(torch.zeros(3, dim + 1))


def test_scripted_experts_solve_the_tasks():
    assert run_expert(MujocoReachEnv(MujocoReachEnv.Config(), num_envs=16)) >= 0.95
    assert run_expert(MujocoPushEnv(MujocoPushEnv.Config(), num_envs=8)) >= 0.6
    assert run_expert(MujocoPickEnv(MujocoPickEnv.Config(), num_envs=8)) >= 0.6


def test_success_terminates_with_bonus_and_auto_resets():
    env = MujocoReachEnv(MujocoReachEnv.Config(), num_envs=4)
    obs, _ = env.reset(seed=3)
    env.target[:2] = obs["state"][:2, 15:18].double().numpy()  # targets at the tcp of envs 0, 1
    obs, reward, terminated, truncated, info = env.step(torch.zeros(4, 4))
    assert info["success"].tolist() == [True, True, False, False]
    assert terminated.tolist() == [True, True, False, False] and not truncated.any()
    assert (reward[:2] > 9.0).all() and (reward[2:] < 0).all()
    assert env.steps.tolist() == [0, 0, 1, 1]  # the finished episodes restarted
    final = info["final_obs"]["state"]
    assert (final[:2, 27:30].norm(dim=-1) < 0.03).all() and not torch.equal(final[:2], obs["state"][:2])


def test_sparse_reward_pays_only_success():
    env = MujocoPushEnv(MujocoPushEnv.Config(sparse=True, success_bonus=1.0, action_weight=0.0), num_envs=4)
    env.reset(seed=0)
    for _ in range(3):
        _, reward, _, _, info = env.step(torch.rand(4, 4) * 2 - 1)
        assert torch.equal(reward, info["success"].float())


def test_snapshot_restore_with_randomization_and_cameras():
    cfg = MujocoPickEnv.Config(
        friction_range=(0.5, 1.5), mass_range=(0.5, 2.0), light_range=(0.5, 1.0), camera_jitter=0.02,
        cameras=("front",), image_size=32, max_episode_steps=6,
    )
    env = MujocoPickEnv(cfg, num_envs=3)
    env.reset(seed=1)
    gen = torch.Generator().manual_seed(0)
    snapshot = {k: v.clone() for k, v in env.get_state().items()}
    actions = [torch.rand(3, 4, generator=gen) * 2 - 1 for _ in range(9)]  # crosses an auto-reset
    first = [env.step(a) for a in actions]
    env.set_state(snapshot)
    for a, (obs, reward, terminated, truncated, _) in zip(actions, first):
        obs2, reward2, terminated2, truncated2, _ = env.step(a)
        assert (obs2 == obs).all() and torch.equal(reward2, reward) and torch.equal(truncated2, truncated)


def test_domain_randomization_changes_parameters_and_images():
    cfg = MujocoPushEnv.Config(friction_range=(0.3, 1.5), mass_range=(0.5, 2.0), light_range=(0.3, 1.0),
                               camera_jitter=0.05, cameras=("front",), image_size=32)
    env = MujocoPushEnv(cfg, num_envs=4)
    env.reset(seed=0)
    base = env.model
    frictions = [m.geom_friction[env.cube_geom, 0] for m in env.models]
    masses = [m.body_mass[env.cube_body] for m in env.models]
    assert len(set(frictions)) == 4 and len(set(masses)) == 4
    np.testing.assert_allclose(frictions, base.geom_friction[env.cube_geom, 0] * env.friction)
    np.testing.assert_allclose(masses, base.body_mass[env.cube_body] * env.mass)
    assert 0.3 <= env.friction.min() and env.friction.max() <= 1.5
    # the same physical state drawn under each env's light and camera gives different frames
    env.physics[:] = env.physics[0]
    env.target[:] = env.target[0]
    images = env._observe()["images", "front"].float()
    assert (images[1:] - images[0]).abs().mean(dim=(1, 2, 3)).min() > 1.0


@pytest.mark.parametrize("size", [64, 128])
def test_cameras_render_rgb_and_depth(size):
    env = MujocoReachEnv(MujocoReachEnv.Config(cameras=("front", "wrist"), image_size=size, depth=True), num_envs=2)
    obs, _ = env.reset(seed=0)
    for cam in ("front", "wrist"):
        rgb, depth = obs["images"][cam], obs["depth"][cam]
        assert rgb.shape == (2, size, size, 3) and rgb.dtype == torch.uint8
        assert rgb.float().std(dim=(1, 2, 3)).min() > 10.0, "a flat image"
        assert depth.shape == (2, size, size, 1) and depth.dtype == torch.float32
        assert 0.02 < depth.min() and depth.max() <= 3.0 and depth.std() > 0.01  # metres, clipped at 3
    # the target ball moves in the front image when the target moves
    env.target[0] += (0.0, 0.15, 0.0)
    moved = env._observe()["images"]["front"]
    assert (moved[0].float() - obs["images"]["front"][0].float()).abs().sum() > 100


def test_an_auto_reset_redraws_only_the_reset_envs_and_keeps_the_final_frames(monkeypatch):
    """A step in which some envs end draws each env once more only where it was reset: its frames (rgb and depth)
    are those a full render of the new state draws, and info["final_obs"] keeps the frames before the reset."""
    env = MujocoReachEnv(MujocoReachEnv.Config(cameras=("front", "side"), image_size=32, depth=True,
                                               max_episode_steps=2), num_envs=4)
    env.reset(seed=0)
    env.step(torch.zeros(4, 4))
    env.steps[2:] = 0  # envs 0 and 1 reach the time limit in the next step, 2 and 3 go on
    drawn = []
    render = env.renderer.render
    monkeypatch.setattr(env.renderer, "render", lambda state, *a: drawn.append(len(state)) or render(state, *a))
    obs, _, _, truncated, info = env.step(torch.zeros(4, 4))
    assert truncated.tolist() == [True, True, False, False] and drawn == [4, 2]
    full_rgb, full_depth = render(env.physics, env.target, env.camera, env.light)
    for cam in ("front", "side"):
        assert torch.equal(obs["images", cam], torch.from_numpy(full_rgb[cam]))
        assert torch.equal(obs["depth", cam], torch.from_numpy(full_depth[cam]))
        final = info["final_obs"]["images", cam]
        assert torch.equal(final[2:], obs["images", cam][2:]) and not torch.equal(final[:2], obs["images", cam][:2])


def test_seeding_language_and_bad_config():
    a, b = MujocoPickEnv(MujocoPickEnv.Config(), num_envs=4), MujocoPickEnv(MujocoPickEnv.Config(), num_envs=4)
    assert (a.reset(seed=7)[0] == b.reset(seed=7)[0]).all()
    assert not torch.equal(a.reset(seed=8)[0]["state"], b.reset(seed=7)[0]["state"])
    assert all("cube" in t or "block" in t for t in decode_text(a.reset(seed=0)[0]["language"]))
    with pytest.raises(ConfigError, match="valid choices: front, wrist"):
        MujocoReachEnv.Config(cameras=("top",))
    with pytest.raises(ConfigError, match="multiple of the physics timestep"):
        MujocoReachEnv.Config(control_dt=0.03)


def test_goal_rows_move_to_privileged_and_full_state_puts_them_back():
    hidden = MujocoPushEnv(MujocoPushEnv.Config(goal_in_state=False), 3)
    shown = MujocoPushEnv(MujocoPushEnv.Config(), 3)
    obs, full = hidden.reset(seed=4)[0], shown.reset(seed=4)[0]
    assert obs["state"].shape == (3, 25) and obs["privileged"].shape == (3, 6)
    assert torch.equal(hidden.full_state(obs), full["state"]) and torch.equal(full["state"], hidden.observe_state())
    assert shown.full_state(full) is full["state"]


def test_render_threads_draw_the_frames_one_renderer_draws(monkeypatch):
    """num_threads > 1 splits the envs' frames over renderers in threads of their own: the same images, bit for
    bit, over resets and steps with jittered cameras and lights, each renderer drawing in its own thread."""
    from sims.mujoco import render

    drawn_in: dict[int, set] = {}
    draw = render._Frames.draw

    def spy(self, rows, *args):
        drawn_in.setdefault(id(self), set()).add(threading.get_ident())
        return draw(self, rows, *args)

    monkeypatch.setattr(render._Frames, "draw", spy)
    cfg = dict(cameras=("front", "side"), image_size=24, depth=True, light_range=(0.5, 1.0), camera_jitter=0.02,
               max_episode_steps=3)
    envs = [MujocoPushEnv(MujocoPushEnv.Config(**cfg, num_threads=k), num_envs=5) for k in (1, 3)]
    if torch.cuda.is_available() and not render.software_gl(gl := envs[0].renderer.frames[0].gl_renderer):
        pytest.skip(f"GL draws on a GPU here ({gl}): one renderer, test_one_renderer_on_a_gpu")
    gen = torch.Generator().manual_seed(0)
    outs = [[env.reset(seed=2)[0]] for env in envs]
    for _ in range(4):  # crosses an auto-reset
        action = torch.rand(5, 4, generator=gen) * 2 - 1
        for env, out in zip(envs, outs):
            out.append(env.step(action)[0])
    for one, three in zip(*outs):
        assert torch.equal(one["images"]["front"], three["images"]["front"])
        assert torch.equal(one["images"]["side"], three["images"]["side"])
        assert torch.equal(one["depth"]["side"], three["depth"]["side"])
    threaded = envs[1].renderer
    assert len(threaded.frames) == 3 and len({frozenset(drawn_in[id(f)]) for f in threaded.frames}) == 3
    assert all(len(drawn_in[id(f)]) == 1 for f in threaded.frames)  # each renderer stays in its thread
    assert threading.get_ident() not in set().union(*(drawn_in[id(f)] for f in threaded.frames))
    for env in envs:
        env.close()
    assert all(t._shutdown for t in threaded.threads)


@pytest.mark.parametrize("size, envs", [(24, 5), (64, 3)])
def test_tiled_frames_are_mujoco_renderers_frames(size, envs, monkeypatch):
    """A renderer draws its frames as tiles of one buffer and reads them back at once (and when the buffer is full:
    here 4 x 4 tiles); rgb and depth are those mujoco.Renderer draws frame by frame, with jittered cameras and
    lights, up to the rasterizer's rounding: rgb within one level on under 1% of values, depth within
    DEPTH_ROUNDING. (Frames of the same env are the same bit for bit: test_render_threads_draw_...)"""
    from sims.mujoco import render

    monkeypatch.setattr(render, "MAX_BUFFER", 4 * size)  # 5 envs x 2 cameras x 2 passes: 20 tiles, two reads
    env = MujocoPushEnv(MujocoPushEnv.Config(cameras=("front", "side"), image_size=size, depth=True,
                                             light_range=(0.5, 1.0), camera_jitter=0.02, num_threads=1),
                        num_envs=envs)
    env.reset(seed=3)
    env.step(torch.rand(envs, 4, generator=torch.Generator().manual_seed(0)) * 2 - 1)
    reads = []
    read = mujoco.mjr_readPixels
    monkeypatch.setattr(mujoco, "mjr_readPixels", lambda *a: reads.append(a[2].width) or read(*a))
    rgb, depth = env.renderer.render(env.physics, env.target, env.camera, env.light)
    assert len(reads) == math.ceil(envs * 4 / 16)
    monkeypatch.setattr(mujoco, "mjr_readPixels", read)
    frames = env.renderer.frames[0]
    model, data = frames.model, mujoco.MjData(frames.model)
    reference = mujoco.Renderer(model, size, size)
    for i in range(envs):
        mujoco.mj_setState(model, data, env.physics[i], render.FULLPHYSICS)
        data.mocap_pos[frames.target_mocap] = env.target[i]
        model.cam_pos[:] = frames._cam_pos + env.camera[i]
        model.light_diffuse[:] = frames._light_diffuse * env.light[i]
        mujoco.mj_kinematics(model, data)
        mujoco.mj_camlight(model, data)
        for cam in ("front", "side"):
            reference.update_scene(data, cam)
            off = np.abs(rgb[cam][i].astype(int) - reference.render())
            assert off.max() <= 1 and (off > 0).mean() < 0.01, (i, cam)
            reference.enable_depth_rendering()
            expected = np.minimum(reference.render(), render.MAX_DEPTH)
            np.testing.assert_allclose(depth[cam][i, ..., 0], expected, rtol=0, atol=DEPTH_ROUNDING)
            reference.disable_depth_rendering()
    reference.close()
    env.close()


def test_render_threads_only_where_gl_draws_in_software():
    """Threads draw where GL is a CPU rasterizer (this host's llvmpipe); a GPU's driver keeps one renderer, as two
    threads drew 2.0-3.5x slower there (an H200 through EGL). The GPU side: test_one_renderer_on_a_gpu."""
    from sims.mujoco import render

    assert render.software_gl("llvmpipe (LLVM 15.0.6, 256 bits)") and render.software_gl("softpipe")
    assert not render.software_gl("NVIDIA H200/PCIe/SSE2") and not render.software_gl("AMD Radeon RX 7900 XTX")
    env = MujocoReachEnv(MujocoReachEnv.Config(cameras=("front",), image_size=24, num_threads=2), num_envs=4)
    frames = env.renderer.frames
    if torch.cuda.is_available() and not render.software_gl(frames[0].gl_renderer):  # only there may GL be a GPU's
        pytest.skip(f"GL draws on a GPU here ({frames[0].gl_renderer}): test_one_renderer_on_a_gpu")
    assert len(frames) == 2 and len(env.renderer.threads) == 2 and render.software_gl(frames[1].gl_renderer)
    env.close()


@pytest.mark.gpu
def test_one_renderer_on_a_gpu():
    """On a machine whose EGL is a GPU's (scripts/gpu_check.sh), num_threads=3 still draws with one renderer, in
    one thread, and the frames are those of num_threads=1."""
    from sims.mujoco import render

    envs = [MujocoReachEnv(MujocoReachEnv.Config(cameras=("front",), image_size=24, num_threads=k), num_envs=4)
            for k in (1, 3)]
    if render.software_gl(envs[0].renderer.frames[0].gl_renderer):
        pytest.skip(f"GL draws in software here: {envs[0].renderer.frames[0].gl_renderer}")
    one, three = (env.reset(seed=0)[0]["images"]["front"] for env in envs)
    assert len(envs[1].renderer.frames) == 1 and len(envs[1].renderer.threads) == 1
    assert torch.equal(one, three)
    for env in envs:
        env.close()


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_a_threaded_renderer_dropped_unclosed_is_freed_in_its_threads():
    """Garbage collection frees a renderer in whichever thread drops it; freed outside its own thread it failed with
    EGL_BAD_ACCESS, and the process's other renderers then drew wrong images."""
    import gc

    ref = MujocoReachEnv(MujocoReachEnv.Config(cameras=("front",), image_size=24, num_threads=1), num_envs=3)
    before = ref.reset(seed=0)[0]["images"]["front"]
    for _ in range(3):
        env = MujocoReachEnv(MujocoReachEnv.Config(cameras=("front",), image_size=24, num_threads=3), num_envs=3)
        assert torch.equal(env.reset(seed=0)[0]["images"]["front"], before)
        threads = env.renderer.threads
        del env
        gc.collect()
        assert all(t._shutdown for t in threads)
    assert torch.equal(ref.reset(seed=0)[0]["images"]["front"], before)
    ref.close()
