"""VLA policy: transformers backbone (fresh, or pretrained with its own tokenizer through
policies.lm.load), byte-level or tokenizer language, OpenVLA-style action bins, LoRA or a frozen backbone,
KV-cached or parallel (OpenVLA-OFT) chunk decoding, token log-probs for PPO/GRPO, OpenVLA-style checkpoint
directories."""

from policies.vla.policy import VLAConfig, VLAPolicy

__all__ = ["VLAConfig", "VLAPolicy"]
