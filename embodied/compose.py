"""Composing the run config: Hydra's config groups from the registry, and an experiment applied only where it
was written for.

    config = compose(["experiment=quadrotor_hover", "env=quadrotor_waypoint"])   # what `embodied train` builds

An experiment (configs/experiment/*.yaml) picks an env, a policy and an algorithm and tunes them; its `env:`,
`policy:` and `algo:` sections apply only with its own choice of that group (`_not_applied`, `settle`): chosen
away, a section falls back to the new component's Config defaults (keys set on the command line stay) and the run
takes the env's name. The default experiment (config.yaml) applies only while no group is chosen. `embodied train`
settles each job of a sweep the same way, from Hydra's runtime choices.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"


GROUPS = ("env", "policy", "algo")  # the config groups an experiment picks (`override /env: arm_reach`)


def register_configs(overrides: list[str] = ()) -> None:
    """Config groups env/, policy/, algo/ from the registry: the defaults live in each class's Config.
    An import path among `overrides` (env=my_pkg.envs:MyEnv) gets its group node too."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from embodied import registry
    from embodied.distributed.config import ClusterConfig
    from embodied.runner.trainer import TrainConfig

    store = ConfigStore.instance()
    for kind in registry.REGISTRY:
        paths = [v for o in overrides if o.split("=")[0] == kind for v in o.split("=", 1)[1].split(",") if ":" in v]
        for name in registry.names(kind) + paths:
            store.store(group=kind, name=name, node=_node(kind, name))
    store.store(name="train_defaults", node={"train": dataclasses.asdict(TrainConfig())})
    # where the workers run (embodied/distributed/config.py): one process, or Ray actors
    store.store(group="cluster", name="local", node={"name": "local"})
    store.store(group="cluster", name="ray", node={"name": "ray", **dataclasses.asdict(ClusterConfig())})
    if not OmegaConf.has_resolver("run_dir"):
        OmegaConf.register_new_resolver("run_dir", lambda resume, default: resume or default)
    if not OmegaConf.has_resolver("run_name"):  # the run directory's name, per job of a sweep too
        OmegaConf.register_new_resolver("run_name", lambda name, _root_: _run_name(
            name, _root_.hydra.runtime.choices, list(_root_.hydra.overrides.task)).replace(":", "."))  # import paths


def _node(kind: str, name: str) -> dict:
    """A group's config node: its class's Config defaults; none where the class cannot be imported here
    (building it later raises the one-line error naming the extra or the import problem)."""
    from embodied import registry

    try:
        config = getattr(registry.resolve(kind, name), "Config", None)
    except (registry.MissingExtraError, KeyError):
        config = None
    return {"name": name, **(dataclasses.asdict(config()) if dataclasses.is_dataclass(config) else {})}


def aliases(overrides: list[str]) -> list[str]:
    """`experiment=null` (no experiment: each component's own defaults) in the form Hydra takes, `~experiment`."""
    return ["~experiment" if o.lower() == "experiment=null" else o for o in overrides]


def compose(overrides: list[str]) -> dict:
    """The resolved run config for `overrides`, as `embodied train` would build it (no run dir)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf, open_dict

    overrides = aliases(overrides)
    register_configs(overrides)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=overrides, return_hydra_config=True)
    choices, task = OmegaConf.to_container(cfg.hydra.runtime.choices), list(cfg.hydra.overrides.task)
    with open_dict(cfg):
        del cfg["hydra"]
    settle(cfg, choices, task)
    return OmegaConf.to_container(cfg, resolve=True)


# --- an experiment applies where it was written for ----------------------------------------------


def _experiment(name: str) -> tuple[dict[str, str], set[str]]:
    """An experiment's own group choices (`override /env: X` in its defaults list) and the sections it
    sets (env, policy, algo, train, pipeline, ...; not top-level scalars such as `name`), with those of the
    experiments it extends."""
    import yaml

    doc = yaml.safe_load((CONFIG_DIR / "experiment" / f"{name}.yaml").read_text()) or {}
    choices, sections = {}, {key for key, value in doc.items() if key != "defaults" and isinstance(value, dict)}
    for item in doc.get("defaults", []):
        if isinstance(item, dict):  # {"override /env": "arm_reach"}
            choices.update({key.split("/")[-1]: value for key, value in item.items()})
        elif item != "_self_":  # an experiment this one extends
            base_choices, base_sections = _experiment(item)
            choices, sections = {**base_choices, **choices}, sections | base_sections
    return choices, sections


def _user_keys(overrides: list[str]) -> set[str]:
    """The keys the command line sets ("env.w_pos", "experiment"), without Hydra's +, ++ and ~."""
    return {o.split("=", 1)[0].lstrip("~+") for o in overrides}


def _not_applied(choices, overrides: list[str]) -> tuple[list[str], list[str], bool]:
    """What of the chosen experiment does not apply: (the groups chosen otherwise than in its defaults list,
    its sections that go with them, whether the run takes the env's name instead of the experiment's).

    An experiment named on the command line keeps its settings except the sections of those groups
    (experiment=quadrotor_hover env=quadrotor_waypoint: waypoint's own reward weights, hover's policy and
    algo settings). The default experiment (config.yaml) applies only while no group is chosen:
    `embodied train env=arm_reach` trains arm reach from the components' own defaults."""
    experiment, user = choices.get("experiment"), _user_keys(overrides)
    if not experiment:
        return [], [], False
    own, sections = _experiment(experiment)
    if "experiment" not in user:  # the default one
        chosen = [g for g in GROUPS if g in user]
        return (chosen, sorted(sections | set(chosen)), True) if chosen else ([], [], False)
    changed = [g for g in GROUPS if g in own and choices.get(g) != own[g]]
    return changed, changed, "env" in changed


def _run_name(name: str, choices, overrides: list[str]) -> str:
    """The run's name (its directory under runs/): the experiment's, or the env's where the env is not the
    experiment's; a name= on the command line wins."""
    rename = _not_applied(choices, overrides)[2] and "name" not in _user_keys(overrides)
    return choices["env"] if rename else name


def settle(cfg, choices, overrides: list[str]) -> str | None:
    """Drop, in place, the chosen experiment's settings where they do not apply (`_not_applied`), and name the
    run after what runs. Returns a one-line notice naming what was dropped, None when nothing was."""
    from omegaconf import open_dict

    changed, sections, _ = _not_applied(choices, overrides)
    user = _user_keys(overrides)
    with open_dict(cfg):
        dropped = [key for section in sections for key in _reset_section(cfg, section, choices, user)]
        cfg.name = _run_name(cfg.name, choices, overrides)
    if not dropped:
        return None
    chosen, experiment = ", ".join(f"{g}={choices[g]}" for g in changed), choices["experiment"]
    if "experiment" not in user:
        return f"notice: {chosen} without experiment=: the default experiment {experiment} does not apply " \
               f"(dropped {', '.join(dropped)})"
    own = ", ".join(f"{g}={_experiment(experiment)[0][g]}" for g in changed)
    return f"notice: experiment={experiment} is written for {own}; with {chosen} its {', '.join(dropped)} " \
           f"do not apply (dropped)"


def _reset_section(cfg, section: str, choices, user: set[str]) -> list[str]:
    """Set `section` to what it is without an experiment (a group's component defaults, train's, or none: a key
    the new component lacks goes), keeping the keys the command line sets in it; returns the keys that changed."""
    from omegaconf import OmegaConf

    from embodied.runner.trainer import TrainConfig

    if section in GROUPS:
        fresh = OmegaConf.create(_node(section, choices[section]))
    else:
        fresh = OmegaConf.create(dataclasses.asdict(TrainConfig()) if section == "train" else {})
    absent = object()
    for key in sorted(k for k in user if k.startswith(section + ".")):
        value = OmegaConf.select(cfg, key, default=absent)
        if value is not absent:
            OmegaConf.update(fresh, key.split(".", 1)[1], value, merge=False, force_add=True)
    old = OmegaConf.to_container(cfg[section], resolve=True) if section in cfg else {}
    new = OmegaConf.to_container(fresh)
    if new:
        cfg[section] = new
    else:
        cfg.pop(section, None)
    return [f"{section}.{k}" for k in old if k not in new or new[k] != old[k]]
