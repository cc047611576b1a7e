"""The collector a run's algorithm needs, chosen in one place: the Trainer's, and each colocated Ray worker's
(embodied/distributed/workers.py).

    collector = make_local_collector(env, policy, algo, num_envs=4096, rollout_steps=16)
"""

from __future__ import annotations

from embodied.config import check
from embodied.rollout import Collector, GroupCollector
from embodied.text_env import TextEnv
from embodied.text_rollout import TextCollector


def collector_kind(env, policy, algo) -> type:
    """What feeds the update: env steps (PPO, Collector), or groups of episodes from identical starts (GRPO, RLOO:
    GroupCollector on a VecEnv from copied env states), or a text env's whole episodes (TextCollector: groups per
    task instance, or one each for PPO with a value per token)."""
    groups = getattr(algo, "needs_group_rollouts", False)
    if isinstance(env, TextEnv):
        check(groups or getattr(policy, "value_head", None) is not None,
              f"algo={type(algo).__name__.lower()} on a text env needs a critic: policy.value_head=true (PPO with a "
              "value per token), or a critic-free algo=grpo (algo.advantage=rloo for leave-one-out)")
        check(not getattr(algo.config, "compile", False),  # each update's sequences have other lengths
              "algo.compile=true compiles the loss for fixed shapes, and a text env's token sequences change length "
              "with every update (each would compile anew): set algo.compile=false")
        return TextCollector
    return GroupCollector if groups else Collector


def make_local_collector(env, policy, algo, num_envs: int, rollout_steps: int):
    """The collector of `collector_kind`, in this process."""
    kind = collector_kind(env, policy, algo)
    group_size = algo.config.group_size if getattr(algo, "needs_group_rollouts", False) else 1
    if kind is TextCollector:
        return TextCollector(env, policy, num_envs, group_size)
    if kind is GroupCollector:
        return GroupCollector(env, policy, group_size)
    return Collector(env, policy, rollout_steps)
