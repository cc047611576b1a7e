"""Language-model policy for the language-agent path: a transformers causal LM (default SmolLM2-135M-Instruct
from a packaged GGUF, converted once to a safetensors cache), token-in/token-out chat encoding, KV-cached
sampling with exact per-token log-probs, LoRA or full fine-tuning."""

from policies.lm.chat import ChatEncoder
from policies.lm.policy import ATTENTION, TOKENS, LMConfig, LMPolicy
from policies.lm.sampling import Generation

__all__ = ["ATTENTION", "TOKENS", "ChatEncoder", "Generation", "LMConfig", "LMPolicy"]
