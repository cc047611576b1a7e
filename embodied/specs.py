"""Observation and action specs: per-env shape, dtype and bounds of one tensor."""

from __future__ import annotations

from dataclasses import dataclass

import torch


class Meaning:
    """Tags for `Spec.meaning`: unit and frame of a tensor, compared verbatim where a policy meets a robot
    (`embodied deploy` refuses a robot whose observation or command of the right shape means something else:
    joint angles vs a Cartesian position, a quaternion wxyz vs xyzw). Spell shared meanings with these names; joint
    angles carry their arm's convention in a phrase of their own (zero pose and joint order differ between arms)."""

    POSITION = "m, world z-up"
    VELOCITY = "m/s, world z-up"
    ANGULAR_VELOCITY = "rad/s, body FLU"  # body x forward, y left, z up
    QUATERNION = "quaternion wxyz, body FLU -> world z-up"
    SPECIFIC_FORCE = "g, body-z specific force"  # what an accelerometer reads along the thrust axis
    MOTOR_COMMAND = "motor command [-1,1], 0 = hover"  # rotor-speed setpoints centred on the hover speed


@dataclass(frozen=True)
class Spec:
    """One tensor of a batch, without the leading `num_envs` dimension."""

    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    low: float | None = None  # inclusive lower bound, None = unbounded
    high: float | None = None  # inclusive upper bound, None = unbounded
    meaning: str | None = None  # unit and frame (a `Meaning` tag or a short phrase); None = not declared

    def zeros(self, num_envs: int, device: torch.device | str = "cpu") -> torch.Tensor:
        return torch.zeros((num_envs, *self.shape), dtype=self.dtype, device=device)

    def contains(self, x: torch.Tensor) -> bool:
        """True when `x` ([N, *shape]) has this spec's shape, dtype and bounds."""
        if tuple(x.shape[1:]) != self.shape or x.dtype != self.dtype:
            return False
        if self.low is not None and bool((x < self.low).any()):
            return False
        return not (self.high is not None and bool((x > self.high).any()))

    def to_gym(self):
        """The single-env gymnasium space of this spec."""
        import gymnasium
        import numpy as np

        np_dtype = torch.empty(0, dtype=self.dtype).numpy().dtype
        if np_dtype == np.uint8 and self.low is None:
            return gymnasium.spaces.Box(0, 255, self.shape, np_dtype)
        low = -np.inf if self.low is None else self.low
        high = np.inf if self.high is None else self.high
        return gymnasium.spaces.Box(low, high, self.shape, np_dtype)


def text_spec(max_bytes: int = 128) -> Spec:
    """Spec of a language instruction stored as zero-padded UTF-8 bytes."""
    return Spec((max_bytes,), torch.uint8, 0, 255)


def encode_text(texts: list[str], max_bytes: int = 128, device: torch.device | str = "cpu") -> torch.Tensor:
    """Strings -> uint8 [len(texts), max_bytes]; raises if one does not fit.

    Fixed-width bytes keep language a plain tensor: it slices, stacks, moves
    between devices and stores in zarr like every other observation.
    """
    out = torch.zeros(len(texts), max_bytes, dtype=torch.uint8)
    for i, text in enumerate(texts):
        raw = text.encode("utf-8")
        if len(raw) > max_bytes:
            raise ValueError(f"instruction of {len(raw)} bytes exceeds max_bytes={max_bytes}: {text!r}")
        out[i, : len(raw)] = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    return out.to(device)


def decode_text(tokens: torch.Tensor) -> list[str]:
    """uint8 [N, L] -> N strings (inverse of `encode_text`)."""
    rows = tokens.to("cpu", torch.uint8).numpy()
    return [bytes(row).rstrip(b"\0").decode("utf-8") for row in rows]
