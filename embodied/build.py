"""Config to objects: the env, policy and algorithm a run config names (one place, below every runner).

    env = make_env(config, num_envs=16, device=torch.device("cpu"))
    policy = make_policy(config, env)
    algo = make_algo(config["algo"], policy)
"""

from __future__ import annotations

import torch

from embodied import registry
from embodied.config import ConfigError
from embodied.device import resolve_device
from embodied.text_env import TextEnv


def params(node: dict) -> dict:
    """A config group's settings without its registry `name`."""
    return {k: v for k, v in node.items() if k != "name"}


def make_env(config: dict, num_envs: int, device: torch.device):
    """The config's env: a VecEnv of `num_envs` on `device`, or a text env (episodes come from the seeds of
    each reset, embodied/text_env.py)."""
    name = config["env"]["name"]
    if issubclass(registry.resolve("env", name), TextEnv):
        return registry.build("env", name, params(config["env"]))
    return registry.build("env", name, params(config["env"]), num_envs=num_envs, device=device)


def make_policy(config: dict, env) -> torch.nn.Module:
    name = config["policy"]["name"]
    text_policy = registry.entries("policy").get(name, registry.Entry("")).text
    if isinstance(env, TextEnv) != text_policy:
        env_name = config["env"]["name"]
        raise ConfigError(f"env.name={env_name} is {'a text env' if isinstance(env, TextEnv) else 'not a text env'} "
                          f"and policy={name} is {'a language model' if text_policy else 'not one'}: text envs train "
                          f"policy=lm (e.g. experiment={env_name if isinstance(env, TextEnv) else 'lm_calculator'}), "
                          "robot envs the others")
    if isinstance(env, TextEnv):  # a language model: its own tokenizer and chat template, no specs
        policy = registry.build("policy", name, params(config["policy"]))
        return policy.to(resolve_device(config["device"]))
    policy = registry.build(
        "policy", name, params(config["policy"]),
        observation_spec=env.observation_spec, action_spec=env.action_spec,
    )
    return policy.to(env.device)


def make_algo(node: dict, policy):
    """The algorithm a config node names ({"name": "iql", ...settings}) over `policy`."""
    return registry.build("algo", node["name"], params(node), policy=policy)


def needs(algo_name: str, capability: str) -> bool:
    """Whether the registered algorithm declares a class flag (needs_replay, needs_group_rollouts)."""
    return bool(getattr(registry.resolve("algo", algo_name), capability, False))
