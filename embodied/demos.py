"""Demonstrations from scripted experts, as chunked imitation datasets.

    expert = load_expert("arm_reach")                    # fn(env) -> action [N, A]
    episodes = collect_episodes(env, expert, seed=0)     # TensorDict [T, N]: one episode per env
    dataset = chunk_dataset(episodes, horizon=4, gamma=0.99)   # TensorDict [M], M = real steps kept

A dataset row holds `obs` (as the env gives it), `action` [H, A] (the actions
from this step on; past the episode's end the last action repeats, as
diffusion_policy's SequenceSampler pads) and `mc_return` (discounted
return-to-go, for fitting a critic before RL). Datasets are plain in-memory
TensorDicts; an episode store (embodied/data) can produce the same
`episodes` layout.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import torch
from tensordict import TensorDict

from embodied import keys
from embodied.algorithms.advantages import discounted_returns
from embodied.envs import VecEnv

Expert = Callable[[VecEnv], torch.Tensor]

# env name -> its scripted expert (imported only when demonstrations are made)
EXPERTS = {
    "arm_reach": "sims.arm_reach.scripted:scripted_action",
    "mujoco_reach": "sims.mujoco.scripted:expert",
    "mujoco_push": "sims.mujoco.scripted:expert",
    "mujoco_pick": "sims.mujoco.scripted:expert",
    "quadrotor_hover": "sims.quadrotor.scripted:scripted_action",
    "quadrotor_waypoint": "sims.quadrotor.scripted:scripted_action",
}
LIVE = "live"  # bool [T, N]: the step belongs to the env's first episode


def load_expert(env_name: str) -> Expert:
    if env_name not in EXPERTS:
        raise KeyError(f"env {env_name!r} has no scripted expert; envs with one: {', '.join(sorted(EXPERTS))}")
    module, attr = EXPERTS[env_name].split(":")
    return getattr(importlib.import_module(module), attr)


@torch.no_grad()
def collect_episodes(env: VecEnv, expert: Expert | None, seed: int, policy=None) -> TensorDict:
    """One episode per env from env.reset(seed), the expert acting (or, with expert=None, `policy`'s deterministic
    action): TensorDict [T, N] with obs, action, reward, done, terminated, truncated, live (True up to and
    including each env's first done step) and success [T, N] (the episode's outcome, broadcast over its steps)."""
    obs, _ = env.reset(seed=seed)
    n = env.num_envs
    live = torch.ones(n, dtype=torch.bool, device=env.device)
    outcome = torch.zeros(n, dtype=torch.bool, device=env.device)
    steps = []
    for _ in range(env.max_episode_steps):
        action = expert(env) if expert is not None else policy.act(obs, deterministic=True).action
        next_obs, reward, terminated, truncated, info = env.step(action)
        done = terminated | truncated
        steps.append(TensorDict({keys.OBS: obs, keys.ACTION: action, keys.REWARD: reward, keys.DONE: done,
                                 keys.TERMINATED: terminated, keys.TRUNCATED: truncated, LIVE: live.clone()},
                                batch_size=[n]))  # fmt: skip
        outcome |= done & live & info.get(keys.SUCCESS, torch.zeros_like(done))
        live &= ~done
        obs = next_obs
        if not live.any():
            break
    episodes = torch.stack(steps)
    episodes[keys.SUCCESS] = outcome.expand(episodes.batch_size[0], n).clone()
    return episodes


def chunk_dataset(episodes: TensorDict, horizon: int, gamma: float, only_success: bool = True) -> TensorDict:
    """Episodes [T, N] -> rows [M] of (obs, action chunk [H, A], mc_return); `only_success` drops failed episodes."""
    live = episodes[LIVE]
    if only_success:
        live = live & episodes[keys.SUCCESS]
    t_len = episodes.batch_size[0]
    # index of each env's last live step: chunks repeat the action there past the episode's end
    steps = torch.arange(t_len, device=live.device).unsqueeze(1)
    last = torch.where(episodes[LIVE], steps, -1).amax(0)  # [N]
    offsets = torch.arange(horizon, device=live.device)
    index = torch.minimum(steps.unsqueeze(-1) + offsets, last.view(1, -1, 1))  # [T, N, H]
    actions = episodes[keys.ACTION]  # [T, N, A]
    chunks = torch.gather(actions.unsqueeze(2).expand(-1, -1, horizon, -1), 0,
                          index.clamp(min=0).unsqueeze(-1).expand(-1, -1, -1, actions.shape[-1]))
    mc_return = discounted_returns(episodes[keys.REWARD], episodes[keys.DONE], gamma)
    rows = TensorDict({keys.OBS: episodes[keys.OBS], keys.ACTION: chunks, keys.MC_RETURN: mc_return},
                      batch_size=episodes.batch_size)
    return rows[live]
