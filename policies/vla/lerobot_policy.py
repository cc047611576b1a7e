"""LeRobot's SmolVLA and pi0 behind our Policy contract: imitation with their own loss, and acting.

    policy = load_lerobot(path, "smolvla", observation_spec, action_spec)   # policies/vla/pretrained.py
    out = policy.act(obs, deterministic=True)  # out.action [N, A]: the first action of the predicted chunk
    out.extras["chunk"]                        # [N, H, A] the whole chunk, unnormalized (H = config.chunk_size)
    loss = policy.bc_loss(batch)               # LeRobot's own flow-matching loss on demonstrated chunks

Observations become LeRobot's batch keys through the checkpoint's `input_features`:

    obs["state"]          float [N, D]          -> observation.state  float [N, D]
    obs["images", cam]    uint8 [N, H, W, 3]    -> observation.images.<cam>  float [N, 3, H, W] in [0, 1]
    obs["language"]       uint8 [N, L] (bytes)  -> task: N strings

A feature the checkpoint reads and the observation lacks, or a camera the observation has and the
checkpoint does not read, is an error naming it (`privileged` state is simulator-only and never read).
LeRobot's own processor pipelines, saved beside the weights (policy_preprocessor.json,
policy_postprocessor.json), then normalize state and action with the checkpoint's statistics,
tokenize the task with the VLM's tokenizer and unnormalize the predicted actions, as LeRobot's
own training and evaluation scripts do; nothing is re-implemented here.

Acting calls `predict_action_chunk` and executes the chunk's first action, re-planning every step
(receding horizon, as policies/common/chunk_policy.py explains): LeRobot's `select_action` plays a
queued chunk open-loop, which a batched, auto-resetting VecEnv cannot honour per env.
deterministic=True starts the flow from zero noise (as policies/flow does); otherwise from
Gaussian noise.

These are flow-matching policies without an action likelihood: `evaluate` raises (BC and acting
only), and `value` is zeros (no critic). The device is chosen at load (load_lerobot's `device`):
LeRobot's preprocessor moves each batch there. pi0's `forward` (LeRobot 0.6.1) ignores
`action_is_pad`, so a padded chunk's rows (or a [B, A] batch's repeated action) count in its loss;
SmolVLA's masks them.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from embodied import keys
from embodied.policy import ActOutput, Policy
from embodied.specs import Spec, decode_text
from policies.common.chunk_policy import chunk_and_mask

LR_STATE, LR_IMAGE, LR_ACTION = "observation.state", "observation.images.", "action"  # LeRobot's batch keys


class LeRobotPolicy(Policy):
    """A LeRobot PreTrainedPolicy (SmolVLA, pi0) with its pre/post processors, speaking act / bc_loss."""

    def __init__(self, model: torch.nn.Module, preprocessor, postprocessor, kind: str,
                 action_spec: Spec | None = None):
        super().__init__()
        self.model, self.preprocessor, self.postprocessor, self.kind = model, preprocessor, postprocessor, kind
        config = model.config
        self.chunk_size, self.max_action_dim = config.chunk_size, config.max_action_dim
        self.action_dim = config.output_features[LR_ACTION].shape[0]
        self.state_dim = config.input_features[LR_STATE].shape[0] if LR_STATE in config.input_features else None
        # SmolVLA / pi0 fill `empty_camera_<i>` themselves (a checkpoint trained with more cameras than it sees)
        self.cameras = sorted(k.removeprefix(LR_IMAGE) for k in config.input_features
                              if k.startswith(LR_IMAGE) and not k.startswith(LR_IMAGE + "empty_camera_"))
        unknown = sorted(k for k in config.input_features if k != LR_STATE and not k.startswith(LR_IMAGE))
        if unknown:
            raise ValueError(f"LeRobot {kind} checkpoint reads {unknown}, which no observation of ours provides "
                             f"(ours: state -> {LR_STATE}, images/<cam> -> {LR_IMAGE}<cam>, language -> task)")
        if action_spec is not None and action_spec.shape != (self.action_dim,):
            raise ValueError(f"LeRobot {kind} checkpoint acts in {self.action_dim} dimensions; the action spec has "
                             f"shape {action_spec.shape}")
        self.low = None if action_spec is None else action_spec.low
        self.high = None if action_spec is None else action_spec.high

    def check_observation_spec(self, spec: dict[str, Spec]) -> None:
        """Raise naming the feature that `spec` (flat keys: state, images/<cam>, language) lacks or adds."""
        cameras = sorted(k.removeprefix(keys.IMAGES + "/") for k in spec if k.startswith(keys.IMAGES + "/"))
        self._check(keys.STATE in spec, cameras, keys.LANGUAGE in spec)
        if self.state_dim is not None and spec[keys.STATE].shape != (self.state_dim,):
            raise ValueError(f"LeRobot {self.kind} checkpoint reads {LR_STATE} of shape ({self.state_dim},); "
                             f"observation 'state' has shape {spec[keys.STATE].shape}")

    def _check(self, has_state: bool, cameras: list[str], has_language: bool) -> None:
        missing = [f"{LR_IMAGE}{c} (obs 'images/{c}')" for c in self.cameras if c not in cameras]
        if self.state_dim is not None and not has_state:
            missing.insert(0, f"{LR_STATE} (obs 'state')")
        if not has_language:  # the task prompt is always tokenized (TokenizerProcessorStep)
            missing.append("task (obs 'language')")
        if missing:
            raise ValueError(f"LeRobot {self.kind} checkpoint needs {', '.join(missing)}, missing from the observation")
        extra = [c for c in cameras if c not in self.cameras]
        if extra:
            raise ValueError(f"observation cameras {['images/' + c for c in extra]} are not read by the LeRobot "
                             f"{self.kind} checkpoint (its cameras: {self.cameras}); drop them from the env's cameras")

    def lerobot_batch(self, obs: TensorDict) -> dict[str, Any]:
        """Our observation [N] -> LeRobot's raw batch (before its preprocessor)."""
        images = obs.get(keys.IMAGES, None)
        cameras = sorted(images.keys()) if images is not None else []
        self._check(keys.STATE in obs.keys(), cameras, keys.LANGUAGE in obs.keys())
        batch: dict[str, Any] = {"task": decode_text(obs[keys.LANGUAGE])}
        if self.state_dim is not None:
            batch[LR_STATE] = obs[keys.STATE].to(torch.float32, copy=True)  # LeRobot's aloha mode edits in place
        for cam in self.cameras:
            batch[LR_IMAGE + cam] = obs[keys.IMAGES, cam].permute(0, 3, 1, 2).float() / 255.0  # LeRobot's [0, 1]
        return batch

    @torch.no_grad()
    def act(self, obs: TensorDict, deterministic: bool = False) -> ActOutput:
        batch = self.preprocessor(self.lerobot_batch(obs))
        n, device = obs.batch_size[0], next(self.model.parameters()).device
        noise = torch.zeros(n, self.chunk_size, self.max_action_dim, device=device) if deterministic else None
        training = self.model.training
        chunk = self.model.predict_action_chunk(batch, noise=noise)  # it switches the model to eval mode
        self.model.train(training)
        chunk = self.postprocessor(chunk).to(obs.device)  # [N, H, A] unnormalized
        action = chunk[:, 0]
        if self.low is not None or self.high is not None:
            action = action.clamp(self.low, self.high)
        zeros = action.new_zeros(n)
        return ActOutput(action, zeros, zeros, {"chunk": chunk})

    def evaluate(self, obs: TensorDict, action: torch.Tensor, extras: dict[str, Any] | None = None):
        raise ValueError(f"LeRobot's {self.kind} is a flow-matching policy without an action likelihood: BC and "
                         "acting only; PPO and GRPO need log-probs (policies/flow's noisy chain, or the token VLA)")

    def value(self, obs: TensorDict) -> torch.Tensor:
        return torch.zeros(obs.batch_size[0], device=obs.device)  # no critic

    def bc_loss(self, batch: TensorDict) -> torch.Tensor:
        """LeRobot's `forward` loss (flow matching, mean over real chunk rows) on batch[action] [B, H, A]
        chunks with optional batch[mask] [B, H], or [B, A] single actions (only a chunk's first row is real)."""
        chunk, mask = chunk_and_mask(batch, self.chunk_size, self.action_dim)
        raw = self.lerobot_batch(batch[keys.OBS])
        raw[LR_ACTION], raw["action_is_pad"] = chunk.to(torch.float32, copy=True), mask == 0
        loss, _ = self.model.forward(self.preprocessor(raw))
        return loss
