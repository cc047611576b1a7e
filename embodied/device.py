"""Device selection, in one place."""

from __future__ import annotations

import torch


def resolve_device(name: str = "auto") -> torch.device:
    """"auto" -> cuda when present, else cpu; anything else is passed to torch.

    A bare "cuda" becomes "cuda:<current index>", the device tensors made there report:
    `tensor.device == env.device` must hold (the env contract), and torch.device("cuda") != "cuda:0".
    """
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if name == "auto" else name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device={name!r} was asked for but CUDA is not available; use device=auto or cpu")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    return device
