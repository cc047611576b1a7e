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


CPUINFO = "/proc/cpuinfo"  # Linux; elsewhere native_bf16 answers None


def native_bf16() -> bool | None:
    """Whether this CPU multiplies bfloat16 in hardware (AVX512-BF16 or AMX-BF16 in /proc/cpuinfo's flags); None
    where the file is not there. Without it torch emulates bf16 matmuls, slower than fp32."""
    try:
        with open(CPUINFO) as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return None
    return "avx512_bf16" in flags or "amx_bf16" in flags
