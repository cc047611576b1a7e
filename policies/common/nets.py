"""Small networks for generative action heads: time embedding, a residual MLP denoiser over
action chunks, an observation encoder (state + optional camera CNN) and a value MLP.

Shapes: a chunk is [B, H, A]; the condition (encoded observation) is [B, C]; a
diffusion/flow time is [B] (float: the DDPM step index or the flow time).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from tensordict import TensorDict
from torch import nn

from embodied import keys
from embodied.specs import Spec
from policies.common.normalizer import Normalizer


class SinusoidalEmbedding(nn.Module):
    """t [B] -> [B, dim] sin/cos features at geometric frequencies (Vaswani et al. 2017; Ho et al. 2020)."""

    def __init__(self, dim: int, max_period: float = 10_000.0):
        super().__init__()
        half = dim // 2
        self.register_buffer("freqs", torch.exp(-math.log(max_period) * torch.arange(half) / max(half - 1, 1)))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        angles = t.float().unsqueeze(-1) * self.freqs
        return torch.cat([angles.sin(), angles.cos()], -1)


class ResidualBlock(nn.Module):
    """x + W2 act(W1 LayerNorm(x)): a pre-norm residual MLP block, as DPPO's ResidualMLP (Ren et al. 2024)."""

    def __init__(self, width: int):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.Mish(), nn.Linear(width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.net(x)


class ChunkDenoiser(nn.Module):
    """(x [B, H, A], t [B], cond [B, C]) -> [B, H, A]: noise, sample or velocity, by how it is trained.

    An MLP over the flattened chunk, as DPPO's DiffusionMLP (Ren et al. 2024): for
    low-dimensional states and short chunks it matches a 1D temporal U-Net at a
    fraction of the cost on a CPU.
    """

    def __init__(self, horizon: int, action_dim: int, cond_dim: int, width: int = 256, blocks: int = 2,
                 time_dim: int = 32):
        super().__init__()
        self.horizon, self.action_dim = horizon, action_dim
        flat = horizon * action_dim
        self.time = nn.Sequential(SinusoidalEmbedding(time_dim), nn.Linear(time_dim, time_dim * 2), nn.Mish(),
                                  nn.Linear(time_dim * 2, time_dim))
        self.inp = nn.Linear(flat + time_dim + cond_dim, width)
        self.blocks = nn.Sequential(*[ResidualBlock(width) for _ in range(blocks)])
        self.out = nn.Sequential(nn.LayerNorm(width), nn.Mish(), nn.Linear(width, flat))

    def features(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """The last hidden layer [B, width] (also read by a noise head)."""
        h = torch.cat([x.flatten(1), self.time(t), cond], -1)
        return self.blocks(self.inp(h))

    def forward(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        return self.out(self.features(x, t, cond)).view(-1, self.horizon, self.action_dim)


class SpatialSoftmax(nn.Module):
    """[B, C, H, W] -> [B, 2C]: the expected (x, y) in [-1, 1] of each channel's softmax over the image:
    one keypoint per channel (Levine et al. 2016, "End-to-End Training of Deep Visuomotor Policies";
    robomimic's and Diffusion Policy's image encoders). Where a thing is, not what: what a reaching
    policy needs from a few-pixel target."""

    def __init__(self, height: int, width: int):
        super().__init__()
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, height), torch.linspace(-1, 1, width), indexing="ij")
        self.register_buffer("grid", torch.stack([xs.flatten(), ys.flatten()], -1))  # [H*W, 2]
        self.log_temperature = nn.Parameter(torch.zeros(()))  # learned, as in Levine et al.

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        attention = torch.softmax(x.flatten(2) * torch.exp(-self.log_temperature), -1)  # [B, C, H*W]
        return (attention @ self.grid).flatten(1)


class ImageEncoder(nn.Module):
    """uint8 [B, H, W, 3] -> [B, out]: three stride-2 convolutions (a smaller NatureCNN, Mnih et al. 2015),
    then global average pooling (as Diffusion Policy's ResNet, Chi et al. 2023) or a spatial softmax
    (keypoints, SpatialSoftmax above), and a linear layer. `size` (image height, width) is needed only by
    the spatial softmax."""

    def __init__(self, out: int = 64, channels: tuple[int, int, int] = (32, 64, 64),
                 pool: Literal["avg", "spatial_softmax"] = "avg", size: tuple[int, int] = (64, 64)):
        super().__init__()
        c1, c2, c3 = channels
        convs = [nn.Conv2d(3, c1, 5, stride=2, padding=2), nn.Mish(), nn.Conv2d(c1, c2, 3, stride=2, padding=1),
                 nn.Mish(), nn.Conv2d(c2, c3, 3, stride=2, padding=1)]
        if pool == "avg":
            head = [nn.Mish(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c3, out)]
        elif pool == "spatial_softmax":
            height, width = size
            for _ in range(3):  # each stride-2 convolution above: ceil(side / 2)
                height, width = (height + 1) // 2, (width + 1) // 2
            head = [SpatialSoftmax(height, width), nn.Linear(2 * c3, out)]
        else:
            raise ValueError(f"pool={pool!r}; valid choices: 'avg', 'spatial_softmax'")
        self.net = nn.Sequential(*convs, *head)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.net(image.permute(0, 3, 1, 2).float() / 255.0)


class CameraEncoder(nn.ModuleDict):
    """obs TensorDict -> [B, F * cameras]: one ImageEncoder per `images/<cam>` of the spec, features concatenated
    in camera-name order. `ImageEncoder` keyword arguments (channels, pool) pass through."""

    def __init__(self, observation_spec: dict[str, Spec], features: int = 64, **encoder: Any):
        cams = sorted(k.split("/", 1)[1] for k in observation_spec if k.startswith(keys.IMAGES + "/"))
        super().__init__({
            cam: ImageEncoder(features, size=observation_spec[f"{keys.IMAGES}/{cam}"].shape[:2], **encoder)
            for cam in cams
        })
        self.cameras = cams
        self.dim = features * len(cams)

    def forward(self, obs: TensorDict) -> torch.Tensor:
        return torch.cat([self[cam](obs[keys.IMAGES, cam]) for cam in self.cameras], -1)


class ObsEncoder(nn.Module):
    """obs TensorDict -> cond [B, C]: the normalized `state`, plus a CNN feature per `images/<cam>`."""

    def __init__(self, observation_spec: dict[str, Spec], image_features: int = 64):
        super().__init__()
        if keys.STATE not in observation_spec:
            raise ValueError(f"generative policies need a 'state' observation; the env gives {sorted(observation_spec)}")
        self.state_dim = observation_spec[keys.STATE].shape[0]
        self.state_norm = Normalizer(self.state_dim)
        self.images = CameraEncoder(observation_spec, image_features)
        self.cameras = self.images.cameras
        self.dim = self.state_dim + self.images.dim

    def forward(self, obs: TensorDict) -> torch.Tensor:
        state = self.state_norm(obs[keys.STATE])
        return torch.cat([state, self.images(obs)], -1) if self.cameras else state


def value_mlp(in_dim: int, hidden: tuple[int, ...]) -> nn.Sequential:
    """A critic V(cond) -> [B, 1]; orthogonal init (Andrychowicz et al. 2021)."""
    layers: list[nn.Module] = []
    sizes = [in_dim, *hidden, 1]
    for i in range(len(sizes) - 1):
        linear = nn.Linear(sizes[i], sizes[i + 1])
        nn.init.orthogonal_(linear.weight, 1.0 if i == len(sizes) - 2 else math.sqrt(2))
        nn.init.zeros_(linear.bias)
        layers += [linear, nn.Mish()] if i < len(sizes) - 2 else [linear]
    return nn.Sequential(*layers)


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Elementwise log N(x; mean, std^2), the same number torch.distributions.Normal gives."""
    return -0.5 * ((x - mean) / std).square() - std.log() - 0.5 * math.log(2 * math.pi)


def gaussian_entropy(std: torch.Tensor) -> torch.Tensor:
    """Elementwise entropy of N(., std^2): log std + 0.5 log(2 pi e)."""
    return std.log() + 0.5 * math.log(2 * math.pi * math.e)
