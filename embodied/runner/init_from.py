"""`init_from=`: a new run whose policy starts from the weights of a trained one.

    embodied train experiment=arm_reach_bc_ppo train.total_env_steps=0           # BC alone: runs/arm_reach_bc_ppo/<run>
    embodied train experiment=arm_reach init_from=runs/arm_reach_bc_ppo/<run>    # PPO from the BC weights

Only the policy's weights (model.safetensors, checked against the checkpoint's checksums) carry over; the new
run builds its optimizer, counters and random stream from its own config, as a run from scratch does (`resume=`
is the other case: the same run continued, optimizer and all). The runners call `load` where they build the
policy, before the algorithm (whose target networks copy the policy's weights), and keep the checkpoint's
resolved path in the run's config.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from embodied.config import ConfigError
from embodied.runner import checkpoint

EXPECTED = ("a run directory (checkpoints/final or checkpoints/latest inside, or a pipeline's bc/, offline/, "
            "online/ stage folders) or a checkpoint directory (model.safetensors, config.yaml, checksums.json)")


def resolve(value: str | Path) -> tuple[Path, str]:
    """`init_from=` -> the checkpoint directory it names (a run's final checkpoint, else its latest) and a
    phrase saying which one that is."""
    path = Path(value).expanduser()
    if not path.exists():
        raise ConfigError(f"init_from={value}: no such directory; expected {EXPECTED}")
    if not path.is_dir():
        raise ConfigError(f"init_from={value} is a file; expected {EXPECTED}")
    path = Path(os.path.abspath(path))  # absolute, as the run's config records it
    try:
        ckpt = checkpoint.find_checkpoint(path)
    except FileNotFoundError:
        raise ConfigError(f"init_from={value} is not a checkpoint: found none in it; expected {EXPECTED}") from None
    if ckpt == path:
        return ckpt, "the checkpoint given"
    inside = ckpt.relative_to(path).parts  # checkpoints/<name>, or <stage>/checkpoints/<name> in a pipeline
    stage = f" of its {inside[0]} stage" if len(inside) == 3 else ""
    if ckpt.name.startswith("latest"):
        return ckpt, f"the run's latest checkpoint{stage}: it has no final one, so it did not finish"
    return ckpt, f"the run's final checkpoint{stage}"


def load(policy: torch.nn.Module, config: dict) -> Path:
    """Load the weights of the checkpoint `config["init_from"]` names into `policy` (built from `config`) and
    return that checkpoint. A ConfigError when the checkpoint holds another policy, or weights that do not fit
    this one: names the tensors and the policy settings that differ."""
    ckpt, which = resolve(config["init_from"])
    saved, weights = checkpoint.load_config(ckpt), checkpoint.load_model(ckpt)
    theirs, ours = saved.get("policy") or {}, config["policy"]
    differ = ", ".join(f"policy.{k}={theirs.get(k)!r} there, {ours.get(k)!r} here"
                       for k in sorted(set(theirs) | set(ours)) if theirs.get(k) != ours.get(k))
    if theirs.get("name") != ours["name"]:
        raise ConfigError(f"init_from={ckpt} holds a policy={theirs.get('name')} and this run trains "
                          f"policy={ours['name']}: start from a checkpoint of the same policy ({differ})")
    misfit = _misfit(weights, policy.state_dict())
    if misfit:
        env = (f"; env.name={saved['env']['name']} there, {config['env']['name']} here"
               if saved.get("env", {}).get("name") != config["env"]["name"] else "")
        raise ConfigError(f"init_from={ckpt}: its weights do not fit this run's policy={ours['name']}: {misfit}; "
                          f"the policy settings that differ: {differ or 'none (an env with other specs?)'}{env}")
    policy.load_state_dict(weights)
    print(f"init_from: policy weights of {ckpt} ({which}); optimizer and counters start fresh"
          + (f"; settings that differ from that run's: {differ}" if differ else ""), flush=True)
    return ckpt


def _misfit(weights: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> str:
    """What keeps `weights` from loading where `expected` are: missing and unexpected keys, shape mismatches."""

    def listed(names: list[str]) -> str:
        return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")

    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(expected))
    shapes = [f"{k} {list(weights[k].shape)} there, {list(expected[k].shape)} here"
              for k in sorted(set(weights) & set(expected)) if weights[k].shape != expected[k].shape]
    problems = [f"{len(missing)} missing ({listed(missing)})" if missing else "",
                f"{len(unexpected)} unexpected ({listed(unexpected)})" if unexpected else "",
                f"shapes differ: {listed(shapes)}" if shapes else ""]
    return "; ".join(p for p in problems if p)
