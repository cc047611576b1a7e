"""One registry: a name maps to an import path and the extra that provides it.

Nothing is imported until a name is built, so `import embodied` stays fast and a
missing optional package gives one error naming the extra to install.

Envs of your own need no edit here: name one by its import path
(`env=my_pkg.envs:MyTaskEnv`, a VecEnv subclass with a `Config` dataclass), or
declare it in your package's entry points, group `embodied.envs`:

    [project.entry-points."embodied.envs"]
    my_task = "my_pkg.envs:MyTaskEnv"        # then env=my_task; `embodied list` shows it
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
from dataclasses import dataclass
from typing import Any

from embodied.config import build_config


class MissingExtraError(ImportError):
    pass


@dataclass(frozen=True)
class Entry:
    target: str  # "package.module:Attribute"
    extra: str | None = None  # pip extra that installs its dependencies, None = core
    dist: str | None = None  # the installed distribution that declares it (entry points); None = this project
    text: bool = False  # a text env or a language-model policy (embodied/text_env.py): not a VecEnv / robot policy

    def install_hint(self, missing: str) -> str:
        if self.extra is None:
            return f"pip install {missing}"
        return f"pip install '{self.dist}[{self.extra}]'" if self.dist else f"pip install -e '.[{self.extra}]'"


# kind -> name -> entry. Backends are listed here as strings; nothing is imported.
REGISTRY: dict[str, dict[str, Entry]] = {
    "env": {
        "quadrotor_hover": Entry("sims.quadrotor:QuadrotorHoverEnv"),
        "quadrotor_waypoint": Entry("sims.quadrotor:QuadrotorWaypointEnv"),
        "arm_reach": Entry("sims.arm_reach:ArmReachEnv"),
        "mujoco_reach": Entry("sims.mujoco:MujocoReachEnv", extra="mujoco"),
        "mujoco_push": Entry("sims.mujoco:MujocoPushEnv", extra="mujoco"),
        "mujoco_pick": Entry("sims.mujoco:MujocoPickEnv", extra="mujoco"),
        "maniskill": Entry("sims.maniskill:ManiSkillEnv", extra="maniskill"),  # env.env_id picks the task
        "gym": Entry("sims.gym:GymEnv", extra="gym"),
        # Isaac Gym and Isaac Lab are not on PyPI for our Python/CPU: the adapters raise a
        # MissingExtraError with install steps; tests use embodied.testing's fakes
        "isaacgym": Entry("sims.isaacgym.env:IsaacGymEnv", extra="isaacgym"),
        "isaaclab": Entry("sims.isaaclab:IsaacLabEnv", extra="isaaclab"),
        # multi-turn text tasks for language agents (embodied/text_env.py): a tool-use task and a game
        "lm_calculator": Entry("sims.text.calculator:CalculatorEnv", extra="text", text=True),
        "lm_guess_number": Entry("sims.text.guess_number:GuessNumberEnv", extra="text", text=True),
    },
    "policy": {
        "mlp": Entry("policies.mlp:MLPPolicy"),
        "sac_mlp": Entry("policies.sac_mlp:SACPolicy"),
        "diffusion": Entry("policies.diffusion:DiffusionPolicy"),
        "flow": Entry("policies.flow:FlowPolicy"),
        "vla": Entry("policies.vla:VLAPolicy", extra="transformers"),  # autoregressive action tokens
        "lm": Entry("policies.lm:LMPolicy", extra="lm", text=True),  # a causal language model (SmolLM2-135M-Instruct)
    },
    "algo": {
        "ppo": Entry("embodied.algorithms.ppo:PPO"),
        "grpo": Entry("embodied.algorithms.grpo:GRPO"),
        "sac": Entry("embodied.algorithms.sac:SAC"),
        "rlpd": Entry("embodied.algorithms.sac:RLPD"),
        "iql": Entry("embodied.algorithms.iql:IQL"),
        "calql": Entry("embodied.algorithms.calql:CalQL"),
    },
    "robot": {  # real_robot drivers; the LeRobot arms import lerobot on connect (it needs its own venv)
        "sim_arm": Entry("real_robot.arms.sim_arm:SimulatedArm"),
        "so100": Entry("real_robot.arms.lerobot_arm:SO100Arm"),
        "so101": Entry("real_robot.arms.lerobot_arm:SO101Arm"),
        "koch": Entry("real_robot.arms.lerobot_arm:KochArm"),
        "mavlink": Entry("real_robot.drones.mavlink:MavlinkDrone", extra="robots"),
        "crazyflie": Entry("real_robot.drones.crazyflie:CrazyflieDrone", extra="robots"),
    },
    "teleop": {  # human-in-the-loop devices; on connect the HID ones import hidapi (extra: teleop),
        # the leader arms lerobot (its own venv, as the LeRobot arms above)
        "keyboard": Entry("real_robot.teleop.keyboard:KeyboardTeleop"),
        "gamepad": Entry("real_robot.teleop.hid_devices:GamepadTeleop"),
        "spacemouse": Entry("real_robot.teleop.hid_devices:SpaceMouseTeleop"),
        "so100_leader": Entry("real_robot.teleop.leader_arm:SO100LeaderArm"),
        "so101_leader": Entry("real_robot.teleop.leader_arm:SO101LeaderArm"),
        "koch_leader": Entry("real_robot.teleop.leader_arm:KochLeaderArm"),
        "scripted": Entry("real_robot.teleop.scripted:ScriptedOperator"),  # built with expert= and rule= callables
    },
}


# What core code (embodied/) calls in the other packages, by name: it imports none of them (ARCHITECTURE.md), and
# these are no config groups. name -> "package.module:attribute", imported on first use (`component(name)`).
COMPONENTS: dict[str, str] = {
    "deploy": "real_robot.deploy:deploy",  # embodied deploy: a policy on a robot through the safety layer
    "deploy_settings": "real_robot.deploy:DeploySettings",
    "export": "real_robot.deploy:export",  # embodied deploy --export: TorchScript, ONNX, C
    "robot_env": "real_robot.deploy:robot_env",  # a robot as a one-env VecEnv with its twin, the fit checked
    "obs_encoder": "policies.common.nets:ObsEncoder",  # state + camera encoder (the reward classifier reuses it)
    "value_mlp": "policies.common.nets:value_mlp",
}


def component(name: str) -> Any:
    """The COMPONENTS entry `name`, imported now."""
    module, _, attr = COMPONENTS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


# kind -> the entry-point group in which installed packages declare names of that kind
ENTRY_POINTS = {"env": "embodied.envs"}


def names(kind: str, text: bool | None = None) -> list[str]:
    """The registered names of `kind`; text=False: only VecEnvs / robot policies, text=True: only text envs /
    language-model policies (Entry.text)."""
    return sorted(n for n, e in entries(kind).items() if text is None or e.text == text)


def entries(kind: str) -> dict[str, Entry]:
    """The names of `kind`: ours, then those installed packages declare (ours win a clash)."""
    if kind not in REGISTRY:
        raise KeyError(f"unknown registry kind {kind!r}; valid kinds: {', '.join(sorted(REGISTRY))}")
    return {**_installed(kind), **REGISTRY[kind]}


@functools.cache
def _installed(kind: str) -> dict[str, Entry]:
    if kind not in ENTRY_POINTS:
        return {}
    return {ep.name: Entry(f"{ep.module}:{ep.attr}", ep.extras[0] if ep.extras else None, ep.dist and ep.dist.name)
            for ep in importlib.metadata.entry_points(group=ENTRY_POINTS[kind])}


def resolve(kind: str, name: str) -> Any:
    """Import and return the class registered as `name` under `kind`, or named by its import path
    ("package.module:Class", which needs no registration)."""
    table = entries(kind)
    if name not in table and ":" not in name:
        raise KeyError(f"unknown {kind} {name!r}; valid choices: {', '.join(sorted(table))} "
                       "(or an import path, package.module:Class)")
    entry = table.get(name, Entry(name))
    module_name, _, attr = entry.target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if (missing := _missing_package(err, module_name)) is not None:  # a package it imports is not installed
            raise _missing_extra(kind, name, entry, missing) from err
        if name in REGISTRY[kind]:
            raise  # our own module is missing: a broken checkout, the traceback helps
        raise KeyError(f"{kind} {name!r}: {err} (is its package installed, or its folder on PYTHONPATH?)") from None
    if not hasattr(module, attr):
        raise KeyError(f"{kind} {name!r}: module {module_name!r} has no attribute {attr!r}")
    return getattr(module, attr)


def build(kind: str, name: str, params: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """Build `name` from its `Config` dataclass filled with `params` (validated), plus kwargs.

    Heavy optional packages (textarena, reasoning-gym, transformers, peft) are imported where the class is built,
    not with its module, so that reading its `Config` stays cheap: a ModuleNotFoundError for a package outside
    the class's own gives the same MissingExtraError, naming the extra, as `resolve` gives at import."""
    cls = resolve(kind, name)
    try:
        config = build_config(cls.Config, params or {}, where=kind)
        return cls(config, **kwargs)
    except ModuleNotFoundError as err:
        entry = entries(kind).get(name, Entry(name))
        missing = _missing_package(err, entry.target.partition(":")[0])
        own = {getattr(cls, "__module__", "").split(".")[0], *_PROJECT_PACKAGES}
        if missing is None or missing.split(".")[0] in own:  # our own code is missing: the traceback helps
            raise
        raise _missing_extra(kind, name, entry, missing) from err


# this project's top-level packages: a module of theirs that is missing is a broken checkout, not an extra
_PROJECT_PACKAGES = frozenset(t.partition(":")[0].split(".")[0] for t in
                              [*(e.target for table in REGISTRY.values() for e in table.values()),
                               *COMPONENTS.values(), "embodied"])


def _missing_package(err: ModuleNotFoundError, module_name: str) -> str | None:
    """The module `err` could not import where it is a package other than `module_name`'s own (an optional
    dependency, not installed), else None."""
    missing = err.name or module_name
    return missing if missing.split(".")[0] != module_name.split(".")[0] else None


def _missing_extra(kind: str, name: str, entry: Entry, missing: str) -> MissingExtraError:
    return MissingExtraError(f"{kind} {name!r} needs the optional package {missing!r}: {entry.install_hint(missing)}")
