"""Flow-matching action expert over chunks with pi_RL's two likelihoods: Flow-Noise and Flow-SDE."""

from policies.flow.policy import FlowConfig, FlowPolicy

__all__ = ["FlowConfig", "FlowPolicy"]
