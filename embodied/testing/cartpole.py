"""Batched cart-pole dynamics shared by the Isaac fakes (not a physics reference).

The classic equations of Barto, Sutton & Anderson (1983), with the constants of
gymnasium's CartPole-v1 (gravity 9.8 m/s^2, cart 1.0 kg, pole 0.1 kg, pole
half-length 0.5 m), integrated with explicit Euler.
"""

from __future__ import annotations

import torch

GRAVITY = 9.8  # m/s^2
CART_MASS = 1.0  # kg
POLE_MASS = 0.1  # kg
HALF_LENGTH = 0.5  # m, pivot to the pole's centre of mass


def cartpole_step(
    cart_pos: torch.Tensor, cart_vel: torch.Tensor, pole_pos: torch.Tensor, pole_vel: torch.Tensor,
    force: torch.Tensor, dt: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One Euler step of N cart-poles; force [N] in newtons on the cart. Returns the new state."""
    total = CART_MASS + POLE_MASS
    cos, sin = torch.cos(pole_pos), torch.sin(pole_pos)
    temp = (force + POLE_MASS * HALF_LENGTH * pole_vel.square() * sin) / total
    pole_acc = (GRAVITY * sin - cos * temp) / (HALF_LENGTH * (4.0 / 3.0 - POLE_MASS * cos.square() / total))
    cart_acc = temp - POLE_MASS * HALF_LENGTH * pole_acc * cos / total
    return cart_pos + dt * cart_vel, cart_vel + dt * cart_acc, pole_pos + dt * pole_vel, pole_vel + dt * pole_acc
