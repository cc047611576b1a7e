"""The VLA's networks, built from Hugging Face `transformers` model classes.

    lm = build_backbone(config, vocab_size)       # LlamaForCausalLM / GPT2LMHeadModel, random init, offline
    vision = build_vision(config, image_size)     # SiglipVisionModel / ViTModel / a small CNN -> patch tokens,
                                                  # or keypoints: one token per camera

Both are ordinary transformers models: they save and load with `save_pretrained`
/ `from_pretrained`, and a pretrained checkpoint of the same class drops in
(policies/vla/pretrained.py). transformers is imported here only, and only when a network is built
(`_transformers`), so neither `import embodied` nor reading `VLAPolicy.Config` (`embodied train` reads every
policy's) pulls it in (~1 s); where it is missing, building the policy through the registry names the extra.
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch import nn

from policies.common.nets import ImageEncoder
from policies.vla.tokenizer import BOS_ID, EOS_ID, PAD_ID


def _transformers() -> ModuleType:
    """transformers, imported now; where it is missing, one clear error naming the extra (embodied.registry's
    `build` turns it into a MissingExtraError)."""
    try:
        import transformers
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError("the VLA policy needs transformers: pip install -e '.[transformers]'",
                                  name="transformers") from err
    return transformers


def build_backbone(config, vocab_size: int) -> nn.Module:
    """A randomly initialised causal LM of `config.backbone` with the config's sizes."""
    transformers = _transformers()
    if config.backbone == "llama":
        lm_config = transformers.LlamaConfig(
            vocab_size=vocab_size, hidden_size=config.hidden, intermediate_size=config.hidden * 4,
            num_hidden_layers=config.layers, num_attention_heads=config.heads,
            num_key_value_heads=config.heads, max_position_embeddings=config.max_positions,
            tie_word_embeddings=False, pad_token_id=PAD_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID)
        return transformers.LlamaForCausalLM(lm_config)
    lm_config = transformers.GPT2Config(vocab_size=vocab_size, n_embd=config.hidden, n_layer=config.layers,
                                        n_head=config.heads, n_positions=config.max_positions,
                                        bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID)
    return transformers.GPT2LMHeadModel(lm_config)


class CNNPatches(nn.Module):
    """uint8-scaled images [B, 3, H, W] -> [B, P, C] patch tokens: two stride-2 convolutions and
    a 4x4 adaptive pool (16 tokens), for the CPU where even a tiny ViT dominates the step."""

    def __init__(self, channels: int):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 32, 5, stride=2, padding=2), nn.GELU(),
                                 nn.Conv2d(32, channels, 3, stride=2, padding=1), nn.GELU(), nn.AdaptiveAvgPool2d(4))
        self.dim = channels

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.net(pixels).flatten(2).transpose(1, 2)


class KeypointTokens(nn.Module):
    """[B, 3, H, W] in [-1, 1] -> [B, 1, C]: the image MLP's encoder (three stride-2 convolutions, one spatial-softmax
    keypoint per channel, a linear layer: policies/common/nets.py ImageEncoder, the widths of mujoco_reach_rgb) as one
    token per camera. It keeps where a few-pixel target is, which CNNPatches' 4x4 average pool loses (the image
    MLP's goal error: 5.4 cm with the spatial softmax, 17 cm average-pooled; benchmarks/RESULTS.md)."""

    def __init__(self, channels: int, image_size: int):
        super().__init__()
        self.encoder = ImageEncoder(channels, channels=(16, 32, 32), pool="spatial_softmax", size=(image_size, image_size))
        self.dim = channels

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.encoder.net((pixels + 1) / 2).unsqueeze(1)  # ImageEncoder's [0, 1] scaling


class TransformersPatches(nn.Module):
    """A transformers vision tower (SigLIP or ViT) -> its last hidden state [B, P, C], as OpenVLA's
    Prismatic backbone feeds patch features (not a pooled vector) to the language model."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.dim = model.config.hidden_size

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=pixels).last_hidden_state


def build_vision(config, image_size: int) -> nn.Module:
    """The image encoder `config.vision` for square images of `image_size` pixels."""
    if config.vision == "cnn":
        return CNNPatches(config.vision_hidden)
    if config.vision == "keypoints":
        return KeypointTokens(config.vision_hidden, image_size)
    transformers = _transformers()
    common = dict(hidden_size=config.vision_hidden, intermediate_size=config.vision_hidden * 4,
                  num_hidden_layers=config.vision_layers, num_attention_heads=config.heads,
                  image_size=image_size, patch_size=config.patch_size)
    if config.vision == "siglip":
        return TransformersPatches(transformers.SiglipVisionModel(transformers.SiglipVisionConfig(**common)))
    return TransformersPatches(transformers.ViTModel(transformers.ViTConfig(**common), add_pooling_layer=False))
