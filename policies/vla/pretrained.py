"""Checkpoint directories for the VLA, loaded through the libraries that define them.

    save_pretrained(policy, path)                    # an OpenVLA-style directory (below)
    policy = load_pretrained(path)                   # the same policy back, outputs equal
    policy = load_pretrained(lm_dir, config, observation_spec, action_spec)
                                                     # any transformers causal-LM directory as the backbone
    policy = load_lerobot(path, "smolvla")           # SmolVLA / pi0 through LeRobot (act, bc_loss), where installed

An OpenVLA-style directory is a transformers model directory plus the action
tokenizer's settings, as OpenVLA's Hub checkpoints hold `config.json` and
weights for `AutoModelForVision2Seq` with `n_action_bins` and `norm_stats`
beside them (Kim et al. 2024; openvla/openvla-7b):

    config.json, model.safetensors   the backbone: AutoModelForCausalLM.from_pretrained(path)
    vision/                          the vision tower: AutoModel.from_pretrained(path / "vision"), if any
    vla_config.json                  VLAConfig, specs, action bins, token layout, normalizer statistics
    heads.safetensors                projectors, state/action normalizers, value head

A policy with a pretrained backbone (`backbone=<name or directory>`) also writes
its tokenizer there, and its LoRA adapters merged into the backbone's weights
(peft's merge_and_unload, on a copy); loading reads backbone and tokenizer with
policies.lm.load.load_lm and puts fresh, zero-initialised adapters on the merged
weights, so the outputs are the same.

A plain causal-LM directory (no vla_config.json) becomes the backbone of a new
policy: its vocabulary's last `n_bins` ids become the action tokens (OpenVLA's
choice for Llama 2) and the heads start fresh.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from embodied.registry import MissingExtraError
from embodied.specs import Spec
from policies.vla.backbone import TransformersPatches, _transformers
from policies.lm.load import load_lm
from policies.vla.lerobot_policy import LeRobotPolicy
from policies.vla.policy import RANDOM_BACKBONES, VLAConfig, VLAPolicy

transformers = _transformers()  # this module is imported only where a VLA is saved or loaded

FORMAT = "embodied-vla/1"


def _spec_to_json(spec: Spec) -> dict[str, Any]:
    return {"shape": list(spec.shape), "dtype": str(spec.dtype).removeprefix("torch."), "low": spec.low,
            "high": spec.high}


def _spec_from_json(d: dict[str, Any]) -> Spec:
    return Spec(tuple(d["shape"]), getattr(torch, d["dtype"]), d["low"], d["high"])


def save_pretrained(policy: VLAPolicy, path: str | Path) -> Path:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    lm = policy.lm
    if policy.config.lora_rank > 0:  # peft would write the adapters alone: the merged weights load anywhere
        lm = copy.deepcopy(lm).merge_and_unload()
    lm.save_pretrained(path)
    if policy.tokenizer is not None:
        policy.tokenizer.save_pretrained(path)
    if isinstance(policy.vision, TransformersPatches):
        policy.vision.model.save_pretrained(path / "vision")
    own = {k: v.contiguous() for k, v in policy.state_dict().items()
           if not k.startswith("lm.") and not k.startswith("vision.model.")}
    save_file(own, path / "heads.safetensors")
    meta = {
        "format": FORMAT,
        "config": asdict(policy.config),
        "observation_spec": {k: _spec_to_json(s) for k, s in policy.observation_spec.items()},
        "action_spec": _spec_to_json(policy.action_spec),
        "n_action_bins": policy.layout.n_bins,  # OpenVLA's config key
        "first_action_token": policy.layout.first_action,
        "byte_offset": policy.layout.byte_offset,
        "norm_stats": {"action_offset": policy.action_norm.offset.tolist(),
                       "action_scale": policy.action_norm.scale.tolist()},
    }
    (path / "vla_config.json").write_text(json.dumps(meta, indent=1))
    return path


def load_pretrained(path: str | Path, config: VLAConfig | None = None,
                    observation_spec: dict[str, Spec] | None = None, action_spec: Spec | None = None,
                    device: str | torch.device = "cpu") -> VLAPolicy:
    """A VLA from an OpenVLA-style directory, or a new VLA around a causal-LM directory."""
    path = Path(path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"{path} is not a transformers model directory (no config.json)")
    meta_file = path / "vla_config.json"
    if not meta_file.exists():
        lm = transformers.AutoModelForCausalLM.from_pretrained(path)
        if observation_spec is None or action_spec is None:
            raise ValueError(f"{path} holds a language model only: pass observation_spec and action_spec")
        return VLAPolicy(config or VLAConfig(), observation_spec, action_spec, backbone=lm).to(device)
    meta = json.loads(meta_file.read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"{meta_file}: format {meta.get('format')!r}, expected {FORMAT!r}")
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in meta["config"].items()}
    if fields["backbone"] in RANDOM_BACKBONES:
        lm, tokenizer = transformers.AutoModelForCausalLM.from_pretrained(path), None
    else:  # a pretrained backbone: this directory holds it (trained) and its tokenizer
        fields["backbone"] = str(path)
        lm, tokenizer = load_lm(str(path))
    policy = VLAPolicy(VLAConfig(**fields), {k: _spec_from_json(s) for k, s in meta["observation_spec"].items()},
                       _spec_from_json(meta["action_spec"]), backbone=lm, tokenizer=tokenizer)
    if policy.layout.first_action != meta["first_action_token"]:
        raise ValueError(f"{path}: action tokens start at {meta['first_action_token']} in vla_config.json but at "
                         f"{policy.layout.first_action} in the backbone's vocabulary")
    if isinstance(policy.vision, TransformersPatches):
        policy.vision.model = transformers.AutoModel.from_pretrained(path / "vision")
    missing, unexpected = policy.load_state_dict(load_file(path / "heads.safetensors"), strict=False)
    missing = [k for k in missing if not k.startswith("lm.") and not k.startswith("vision.model.")]
    if missing or unexpected:
        raise ValueError(f"{path / 'heads.safetensors'}: missing {missing}, unexpected {unexpected}")
    return policy.to(device)


def load_lerobot(path: str | Path, kind: str = "smolvla", observation_spec: dict[str, Spec] | None = None,
                 action_spec: Spec | None = None, device: str | torch.device = "cpu"):
    """LeRobot's SmolVLA / pi0 from a local LeRobot checkpoint directory, behind our Policy contract
    (policies/vla/lerobot_policy.py: act and bc_loss; no log-probs).

    The directory is what LeRobot's save_pretrained writes for the policy (config.json, model.safetensors)
    and for its processors (policy_preprocessor.json, policy_postprocessor.json and their statistics),
    as a `lerobot-train` checkpoint's pretrained_model/ holds them. Given the specs, a feature the
    checkpoint reads and the env lacks (or a camera it does not read) is an error here, not at the first
    step. LeRobot needs its own environment here (Python 3.12, or torchvision beside a different torch;
    ENVIRONMENT.md), so this raises a MissingExtraError where it is not importable."""
    modules = {"smolvla": ("lerobot.policies.smolvla.modeling_smolvla", "SmolVLAPolicy"),
               "pi0": ("lerobot.policies.pi0.modeling_pi0", "PI0Policy")}
    if kind not in modules:
        raise ValueError(f"kind={kind!r}; valid choices: {', '.join(modules)}")
    path = Path(path)
    if not path.is_dir():  # a local checkpoint only: nothing loads from a hub at run time
        raise FileNotFoundError(f"no LeRobot {kind} checkpoint at {path} (a directory from save_pretrained)")
    wanted = ["config.json", "model.safetensors", "policy_preprocessor.json", "policy_postprocessor.json"]
    absent = [name for name in wanted if not (path / name).exists()]
    if absent:
        raise FileNotFoundError(f"{path} lacks {absent}: a LeRobot {kind} checkpoint holds the policy's and its "
                                "processors' save_pretrained output (LeRobot >= 0.4)")
    saved = json.loads((path / "config.json").read_text()).get("type")
    if saved != kind:
        raise ValueError(f"{path} holds a LeRobot {saved!r} policy, not {kind!r}")
    import importlib

    try:
        module = importlib.import_module(modules[kind][0])
        from lerobot.configs import PreTrainedConfig
        from lerobot.policies.factory import make_pre_post_processors

        config = PreTrainedConfig.from_pretrained(str(path))
        config.device = str(device)
        model = getattr(module, modules[kind][1]).from_pretrained(str(path), config=config)
    except ImportError as err:  # lerobot (or its transformers extra) absent, or broken beside the CPU torch
        raise MissingExtraError(f"loading a LeRobot {kind} checkpoint needs lerobot[{kind}] ({err}); it runs in "
                                "its own environment: see ENVIRONMENT.md, 'LeRobot and data'") from err
    preprocessor, postprocessor = make_pre_post_processors(
        config, pretrained_path=str(path), preprocessor_overrides={"device_processor": {"device": str(device)}})
    policy = LeRobotPolicy(model, preprocessor, postprocessor, kind, action_spec)
    if observation_spec is not None:
        policy.check_observation_spec(observation_spec)
    return policy
