"""Config to objects: the env, policy and algorithm a run config names (one place, below every runner).

    env = make_env(config, num_envs=16, device=torch.device("cpu"))
    policy = make_policy(config, env)
    algo = make_algo(config["algo"], policy)
"""

from __future__ import annotations

import torch

from embodied import registry


def params(node: dict) -> dict:
    """A config group's settings without its registry `name`."""
    return {k: v for k, v in node.items() if k != "name"}


def make_env(config: dict, num_envs: int, device: torch.device):
    return registry.build("env", config["env"]["name"], params(config["env"]), num_envs=num_envs, device=device)


def make_policy(config: dict, env) -> torch.nn.Module:
    policy = registry.build(
        "policy", config["policy"]["name"], params(config["policy"]),
        observation_spec=env.observation_spec, action_spec=env.action_spec,
    )
    return policy.to(env.device)


def make_algo(node: dict, policy):
    """The algorithm a config node names ({"name": "iql", ...settings}) over `policy`."""
    return registry.build("algo", node["name"], params(node), policy=policy)


def needs(algo_name: str, capability: str) -> bool:
    """Whether the registered algorithm declares a class flag (needs_replay, needs_group_rollouts)."""
    return bool(getattr(registry.resolve("algo", algo_name), capability, False))
