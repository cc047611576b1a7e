"""Our envs trained by other libraries: the code of the README's page "Train our envs with other libraries",
run exactly as printed there (the lines between `# README` and `# end README`), and what it must achieve.

Learning thresholds come from 8 seeds (numbers in each test's docstring); each test takes under 20 s on 2 CPU
cores.
"""

from __future__ import annotations

import numpy as np
import pytest


def test_stable_baselines3_ppo_learns_arm_reach(tmp_path, monkeypatch):
    """SB3's PPO on 8 one-env views, 12,288 steps (~10 s): the deterministic policy's mean return over 16
    evaluation episodes beats a uniform random policy's on the same episodes by more than 5. Seeds 0-7 (seed= of
    make_vec_env and PPO) gave -18.2 to -29.0 against the random policy's -37.7, margins 8.7 to 19.4; the test runs
    seed 0 (-24.4)."""
    pytest.importorskip("stable_baselines3", reason="Stable-Baselines3 comes with the dev extra: pip install '.[dev]'")
    monkeypatch.setenv("SB3_LOGDIR", str(tmp_path))  # learn()'s logger folder, else an SB3-<date> folder in /tmp
    # README
    from gymnasium.wrappers import FilterObservation
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    from embodied import registry
    from embodied.gym_view import GymView

    def make_env():
        env = GymView(registry.build("env", "arm_reach", {}, num_envs=1))  # a gymnasium.Env, numpy in and out
        # keep `state`: `language` is raw UTF-8 bytes, which only slow an MLP down
        return FilterObservation(env, ["state"])

    envs = make_vec_env(make_env, n_envs=8, seed=0)  # SB3's own vectorisation: 8 one-env views, stepped in turn
    # for a small budget: short rollouts, a larger step, a short horizon for the dense reward
    model = PPO("MultiInputPolicy", envs, n_steps=128, batch_size=256, learning_rate=3e-3, gamma=0.9, n_epochs=5,
                seed=0, device="cpu")
    model.learn(total_timesteps=12_288)
    eval_env = make_vec_env(make_env, n_envs=1, seed=1000)  # evaluation episodes from seed 1000
    mean_return, _ = evaluate_policy(model, eval_env, n_eval_episodes=16, deterministic=True)
    # end README

    class RandomPolicy:  # evaluate_policy's interface: predict(obs, state, episode_start, deterministic)
        def predict(self, obs, state=None, episode_start=None, deterministic=False):
            return np.stack([eval_env.action_space.sample() for _ in range(eval_env.num_envs)]), None

    eval_env = make_vec_env(make_env, n_envs=1, seed=1000)  # the same evaluation episodes
    eval_env.action_space.seed(0)
    random_return, _ = evaluate_policy(RandomPolicy(), eval_env, n_eval_episodes=16)
    assert mean_return > random_return + 5, (mean_return, random_return)


def test_cleanrl_style_ppo_on_the_torch_vector_env():
    """A CleanRL-style PPO loop written against the VecEnv itself (64 envs, batched torch, 40 iterations of 32
    steps, ~5 s), then evaluated through gymnasium's RecordEpisodeStatistics: the mean policy's return over 64
    episodes beats a uniform random policy's by more than 10. Seeds 0-7 (torch.manual_seed and reset) gave -9.5 to
    -15.6 against -34.4, margins 18.8 to 24.9; the test runs seed 0 (-11.0). Then `next_value`, the bootstrap of
    the value targets, is checked on real episode ends: V(final_obs) at a truncation, 0 at a termination."""
    # README
    import numpy as np
    import torch
    from torch import nn
    from torch.distributions import Normal

    from embodied import registry

    env = registry.build("env", "arm_reach", {}, num_envs=64)  # a gymnasium.vector.VectorEnv on torch tensors
    obs_dim, act_dim = env.single_observation_space["state"].shape[0], env.single_action_space.shape[0]
    torch.manual_seed(0)
    critic = nn.Sequential(nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))
    actor_mean = nn.Sequential(nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, act_dim))
    actor_logstd = nn.Parameter(torch.full((act_dim,), -0.5))
    params = [*critic.parameters(), *actor_mean.parameters(), actor_logstd]
    optimizer = torch.optim.Adam(params, lr=1e-3)
    num_steps, gamma, gae_lambda, clip_coef = 32, 0.95, 0.95, 0.2

    def next_value(obs, terminated, info):
        """V of the state each env reached: 0 where its episode terminated; where it was truncated, V of its
        final state (info["final_obs"]), since `obs` already holds the first state of its next episode."""
        reached = torch.where(info["_final_obs"][:, None], info["final_obs"]["state"], obs["state"])
        return critic(reached).squeeze(-1) * ~terminated

    obs, _ = env.reset(seed=0)
    for iteration in range(40):
        batch = {k: [] for k in ("state", "action", "log_prob", "value", "reward", "next_value", "done")}
        with torch.no_grad():
            for step in range(num_steps):
                dist = Normal(actor_mean(obs["state"]), actor_logstd.exp())
                action = dist.sample()
                batch["state"].append(obs["state"])
                batch["action"].append(action)
                batch["log_prob"].append(dist.log_prob(action).sum(-1))
                batch["value"].append(critic(obs["state"]).squeeze(-1))
                obs, reward, terminated, truncated, info = env.step(action)  # finished envs reset inside
                batch["reward"].append(reward)
                batch["next_value"].append(next_value(obs, terminated, info))
                batch["done"].append(terminated | truncated)
        b = {k: torch.stack(v) for k, v in batch.items()}  # [T, N, ...]
        # GAE: an episode's end stops the trace; its bootstrap is next_value
        advantages, last = torch.zeros_like(b["reward"]), torch.zeros(env.num_envs)
        for t in reversed(range(num_steps)):
            delta = b["reward"][t] + gamma * b["next_value"][t] - b["value"][t]
            advantages[t] = last = delta + gamma * gae_lambda * ~b["done"][t] * last
        b["advantage"], b["return"] = advantages, advantages + b["value"]
        flat = {k: v.flatten(0, 1) for k, v in b.items()}
        for epoch in range(4):
            for idx in torch.randperm(num_steps * env.num_envs).split(512):
                dist = Normal(actor_mean(flat["state"][idx]), actor_logstd.exp())
                ratio = (dist.log_prob(flat["action"][idx]).sum(-1) - flat["log_prob"][idx]).exp()
                adv = flat["advantage"][idx]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                pg_loss = -torch.min(ratio * adv, ratio.clamp(1 - clip_coef, 1 + clip_coef) * adv).mean()
                v_loss = 0.5 * (critic(flat["state"][idx]).squeeze(-1) - flat["return"][idx]).square().mean()
                optimizer.zero_grad()
                (pg_loss + 0.5 * v_loss).backward()
                nn.utils.clip_grad_norm_(params, 0.5)
                optimizer.step()
    # end README

    # README
    from gymnasium.wrappers.vector import RecordEpisodeStatistics

    from embodied.gym_view import NumpyView

    def evaluate(policy, episodes=64, seed=1000):
        """Mean return of `policy` (numpy states [N, D] -> numpy actions [N, A]) over `episodes` episodes."""
        envs = RecordEpisodeStatistics(NumpyView(registry.build("env", "arm_reach", {}, num_envs=16)))
        obs, _ = envs.reset(seed=seed)
        returns = []
        while len(returns) < episodes:
            obs, _, _, _, info = envs.step(policy(obs["state"]))
            if "episode" in info:  # gymnasium's statistics of the episodes that ended at this step
                returns += info["episode"]["r"][info["_episode"]].tolist()
        return np.mean(returns[:episodes])

    trained_return = evaluate(lambda state: actor_mean(torch.as_tensor(state)).detach().numpy())
    # end README
    rng = np.random.default_rng(0)
    random_return = evaluate(lambda state: rng.uniform(-1, 1, (len(state), act_dim)).astype(np.float32))
    assert trained_return > random_return + 10, (trained_return, random_return)

    # the bootstrap on real episode ends: half the envs reach their ball (the scripted expert: terminated), the
    # others stand still until the time limit truncates them
    from sims.arm_reach.scripted import scripted_action

    scripted = torch.arange(env.num_envs) % 2 == 0
    env.reset(seed=1)
    ends = {"terminated": 0, "truncated": 0}
    with torch.no_grad():
        for _ in range(env.max_episode_steps):
            action = torch.where(scripted[:, None], scripted_action(env, "joint"), 0.0)
            obs, _, terminated, truncated, info = env.step(action)
            value, done = next_value(obs, terminated, info), terminated | truncated
            final_value, fresh_value = critic(info["final_obs"]["state"]).squeeze(-1), critic(obs["state"]).squeeze(-1)
            assert torch.equal(value[terminated], torch.zeros(int(terminated.sum())))
            assert torch.equal(value[truncated], final_value[truncated])
            assert not torch.isclose(value[truncated], fresh_value[truncated]).any(), "bootstrapped from the reset obs"
            assert torch.equal(value[~done], fresh_value[~done])
            ends["terminated"] += int(terminated.sum())
            ends["truncated"] += int(truncated.sum())
    assert ends["terminated"] >= env.num_envs // 2 and ends["truncated"] == env.num_envs // 2, ends


def test_gymnasium_records_video_of_the_single_env_view(tmp_path, monkeypatch):
    """gymnasium's single-env RecordVideo on a camera env: one frame per reset and step, at the env's control rate,
    the done step's frame that of the finished episode (not of the next one, which the VecEnv has already begun)."""
    pytest.importorskip("moviepy", reason="gymnasium's RecordVideo needs moviepy (the dev extra installs it)")
    pytest.importorskip("sims.mujoco", reason="mujoco_reach needs the mujoco extra: pip install '.[mujoco]'")
    from moviepy import VideoFileClip

    monkeypatch.chdir(tmp_path)
    # README
    from gymnasium.wrappers import RecordVideo

    from embodied import registry
    from embodied.gym_view import GymView

    view = GymView(registry.build("env", "mujoco_reach", {"cameras": ["front"], "image_size": 64}, num_envs=1))
    env = RecordVideo(view, "videos", episode_trigger=lambda episode: episode == 0)  # the first camera's frames
    env.action_space.seed(0)
    obs, _ = env.reset(seed=0)
    steps, done = 0, False
    while not done:
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        steps, done = steps + 1, terminated or truncated
    env.close()  # writes videos/rl-video-episode-0.mp4
    # end README
    assert np.array_equal(view.render(), obs["images/front"])
    videos = list((tmp_path / "videos").glob("*.mp4"))
    assert len(videos) == 1
    with VideoFileClip(str(videos[0])) as clip:
        assert clip.reader.n_frames == steps + 1 and clip.fps == 25  # mujoco_reach: control_dt 0.04 s


def test_readme_prints_exactly_the_code_these_tests_run():
    import re
    import textwrap
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    blocks = re.findall(r"# README\n(.*?)\n\s*# end README", Path(__file__).read_text(), re.S)
    readme = (root / "README.md").read_text()
    assert len(blocks) == 4
    for block in blocks:
        assert f"```python\n{textwrap.dedent(block).strip()}\n```" in readme, block[:200]
