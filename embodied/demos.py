"""Episodes from a scripted expert or a policy: the one collector behind `embodied record` and a pipeline's
scripted demonstrations (both write them to an episode store, embodied/data/record.py).

    episodes = collect_episodes(env, seed=0)                 # the env's expert (env.expert_action()) acts
    episodes = collect_episodes(env, seed=0, policy=policy)  # or a policy's deterministic action
    # TensorDict [T, N]: one episode per env

An env with a scripted expert has an `expert_action()` method (sims/<env>/): the core names no env.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from embodied import keys
from embodied.envs import VecEnv

LIVE = "live"  # bool [T, N]: the step belongs to the env's first episode


@torch.no_grad()
def collect_episodes(env: VecEnv, seed: int, policy=None, action_noise: float = 0.0,
                     generator: torch.Generator | None = None) -> TensorDict:
    """One episode per env from env.reset(seed), the env's scripted expert acting (or `policy`'s deterministic
    action), plus Gaussian noise of std `action_noise` clipped to the action bounds (suboptimal demonstrations):
    TensorDict [T, N] with obs, action (as executed), reward, done, terminated, truncated, live (True up to and
    including each env's first done step) and success [T, N] (the env's success at that step, as a correction
    session stores it and LeRobot's `next.success` means it: an episode succeeded when any of its rows did)."""
    if policy is None and not hasattr(env, "expert_action"):
        raise ValueError(f"{type(env).__name__} has no scripted expert (an `expert_action` method): record with a "
                         "policy or a teleop device instead")
    obs, _ = env.reset(seed=seed)
    n = env.num_envs
    live = torch.ones(n, dtype=torch.bool, device=env.device)
    steps = []
    for _ in range(env.max_episode_steps):
        action = env.expert_action() if policy is None else policy.act(obs, deterministic=True).action
        if action_noise:
            noise = torch.randn(action.shape, generator=generator).to(action.device)
            action = (action + action_noise * noise).clamp(env.action_spec.low, env.action_spec.high)
        next_obs, reward, terminated, truncated, info = env.step(action)
        done = terminated | truncated
        success = info.get(keys.SUCCESS, torch.zeros_like(done)).bool() & live
        steps.append(TensorDict({keys.OBS: obs, keys.ACTION: action, keys.REWARD: reward, keys.DONE: done,
                                 keys.TERMINATED: terminated, keys.TRUNCATED: truncated, keys.SUCCESS: success,
                                 LIVE: live.clone()}, batch_size=[n]))  # fmt: skip
        live &= ~done
        obs = next_obs
        if not live.any():
            break
    return torch.stack(steps)
