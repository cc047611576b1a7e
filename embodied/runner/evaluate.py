"""Evaluation: run a policy for a number of episodes and report success and return."""

from __future__ import annotations

import torch

from embodied import keys
from embodied.envs import VecEnv
from embodied.policy import Policy


def eval_seed(run_seed: int) -> int:
    """The seed of a run's evaluation episodes: one its training envs never reset from, so evaluation starts from
    unseen initial states; `embodied eval <run>` uses it too, and so reproduces the figure the run printed."""
    return run_seed + 1_000_003


@torch.no_grad()
def evaluate(policy: Policy, env: VecEnv, seed: int, deterministic: bool = True) -> dict[str, float]:
    """One episode per env (the first each env finishes), from `env.reset(seed)`.

    Returns success rate, mean return and mean length over `env.num_envs` episodes.
    """
    was_training = policy.training
    policy.eval()
    obs, _ = env.reset(seed=seed)
    n = env.num_envs
    finished = torch.zeros(n, dtype=torch.bool, device=env.device)
    success = torch.zeros(n, dtype=torch.bool, device=env.device)
    ret = torch.zeros(n, device=env.device)
    length = torch.zeros(n, device=env.device)
    for _ in range(env.max_episode_steps):
        action = policy.act(obs, deterministic=deterministic).action
        obs, reward, terminated, truncated, info = env.step(action)
        live = ~finished
        ret += reward * live
        length += live.float()
        done = (terminated | truncated) & live
        success |= done & info[keys.SUCCESS]
        finished |= done
        if bool(finished.all()):
            break
    policy.train(was_training)
    if not bool(finished.all()):
        raise RuntimeError(f"{int((~finished).sum())} of {n} eval episodes did not end within max_episode_steps")
    return {"success": success.float().mean().item(), "return": ret.mean().item(), "length": length.mean().item(), "episodes": n}
