"""Device selection, in one place."""

from __future__ import annotations

import torch


def resolve_device(name: str = "auto") -> torch.device:
    """"auto" -> cuda when present, else cpu; anything else is passed to torch."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={name!r} was asked for but CUDA is not available; use device=auto or cpu")
    return device
