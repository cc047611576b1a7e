"""Autoregressive VLA policy: transformers backbone, byte-level language, OpenVLA-style action bins,
KV-cached chunk decoding, token log-probs for PPO/GRPO, OpenVLA-style checkpoint directories."""

from policies.vla.policy import VLAConfig, VLAPolicy

__all__ = ["VLAConfig", "VLAPolicy"]
