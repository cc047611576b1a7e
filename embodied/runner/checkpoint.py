"""Checkpoints: weights as safetensors, trainer state as safetensors + JSON, config as YAML.

A checkpoint directory holds
    model.safetensors   policy weights (and normalizer statistics): all `eval` and deployment need
    trainer.safetensors optimizer, env snapshot, collector state, RNG state: what resuming needs
    meta.json           counters and every non-tensor part of the trainer state
    config.yaml         the resolved run config
    checksums.json      sha256 of each file above, written last
Loading checks each file against checksums.json and raises `DamagedCheckpointError` naming the file
when it differs: safetensors has no checksum of its own, so a flipped bit would otherwise resume
training with silently different weights. Checkpoints saved before checksums load with a warning.

Saving writes `<name>.tmp`, then renames `<name>` to `<name>.old` and `<name>.tmp` to `<name>`. The
previous checkpoint stays as `<name>.old`, so one complete checkpoint exists at every moment: when
`<name>` is missing (a crash between the two renames) or damaged, `usable` (and through it
`find_checkpoint` and `Trainer.resume`) falls back to `<name>.old` with a warning saying why.
Checkpoints therefore take twice their size on disk.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
import yaml
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

MANIFEST = "checksums.json"
FILES = ("model.safetensors", "trainer.safetensors", "meta.json", "config.yaml")
_unchecked_warned: set[Path] = set()  # checkpoints without a manifest: warn once per directory


class DamagedCheckpointError(ValueError):
    """A checkpoint file is missing, differs from the checksum recorded when it was saved, or cannot be parsed."""


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
    reseal(tmp)  # the manifest comes last: a checkpoint directory with one is complete
    old = path.with_name(path.name + ".old")
    if path.exists() and _exists(old) and not _intact(path):
        shutil.rmtree(path)  # a damaged newest checkpoint must not push out the good previous one
    if path.exists():  # else a crash left only `old`: keep it until the new one is in place
        shutil.rmtree(old, ignore_errors=True)
        path.rename(old)
    tmp.rename(path)


def _intact(path: Path) -> bool:
    try:
        verify(path)
        return True
    except (DamagedCheckpointError, FileNotFoundError):
        return False


def reseal(path: Path) -> None:
    """Record the checksums of a checkpoint's files as they are now: after saving, or after editing
    config.yaml on purpose (e.g. a larger train.total_env_steps before resuming)."""
    path = Path(path)
    files = [name for name in FILES if (path / name).exists()]
    (path / MANIFEST).write_text(json.dumps({"sha256": {name: _sha256(path / name) for name in files}}, indent=1))


def load_config(path: Path) -> dict:
    file = _checked(Path(path), "config.yaml")
    return _parse(file, lambda: yaml.safe_load(file.read_text()), yaml.YAMLError, UnicodeDecodeError)


def load_model(path: Path, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    file = _checked(Path(path), "model.safetensors")
    return _parse(file, lambda: load_file(file, device=str(device)), SafetensorError)


def load_trainer(path: Path) -> dict[str, Any]:
    path = Path(path)
    file, meta = _checked(path, "trainer.safetensors"), _checked(path, "meta.json")
    tensors = _parse(file, lambda: load_file(file), SafetensorError)
    return unflatten(tensors, _parse(meta, lambda: json.loads(meta.read_text()), ValueError))


def verify(path: Path) -> None:
    """Check every file of a checkpoint against its manifest (DamagedCheckpointError if one differs)."""
    path = Path(path)
    manifest = _manifest(path)
    for name in manifest or ["model.safetensors"]:
        _checked(path, name)


def usable(path: Path) -> Path | None:
    """`path` if it is a complete checkpoint whose files match their checksums; else its previous
    version `<name>.old`, with a warning saying what is wrong with `path`; None if neither exists.
    Raises DamagedCheckpointError when the one that exists is damaged."""
    path = Path(path)
    old = path.with_name(path.name + ".old")
    if _exists(path):
        try:
            verify(path)
            return path
        except DamagedCheckpointError as err:
            if not _exists(old):
                raise
            problem = str(err)
    elif _exists(old):
        problem = f"{path} is missing (saving was interrupted between its two renames)"
    else:
        return None
    verify(old)
    warnings.warn(f"{problem}; falling back to the previous checkpoint {old}", stacklevel=2)
    return old


def find_checkpoint(path: Path) -> Path:
    """A run directory or a checkpoint directory -> the checkpoint directory to load, checked.
    In a run, `final` comes before `latest`; a damaged one is skipped with a warning, but never for
    an earlier stage of a pipeline (that would be another policy)."""
    path = Path(path)
    if _exists(path) or _exists(path.with_name(path.name + ".old")):
        return usable(path)
    for base in (path, path / "online", path / "offline", path / "bc"):  # a pipeline run: its last stage
        damaged = None
        for name in ("final", "latest"):
            try:
                found = usable(base / "checkpoints" / name)
            except DamagedCheckpointError as err:
                damaged = damaged or err
                continue
            if found is not None:
                if damaged is not None:
                    warnings.warn(f"{damaged}; using {found} instead", stacklevel=2)
                return found
        if damaged is not None:
            raise damaged
    raise FileNotFoundError(f"no checkpoint in {path} (looked for model.safetensors, checkpoints/final, checkpoints/latest)")


def _exists(path: Path) -> bool:
    return (path / "model.safetensors").exists() or (path / MANIFEST).exists()


def _sha256(file: Path) -> str:
    with open(file, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _manifest(path: Path) -> dict[str, str] | None:
    """{file name: sha256} of a checkpoint; None (and a warning, once) for one saved before checksums."""
    file = path / MANIFEST
    if not file.exists():
        if path.is_dir() and path.resolve() not in _unchecked_warned:
            _unchecked_warned.add(path.resolve())
            warnings.warn(f"{path} has no {MANIFEST} (saved before checkpoints carried checksums): "
                          "its files are loaded unchecked", stacklevel=4)
        return None
    try:
        return dict(json.loads(file.read_text())["sha256"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as err:
        raise DamagedCheckpointError(f"{file} is damaged: {type(err).__name__}: {err}") from None


def _checked(path: Path, name: str) -> Path:
    """path/name, after checking it against the checkpoint's manifest."""
    file, manifest = path / name, _manifest(path)
    if not file.exists():
        raise (DamagedCheckpointError if manifest else FileNotFoundError)(f"{file} is missing")
    if manifest is None:
        return file
    if name not in manifest:
        raise DamagedCheckpointError(f"{file} is not listed in {path / MANIFEST}")
    digest = _sha256(file)
    if digest != manifest[name]:
        raise DamagedCheckpointError(f"{file} is damaged: its sha256 {digest[:16]}... differs from the "
                                     f"{manifest[name][:16]}... recorded in {MANIFEST} when it was saved (if you edited "
                                     f"it on purpose, record it with embodied.runner.checkpoint.reseal('{path}'))")
    return file


def _parse(file: Path, read, *errors: type[Exception]):
    """read() with a parse failure (a file damaged before checksums, or never a checkpoint) named."""
    try:
        return read()
    except errors as err:
        raise DamagedCheckpointError(f"{file} cannot be read: {type(err).__name__}: {err}") from None
