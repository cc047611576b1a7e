"""Checkpoints: weights as safetensors, trainer state as safetensors + JSON, config as YAML.

A checkpoint directory holds
    model.safetensors   policy weights (and normalizer statistics): all `eval` and deployment need
    trainer.safetensors optimizer, env snapshot, collector state, RNG state: what resuming needs
    meta.json           counters and every non-tensor part of the trainer state
    config.yaml         the resolved run config
Writes go to a temporary directory that is renamed into place, so a crash mid-write
leaves the previous checkpoint intact.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
import yaml
from safetensors.torch import load_file, save_file

TENSOR = "__tensor__"


def flatten(obj: Any, prefix: str = "") -> tuple[dict[str, torch.Tensor], Any]:
    """Nested dicts/lists with tensors -> (flat tensor dict, JSON skeleton pointing into it)."""
    tensors: dict[str, torch.Tensor] = {}

    def walk(x: Any, path: str) -> Any:
        if isinstance(x, torch.Tensor):
            tensors[path] = x.detach().cpu().contiguous().clone()
            return {TENSOR: path}
        if isinstance(x, dict):
            return {"__dict__": [[k, walk(v, f"{path}.{k}")] for k, v in x.items()]}
        if isinstance(x, (list, tuple)):
            return [walk(v, f"{path}.{i}") for i, v in enumerate(x)]
        return x

    return tensors, walk(obj, prefix)


def unflatten(tensors: dict[str, torch.Tensor], skeleton: Any) -> Any:
    if isinstance(skeleton, dict) and TENSOR in skeleton:
        return tensors[skeleton[TENSOR]]
    if isinstance(skeleton, dict):
        return {k: unflatten(tensors, v) for k, v in skeleton["__dict__"]}
    if isinstance(skeleton, list):
        return [unflatten(tensors, v) for v in skeleton]
    return skeleton


def save_checkpoint(path: Path, model: dict[str, torch.Tensor], trainer: dict[str, Any], config: dict) -> None:
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file({k: v.detach().cpu().contiguous() for k, v in model.items()}, tmp / "model.safetensors")
    tensors, skeleton = flatten(trainer, "trainer")
    save_file(tensors, tmp / "trainer.safetensors")
    (tmp / "meta.json").write_text(json.dumps(skeleton, indent=1))
    (tmp / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    old = path.with_name(path.name + ".old")
    if path.exists():
        shutil.rmtree(old, ignore_errors=True)
        path.rename(old)
    tmp.rename(path)
    shutil.rmtree(old, ignore_errors=True)


def load_config(path: Path) -> dict:
    return yaml.safe_load((Path(path) / "config.yaml").read_text())


def load_model(path: Path, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    return load_file(Path(path) / "model.safetensors", device=str(device))


def load_trainer(path: Path) -> dict[str, Any]:
    path = Path(path)
    tensors = load_file(path / "trainer.safetensors")
    return unflatten(tensors, json.loads((path / "meta.json").read_text()))


def find_checkpoint(path: Path) -> Path:
    """A run directory or a checkpoint directory -> the checkpoint directory to load."""
    path = Path(path)
    if (path / "model.safetensors").exists():
        return path
    for name in ("final", "latest"):
        if (path / "checkpoints" / name / "model.safetensors").exists():
            return path / "checkpoints" / name
    for stage in ("online", "offline", "bc"):  # a pipeline run (embodied/runner/pipeline.py): its last stage
        for name in ("final", "latest"):
            if (path / stage / "checkpoints" / name / "model.safetensors").exists():
                return path / stage / "checkpoints" / name
    raise FileNotFoundError(f"no checkpoint in {path} (looked for model.safetensors, checkpoints/final, checkpoints/latest)")
