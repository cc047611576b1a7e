"""VLA: image patches + state + language -> a causal transformer -> action tokens.

    policy = VLAPolicy(VLAPolicy.Config(), observation_spec, action_spec)
    out = policy.act(obs)                      # out.action [N, A]: the decoded chunk's first action
    out.extras["tokens"]                       # [N, H * A] the sampled action-token ids (the MDP action)
    out.extras["token_log_prob"]               # [N, H * A] their log-probs; out.log_prob: their sum (token_ratios: these)
    log_prob, entropy, value = policy.evaluate(obs, out.action, out.extras)   # one teacher-forced pass
    loss = policy.bc_loss(batch)               # token cross-entropy on demo chunks [B, H, A] or [B, A]

The sequence fed to the backbone through `inputs_embeds` (OpenVLA, Kim et al.
2024: projected vision patches, then the prompt, then action tokens):

    [patches of each camera] [state] [BOS] [language bytes, fixed width L] [a_1 ... a_{H*A}]
     `------------------------ prefix, P positions ---------------------'
    [patches of each camera] [state] [pad ... instruction's own token ids] [a_1 ... a_{H*A}]   (pretrained)

Language keeps its full zero-padded width, so a sample's tokens and positions do
not depend on which other samples share its batch: act on a rollout batch and
evaluate on a shuffled minibatch see the same sequence. The value head reads the
last hidden state at the last prefix position, the one that predicts a_1.

Backbones. `backbone=llama|gpt2` builds a fresh random causal LM of the config's
sizes and reads the instruction as bytes (above). A name in
policies.lm.load.MODELS (smollm2-135m-instruct) or a local causal-LM directory
loads that model and its tokenizer through `load_lm`, the loader of the
language-agent path; the instruction is then the tokenizer's own ids at a fixed
width, left-padded, in place of `[BOS] [bytes]` (policies/vla/tokenizer.py,
InstructionTokenizer), and the action tokens are the vocabulary's last n_bins
ids, as OpenVLA overwrites Llama 2's 256 least used tokens (Kim et al. 2024,
Sec. 3.2): no new embedding rows, so the backbone's output head scores the
actions from the start. The state and vision projections always start fresh.
`lora_rank > 0` trains LoRA adapters (peft) instead of the backbone;
`freeze_backbone` trains none of it: only the projections and the value head /
critic learn, the projected state and image acting as a learned prompt for the
frozen model (LLaVA's first stage trains its projector alone, Liu et al. 2023).
Checkpoints leave out what `backbone` supplies again (see state_dict).

Decoding. H*A tokens, one per step, each over the action bins only (logits of
the other ids are dropped), at `temperature` (SimpleVLA-RL, Li et al. 2025,
samples rollouts at raised temperature); greedy when deterministic. With
`use_cache` the prefix runs once and every later step feeds one token with the
backbone's `past_key_values`. Log-probs are of the tempered distribution the
token was drawn from, so PPO's ratio compares like with like.

Parallel decoding (`decoding=parallel`; OpenVLA-OFT, Kim et al. 2025, "Fine-Tuning
Vision-Language-Action Models: Optimizing Speed and Success", arXiv:2502.19645):
the action positions hold H*A learned placeholder embeddings, one per action slot,
in place of the sampled tokens, and ONE backbone pass gives every slot's logits
over the bins; the slot's own position predicts it. (OFT feeds empty embeddings
there; learned ones tell the slots apart under a causal mask too.) The slots are sampled independently
given the prefix, so a chunk's log-prob is the exact sum of the slots' log-probs
(one ratio per slot with token_ratios), and act, evaluate and bc_loss run the
same single pass: an env step costs one backbone forward.

    [patches] [state] [BOS] [language] [q_1 ... q_{H*A}]    q_k: learned, predicts a_k

As in OFT, the action slots attend to each other bidirectionally and to the
whole prefix, while the prefix stays causal: a 4D additive attention mask
(`slot_attention_mask`; transformers takes it as given, for Llama and GPT-2 with
sdpa and eager attention alike). The prefix never sees the slots, so the last
prefix position, where the value head reads, is a function of the prefix alone
and `value` needs no placeholders.

`action_head=l1` (parallel only) replaces the bins by OFT's continuous head: an
MLP from each slot's last hidden state to its normalized action value, trained
by L1 regression (Kim et al. 2025). It is a point estimate with no
distribution, so it is for BC and evaluation only: act(deterministic=False) and
evaluate, which PPO and GRPO need, refuse it.

Action chunks are re-planned every step (receding horizon), as in
policies/common/chunk_policy.py: the MDP action is the token sequence, of
which the executed action is a function.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from tensordict import TensorDict
from torch import nn

from embodied import keys
from embodied.config import ConfigError, check
from embodied.policy import ActOutput, Policy
from embodied.specs import Spec
from policies.common.chunk_policy import chunk_and_mask
from policies.common.nets import value_mlp
from policies.common.normalizer import Normalizer
from policies.lm.load import MODELS, check_causal_lm_dir, load_lm
from policies.vla.backbone import build_backbone, build_vision
from policies.vla.tokenizer import BOS_ID, BYTE_OFFSET, PAD_ID, ActionTokenizer, InstructionTokenizer, TokenLayout

RANDOM_BACKBONES = ("llama", "gpt2")  # fresh, randomly initialised, sized by the config; byte-level language
L1_NO_DISTRIBUTION = ("VLAPolicy.{} with policy.action_head=l1: the L1 head regresses one action and has no "
                      "distribution to sample or score (BC and evaluation only); PPO and GRPO need action_head=bins")


@dataclass(frozen=True)
class VLAConfig:
    # "llama" / "gpt2": a fresh random causal LM of that class and the sizes below (OpenVLA uses Llama 2);
    # a name in policies.lm.load.MODELS (smollm2-135m-instruct) or a causal-LM directory: that pretrained model
    # and its own tokenizer, loaded by policies.lm.load.load_lm (hidden, layers, heads, max_positions and
    # vocab_extra then come from the model)
    backbone: str = "llama"
    # fixed width of the tokenized instruction with a pretrained backbone; 0 = the language observation's byte
    # width plus the tokenizer's special tokens (enough for byte-level BPE, as SmolLM2's: a token is >= 1 byte)
    language_tokens: int = 0
    # LoRA (Hu et al. 2021) on every linear layer of the backbone but its output head (peft's "all-linear", as
    # policies/lm); 0 = no adapters. 16 / 32: TRL's ModelConfig defaults (lora_r, lora_alpha), as LMConfig
    lora_rank: int = 0
    # a pretrained backbone's architecture and tokenizer with freshly initialised weights (transformers' init) in
    # place of its trained ones: the same-size random control for what pretraining brings (policies.lm.load.load_lm)
    random_weights: bool = False
    lora_alpha: float = 32.0
    freeze_backbone: bool = False  # train none of the backbone: only the projections and the value head / critic
    hidden: int = 64  # backbone width: tiny, so CPU tests and rollouts run in seconds (OpenVLA: 4096)
    layers: int = 2  # backbone transformer layers (OpenVLA: 32)
    heads: int = 4  # attention heads of backbone and vision tower
    max_positions: int = 512  # backbone position table (prefix + action tokens must fit)
    n_bins: int = 256  # action bins per dimension (OpenVLA, Kim et al. 2024, Sec. 3.2)
    vocab_extra: int = 0  # ids beyond specials + 256 bytes + n_bins (room for other tokens)
    horizon: int = 1  # actions per decoded chunk (H); the first one is executed
    temperature: float = 1.0  # sampling temperature of act(deterministic=False) and of its log-probs
    use_cache: bool = True  # decode with past_key_values (False: re-run the whole sequence per token)
    # "autoregressive": H*A tokens, one backbone pass each, each conditioned on the ones before (OpenVLA);
    # "parallel": every action slot from one pass over learned placeholders, slots independent given the
    # prefix (OpenVLA-OFT's parallel decoding, Kim et al. 2025); see the module docstring
    decoding: Literal["autoregressive", "parallel"] = "autoregressive"
    # "bins": a categorical over n_bins per action token (OpenVLA); "l1": OpenVLA-OFT's continuous L1-regression
    # head on the parallel slots, deterministic, so for BC only (no log-probs for PPO / GRPO); needs parallel
    action_head: Literal["bins", "l1"] = "bins"
    # one PPO ratio per action token (log_prob [N, K]; RLinf-VLA's token-level log-prob, Zang et al. 2025) instead
    # of the decode's joint log-prob [N], whose ratio moves K times as fast (as DPPO's per-step ratio for diffusion)
    token_ratios: bool = False
    # "head": a linear value head on the backbone's last prefix state (one network, as RLinf-VLA's OpenVLA critic);
    # "mlp": a separate MLP over the normalized state, with no gradient into the backbone (DPPO's critic beside its
    # actor, Ren et al. 2024). On the tiny CPU backbone the shared head's value loss dominated the clipped gradient
    # and PPO raised the token entropy instead of the success (benchmarks/RESULTS.md, "VLA policy")
    critic: Literal["head", "mlp"] = "head"
    critic_hidden: tuple[int, ...] = (256, 256)  # widths of the "mlp" critic (DPPO's critic: 256 x 3)
    # the "mlp" critic also reads obs["privileged"] (asymmetric actor-critic, Pinto et al. 2018): where the actor
    # must find the goal in its cameras, the critic is told it (as policy=mlp's asymmetric_critic)
    asymmetric_critic: bool = False
    # weight of an auxiliary loss in BC: a linear head on the camera features regresses obs["privileged"] (the goal the
    # cameras show; standardized), so the vision tower learns where things are instead of which demo frame it sees.
    # Training-time supervision only, as Levine et al. 2016 ("End-to-End Training of Deep Visuomotor Policies")
    # pretrained their spatial-softmax vision layers on object positions; acting reads pixels alone. 0 = off
    privileged_aux: float = 0.0
    # image encoder for images/<cam> observations: patch tokens (siglip, vit, cnn), or one spatial-softmax keypoint
    # token per camera (keypoints: where a small target is, as the image MLP's encoder)
    vision: Literal["siglip", "vit", "cnn", "keypoints"] = "siglip"
    vision_hidden: int = 32  # vision tower width
    # keep the vision tower's weights as built, loaded (init_from a BC run's checkpoint) or pretrained by the run's
    # pipeline.perception stage: BC and RL then train the rest, and skip the tower's backward pass
    freeze_vision: bool = False
    vision_layers: int = 1  # vision tower layers
    patch_size: int = 8  # ViT/SigLIP patch size in pixels
    image_size: int = 0  # square side images are resized to; 0 = the camera's height
    # FiLM (Perez et al. 2018) of the state projection by the instruction, as RT-1 conditions its image tokens on the
    # instruction's embedding (Brohan et al. 2022): the mean input embedding of the instruction's tokens scales and
    # shifts the projection's hidden layer, so a word can pick which part of the state matters (which ball) before
    # the backbone sees it. Without it the words never reached the actions (benchmarks/RESULTS.md, "Does the VLA
    # follow its instruction?"). Starts as the identity (zero-initialised)
    language_film: bool = False

    def __post_init__(self):
        if self.backbone not in RANDOM_BACKBONES and self.backbone not in MODELS:
            check(Path(self.backbone).is_dir(), f"policy.backbone={self.backbone!r}: valid choices "
                  f"{', '.join([*RANDOM_BACKBONES, *MODELS])} or a causal-LM directory (no such directory)")
            try:
                check_causal_lm_dir(Path(self.backbone))
            except ValueError as err:
                raise ConfigError(f"policy.backbone={self.backbone!r}: {err}") from err
        check(not self.random_weights or self.backbone not in RANDOM_BACKBONES,
              f"policy.random_weights=true re-initialises a pretrained backbone; policy.backbone={self.backbone} is "
              "already random")
        check(self.language_tokens >= 0, f"policy.language_tokens={self.language_tokens} must be >= 0")
        check(self.lora_rank >= 0 and self.lora_alpha > 0,
              f"policy.lora_rank={self.lora_rank} must be >= 0 and policy.lora_alpha={self.lora_alpha} > 0")
        check(not (self.lora_rank and self.freeze_backbone),
              "policy.lora_rank > 0 already freezes the backbone (only adapters train): unset policy.freeze_backbone")
        check(self.vision in ("siglip", "vit", "cnn", "keypoints"),
              f"policy.vision={self.vision!r}: valid choices siglip, vit, cnn, keypoints")
        check(self.hidden >= 1 and self.layers >= 1 and self.heads >= 1 and self.hidden % self.heads == 0,
              f"policy.hidden={self.hidden} must be a positive multiple of policy.heads={self.heads}")
        check(self.vision_hidden % self.heads == 0, f"policy.vision_hidden={self.vision_hidden} must divide by heads")
        check(self.n_bins >= 2 and self.vocab_extra >= 0, "policy.n_bins must be >= 2 and policy.vocab_extra >= 0")
        check(self.horizon >= 1, f"policy.horizon={self.horizon} must be >= 1")
        check(self.temperature > 0, f"policy.temperature={self.temperature} must be > 0")
        check(self.privileged_aux >= 0, f"policy.privileged_aux={self.privileged_aux} must be >= 0")
        check(self.decoding in ("autoregressive", "parallel"),
              f"policy.decoding={self.decoding!r}: valid choices autoregressive, parallel")
        check(self.action_head in ("bins", "l1"), f"policy.action_head={self.action_head!r}: valid choices bins, l1")
        check(self.action_head == "bins" or self.decoding == "parallel",
              "policy.action_head=l1 regresses the parallel slots: set policy.decoding=parallel")
        check(self.critic in ("head", "mlp"), f"policy.critic={self.critic!r}: valid choices head, mlp")
        check(not self.asymmetric_critic or self.critic == "mlp",
              "policy.asymmetric_critic=true needs policy.critic=mlp (the value head reads the backbone only)")
        check(self.patch_size >= 1 and self.image_size >= 0, "policy.patch_size >= 1 and policy.image_size >= 0")


class VLAPolicy(Policy):
    Config = VLAConfig

    def __init__(self, config: VLAConfig, observation_spec: dict[str, Spec], action_spec: Spec,
                 backbone: nn.Module | None = None, tokenizer: Any = None):
        """`backbone`: a transformers causal LM to use instead of the one `config.backbone` names (a checkpoint's);
        `tokenizer`: its tokenizer, needed with it where `config.backbone` is a pretrained model."""
        super().__init__()
        if len(action_spec.shape) != 1:
            raise ValueError(f"VLAPolicy needs a flat action spec [A], got {action_spec.shape}")
        self.config = config
        self.observation_spec, self.action_spec = dict(observation_spec), action_spec
        self.action_dim = action_spec.shape[0]
        self.low, self.high = action_spec.low, action_spec.high
        pretrained = config.backbone not in RANDOM_BACKBONES
        if backbone is None and pretrained:
            backbone, tokenizer = load_lm(config.backbone, random_weights=config.random_weights)  # the LM path's loader
        elif backbone is None:
            backbone = build_backbone(config, BYTE_OFFSET + 256 + config.n_bins + config.vocab_extra)
        if pretrained and tokenizer is None:
            raise ValueError(f"policy.backbone={config.backbone!r} reads language with its own tokenizer: "
                             "pass the backbone's tokenizer with it")
        hidden = backbone.config.hidden_size
        self.layout = TokenLayout(backbone.config.vocab_size, config.n_bins, None if pretrained else BYTE_OFFSET)
        if config.lora_rank > 0:
            import peft

            lora = peft.LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha, lora_dropout=0.0,
                                   target_modules="all-linear", bias="none", task_type="CAUSAL_LM")
            with warnings.catch_warnings():  # peft 0.21 calls transformers' deprecated is_gradient_checkpointing
                warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
                backbone = peft.get_peft_model(backbone, lora)
        elif config.freeze_backbone:
            backbone.requires_grad_(False)
        self.lm = backbone
        self.tokenizer = tokenizer if pretrained else None
        self.bins = ActionTokenizer(config.n_bins)
        self.tokens = config.horizon * self.action_dim  # K action tokens per decode
        self.action_queries = None  # parallel decoding's placeholders [K, D], one per action slot
        if config.decoding == "parallel":
            # std 0.02: the embedding init of Llama and GPT-2 (transformers' initializer_range default)
            self.action_queries = nn.Parameter(torch.randn(self.tokens, hidden) * 0.02)
        self.l1_head = None  # OFT's MLP action head: a slot's hidden state -> its normalized action value
        if config.action_head == "l1":
            self.l1_head = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, 1))

        self.cameras = sorted(k.split("/", 1)[1] for k in observation_spec if k.startswith(keys.IMAGES + "/"))
        self.vision = self.projector = None
        if self.cameras:
            height = observation_spec[f"{keys.IMAGES}/{self.cameras[0]}"].shape[0]
            self.image_size = config.image_size or height
            check(self.image_size % config.patch_size == 0,
                  f"policy.patch_size={config.patch_size} must divide the image side {self.image_size}")
            self.vision = build_vision(config, self.image_size)
            self.vision.requires_grad_(not config.freeze_vision)
            # Prismatic/OpenVLA project patch features into the LM with a small MLP
            self.projector = nn.Sequential(nn.Linear(self.vision.dim, hidden), nn.GELU(), nn.Linear(hidden, hidden))
        self.state_dim = observation_spec[keys.STATE].shape[0] if keys.STATE in observation_spec else 0
        self.state_norm = Normalizer(max(self.state_dim, 1))
        self.state_proj = nn.Sequential(nn.Linear(max(self.state_dim, 1), hidden), nn.GELU(), nn.Linear(hidden, hidden))
        self.has_language = keys.LANGUAGE in observation_spec
        self.film = None  # language_film: the instruction's mean embedding -> scale, shift of state_proj's hidden
        if config.language_film:
            check(self.has_language and self.state_dim > 0, "policy.language_film=true conditions the 'state' "
                  f"projection on the 'language' observation: this env gives {sorted(observation_spec)}")
            width = backbone.get_input_embeddings().embedding_dim
            # layer-normed first: input embeddings start at std 0.02 (Llama, GPT-2), which would leave the FiLM
            # layer a near-zero input and gradient
            self.film = nn.Sequential(nn.LayerNorm(width, elementwise_affine=False), nn.Linear(width, 2 * hidden))
            nn.init.zeros_(self.film[1].weight)
            nn.init.zeros_(self.film[1].bias)
        self.text = None  # the backbone's own tokenizer over the language bytes (a pretrained backbone)
        if self.tokenizer is not None and self.has_language:
            width = config.language_tokens or (observation_spec[keys.LANGUAGE].shape[0]
                                               + self.tokenizer.num_special_tokens_to_add())
            self.text = InstructionTokenizer(self.tokenizer, width)
        offset = scale = None
        if self.low is not None and self.high is not None:  # until fitted: the spec's box onto [-1, 1]
            offset = torch.full((self.action_dim,), (self.high + self.low) / 2)
            scale = torch.full((self.action_dim,), 2.0 / (self.high - self.low))
        self.action_norm = Normalizer(self.action_dim, offset, scale)
        self.aux_head = None  # privileged_aux: camera features -> standardized privileged observation
        if config.privileged_aux:
            check(bool(self.cameras) and keys.PRIVILEGED in observation_spec,
                  "policy.privileged_aux > 0 regresses the 'privileged' observation from camera images: this env "
                  f"gives {sorted(observation_spec)}")
            priv_dim = observation_spec[keys.PRIVILEGED].shape[0]
            self.privileged_norm = Normalizer(priv_dim)
            self.aux_head = nn.Linear(self.vision.dim * len(self.cameras), priv_dim)
        self.value_head = self.critic = None
        if config.critic == "mlp":
            check(self.state_dim > 0, "policy.critic=mlp reads the 'state' observation, which this env lacks")
            check(not config.asymmetric_critic or keys.PRIVILEGED in observation_spec,
                  "policy.asymmetric_critic=true needs a 'privileged' observation, which this env lacks")
            priv_dim = observation_spec[keys.PRIVILEGED].shape[0] if config.asymmetric_critic else 0
            self.critic = value_mlp(self.state_dim + priv_dim, config.critic_hidden)
        else:
            self.value_head = nn.Linear(hidden, 1)
            nn.init.zeros_(self.value_head.weight)  # start at V = 0: the LM's hidden scale says nothing of returns
            nn.init.zeros_(self.value_head.bias)
        # dropout off everywhere (GPT-2 and many checkpoints ship with 0.1): act's log-probs must be a
        # fixed function of the weights for PPO's ratio, as veRL and OpenRLHF zero the actor's dropout
        for module in self.modules():
            if isinstance(module, nn.Dropout):
                module.p = 0.0

    # --- sequence pieces ----------------------------------------------------------------
    def camera_features(self, obs: TensorDict) -> list[torch.Tensor]:
        """The vision tower's tokens of each camera, in camera-name order: [B, P, C] each."""
        features = []
        for cam in self.cameras:
            pixels = obs[keys.IMAGES, cam].permute(0, 3, 1, 2).float() / 127.5 - 1.0  # SigLIP's [-1, 1] scaling
            if pixels.shape[-1] != self.image_size or pixels.shape[-2] != self.image_size:
                pixels = F.interpolate(pixels, size=(self.image_size, self.image_size), mode="bilinear")
            features.append(self.vision(pixels))
        return features

    def prefix(self, obs: TensorDict, features: list[torch.Tensor] | None = None) -> torch.Tensor:
        """obs [B] -> prefix embeddings [B, P, D]; `features`: camera_features(obs), if already computed."""
        embed = self.lm.get_input_embeddings()
        parts = [self.projector(f) for f in (self.camera_features(obs) if features is None else features)]
        text = words = None  # the instruction's ids [B, L] (the backbone's own tokenizer's, or bytes), embedded once
        if self.has_language:
            language = obs[keys.LANGUAGE]
            text = self.text(language) if self.tokenizer is not None else self.layout.text_ids(language)
            words = embed(text)
        if self.state_dim:
            parts.append(self.project_state(obs[keys.STATE], text, words).unsqueeze(1))
        if self.tokenizer is not None:  # the backbone's own ids, specials as its tokenizer adds them; no bytes
            if words is not None:
                parts.append(words)
            return torch.cat(parts, 1)
        bos = torch.full((obs.batch_size[0], 1), BOS_ID, dtype=torch.long, device=self.state_norm.offset.device)
        parts.append(embed(bos))
        if words is not None:
            parts.append(words)
        return torch.cat(parts, 1)

    def project_state(self, state: torch.Tensor, text: torch.Tensor | None,
                      words: torch.Tensor | None = None) -> torch.Tensor:
        """state [B, S] -> its token [B, D]; with language_film, the hidden layer scaled and shifted by the mean input
        embedding of the instruction's ids text [B, L] (padding left out); `words`: those embeddings [B, L, D], if
        already looked up."""
        if self.film is None:
            return self.state_proj(self.state_norm(state))
        hidden = self.state_proj[1](self.state_proj[0](self.state_norm(state)))
        pad = self.text.pad_id if self.text is not None else PAD_ID
        keep = (text != pad).unsqueeze(-1).to(hidden.dtype)
        words = self.lm.get_input_embeddings()(text) if words is None else words
        words = (words * keep).sum(1) / keep.sum(1).clamp(min=1)
        scale, shift = self.film(words.to(hidden.dtype)).chunk(2, -1)
        return self.state_proj[2](hidden * (1 + scale) + shift)

    def bin_log_probs(self, logits: torch.Tensor, temperature: float) -> torch.Tensor:
        """Full-vocabulary logits [..., V] -> log-probs over the action bins [..., n_bins]."""
        return torch.log_softmax(logits[..., self.layout.first_action:].float() / temperature, -1)

    # --- the Policy contract -------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: TensorDict, deterministic: bool = False) -> ActOutput:
        if self.l1_head is not None:
            if not deterministic:
                raise ValueError(L1_NO_DISTRIBUTION.format("act(deterministic=False)"))
            chunk, value = self.regress(obs)  # [B, H, A], normalized
            action = self.action_norm.inverse(chunk[:, 0])
            if self.low is not None or self.high is not None:
                action = action.clamp(self.low, self.high)
            # a point estimate has no log-prob: zeros fill the contract's field, which evaluation ignores
            return ActOutput(action, torch.zeros_like(value), value, {"chunk": chunk})
        ids, token_log_prob, value = self.decode(obs, deterministic)
        bins = self.layout.action_bins(ids).view(-1, self.config.horizon, self.action_dim)
        log_prob = token_log_prob if self.config.token_ratios else token_log_prob.sum(-1)
        return ActOutput(self.to_env_action(bins[:, 0]), log_prob, value, {"tokens": ids, "token_log_prob": token_log_prob})

    def decode(self, obs: TensorDict, deterministic: bool = False):
        """(token ids [B, K], their log-probs [B, K], value [B]): token by token, or all from one pass (parallel)."""
        temperature, embed = self.config.temperature, self.lm.get_input_embeddings()
        if self.config.decoding == "parallel":
            log_p, value = self.token_log_probs(obs, None, temperature)  # [B, K, n_bins]
            if deterministic:
                choice = log_p.argmax(-1)
            else:
                choice = torch.multinomial(log_p.exp().flatten(0, 1), 1).view(log_p.shape[:2])
            return choice + self.layout.first_action, log_p.gather(-1, choice.unsqueeze(-1)).squeeze(-1), value
        seq = self.prefix(obs)
        out = self.lm(inputs_embeds=seq, use_cache=self.config.use_cache, output_hidden_states=True, logits_to_keep=1)
        value = self._value(obs, out.hidden_states[-1][:, -1])
        ids, log_probs = [], []
        for k in range(self.tokens):
            log_p = self.bin_log_probs(out.logits[:, -1], temperature)
            if deterministic:
                choice = log_p.argmax(-1)
            else:
                choice = torch.multinomial(log_p.exp(), 1).squeeze(-1)
            ids.append(choice + self.layout.first_action)
            log_probs.append(log_p.gather(-1, choice.unsqueeze(-1)).squeeze(-1))
            if k == self.tokens - 1:
                break
            nxt = embed(ids[-1]).unsqueeze(1)
            if self.config.use_cache:
                out = self.lm(inputs_embeds=nxt, past_key_values=out.past_key_values, use_cache=True, logits_to_keep=1)
            else:
                seq = torch.cat([seq, nxt], 1)
                out = self.lm(inputs_embeds=seq, use_cache=False, logits_to_keep=1)
        return torch.stack(ids, 1), torch.stack(log_probs, 1), value

    def forward_actions(self, obs: TensorDict, ids: torch.Tensor | None, features: list[torch.Tensor] | None = None):
        """The one backbone pass over prefix and action positions: (its output, whose logits are those of the K
        action predictions, value [B]). Autoregressive: teacher-forced on ids [B, K], position P-1+k predicting
        a_{k+1}; parallel: over the placeholders, slot k predicting a_k (ids unused, may be None)."""
        prefix = self.prefix(obs, features)
        if self.action_queries is not None:
            rest = self.action_queries.expand(prefix.shape[0], -1, -1)
        else:
            rest = self.lm.get_input_embeddings()(ids[:, :-1])
        seq = torch.cat([prefix, rest.to(prefix.dtype)], 1)
        mask = None if self.action_queries is None else self.slot_attention_mask(seq, prefix.shape[1])
        out = self.lm(inputs_embeds=seq, attention_mask=mask, use_cache=False, output_hidden_states=True,
                      logits_to_keep=self.tokens)
        return out, self._value(obs, out.hidden_states[-1][:, prefix.shape[1] - 1])  # the last prefix position

    def slot_attention_mask(self, seq: torch.Tensor, prefix_len: int) -> torch.Tensor:
        """Additive mask [B, 1, L, L] for seq [B, L, D]: causal over the prefix, every action slot sees the whole
        prefix and every other slot (OpenVLA-OFT's bidirectional action attention)."""
        length = seq.shape[1]
        allowed = torch.ones(length, length, dtype=torch.bool, device=seq.device).tril()
        allowed[prefix_len:, prefix_len:] = True
        mask = torch.zeros(length, length, dtype=seq.dtype, device=seq.device)
        mask = mask.masked_fill(~allowed, torch.finfo(seq.dtype).min)
        return mask.expand(seq.shape[0], 1, length, length)

    def token_log_probs(self, obs: TensorDict, ids: torch.Tensor | None, temperature: float,
                        features: list[torch.Tensor] | None = None):
        """One pass: (bin log-probs [B, K, n_bins] of each action token, value [B]); see forward_actions."""
        out, value = self.forward_actions(obs, ids, features)
        return self.bin_log_probs(out.logits, temperature), value

    def regress(self, obs: TensorDict, features: list[torch.Tensor] | None = None):
        """action_head=l1: (normalized action chunk [B, H, A], unclamped, value [B]) from the parallel pass."""
        out, value = self.forward_actions(obs, None, features)
        chunk = self.l1_head(out.hidden_states[-1][:, -self.tokens:]).view(-1, self.config.horizon, self.action_dim)
        return chunk.float(), value

    def evaluate(self, obs: TensorDict, action: torch.Tensor, extras: dict[str, Any] | None = None):
        """Sums over the action tokens of log-prob and entropy (per token [..., K] with token_ratios),
        and the value, from act's own single pass in parallel mode; obs may have any batch shape (e.g. [B, T]
        episodes for GRPO), which the outputs keep."""
        if self.l1_head is not None:
            raise ValueError(L1_NO_DISTRIBUTION.format("evaluate"))
        shape = obs.batch_size
        obs = obs.reshape(-1)
        if extras is not None and "tokens" in extras:
            ids = extras["tokens"].reshape(-1, self.tokens)
        elif self.config.horizon == 1:
            ids = self.layout.action_ids(self.bins.tokenize(self.action_norm(action.reshape(-1, self.action_dim))))
        else:
            raise ValueError(f"VLAPolicy.evaluate with policy.horizon={self.config.horizon} needs act()'s "
                             "extras['tokens'] (the Collector stores them under batch['extras'])")
        log_p, value = self.token_log_probs(obs, ids, self.config.temperature)
        chosen = log_p.gather(-1, self.layout.action_bins(ids).unsqueeze(-1)).squeeze(-1)
        entropy = -(log_p.exp() * log_p).sum(-1)
        if self.config.token_ratios:
            return chosen.view(*shape, -1), entropy.view(*shape, -1), value.view(shape)
        return chosen.sum(-1).view(shape), entropy.sum(-1).view(shape), value.view(shape)

    def value(self, obs: TensorDict) -> torch.Tensor:
        if self.critic is not None:
            return self._value(obs, None)
        out = self.lm(inputs_embeds=self.prefix(obs), use_cache=False, output_hidden_states=True, logits_to_keep=1)
        return self._value(obs, out.hidden_states[-1][:, -1])

    def bc_loss(self, batch: TensorDict) -> torch.Tensor:
        """Mean token cross-entropy (at temperature 1) of demo chunks: batch[action] [B, H, A], or
        [B, A] (a chunk whose first row alone is real); optional batch[mask] [B, H] marks real rows.
        action_head=l1: the mean L1 distance of the normalized chunks instead (OpenVLA-OFT's loss).
        privileged_aux: plus that weight times privileged_loss."""
        chunk, mask = chunk_and_mask(batch, self.config.horizon, self.action_dim)
        obs = batch[keys.OBS]
        features = self.camera_features(obs) if self.aux_head is not None else None  # once for both terms
        if self.l1_head is not None:
            predicted, _ = self.regress(obs, features)
            error = (predicted - self.action_norm(chunk)).abs().mean(-1)  # [B, H]
            loss = (error * mask).sum() / mask.sum().clamp(min=1)
        else:
            bins = self.bins.tokenize(self.action_norm(chunk)).flatten(1)  # [B, K]
            log_p, _ = self.token_log_probs(obs, self.layout.action_ids(bins), 1.0, features)
            nll = -log_p.gather(-1, bins.unsqueeze(-1)).squeeze(-1)
            weight = mask.repeat_interleave(self.action_dim, 1)
            loss = (nll * weight).sum() / weight.sum().clamp(min=1)
        if self.aux_head is not None:
            loss = loss + self.config.privileged_aux * self.privileged_loss(obs, features)
        return loss

    @property
    def has_aux_loss(self) -> bool:
        """aux_loss exists: policy.privileged_aux > 0 (PPO's algo.aux_coef weighs it)."""
        return self.aux_head is not None

    def aux_loss(self, obs: TensorDict) -> torch.Tensor:
        """PPO's auxiliary term (algo.aux_coef): privileged_loss on the rollout's frames."""
        return self.privileged_loss(obs)

    def privileged_loss(self, obs: TensorDict, features: list[torch.Tensor] | None = None) -> torch.Tensor:
        """privileged_aux's term: mean squared error of the aux head on the cameras' features (each camera's tokens
        averaged) against the standardized obs["privileged"]."""
        return F.mse_loss(self._aux(obs, features), self.privileged_norm(obs[keys.PRIVILEGED]))

    def estimate_privileged(self, obs: TensorDict) -> torch.Tensor:
        """The aux head's estimate of obs["privileged"] [B, P] from the cameras, in its own units (a probe of what the
        features locate: benchmarks/vla_goal_probe.py)."""
        return self.privileged_norm.inverse(self._aux(obs))

    def _aux(self, obs: TensorDict, features: list[torch.Tensor] | None = None) -> torch.Tensor:
        """The aux head on the cameras' features (each camera's tokens averaged): the standardized estimate."""
        features = self.camera_features(obs) if features is None else features
        return self.aux_head(torch.cat([f.mean(1) for f in features], -1))

    # --- weights: what a run's checkpoints hold -----------------------------------------------
    def state_dict(self, *args, **kwargs) -> dict[str, Any]:
        """Everything but the backbone weights that `config.backbone` supplies again: with a pretrained backbone
        its frozen weights (LoRA, freeze_backbone: ~MBs a checkpoint instead of 0.5 GB for SmolLM2-135M), and
        the second name of a tied weight (SmolLM2's output head is its input embedding; safetensors refuses to
        write one tensor twice)."""
        state = super().state_dict(*args, **kwargs)
        prefix = kwargs.get("prefix", "")
        skip = {prefix + name for name in self._supplied()}
        return type(state)((k, v) for k, v in state.items() if k not in skip)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Loads what `state_dict` returns; any other missing or unexpected tensor is an error under `strict`."""
        result = super().load_state_dict(state_dict, strict=False, assign=assign)
        missing = [k for k in result.missing_keys if k not in self._supplied()]
        if strict and (missing or result.unexpected_keys):
            raise RuntimeError(f"VLAPolicy.load_state_dict: missing {missing[:5]}, unexpected "
                               f"{list(result.unexpected_keys)[:5]} (a checkpoint of another backbone or setting?)")
        return result

    def _supplied(self) -> set[str]:
        """state_dict names of backbone weights that need no checkpoint (see state_dict)."""
        every = dict(self.lm.named_parameters(remove_duplicate=False))
        unique = dict(self.lm.named_parameters())
        names = {n for n in every if n not in unique}  # tied: saved under their first name only
        if self.tokenizer is not None and not self.config.random_weights:  # random ones are not supplied again
            names |= {n for n, p in unique.items() if not p.requires_grad}
        return {"lm." + n for n in names}

    # --- helpers ----------------------------------------------------------------------------
    def _value(self, obs: TensorDict, hidden: torch.Tensor | None) -> torch.Tensor:
        """V [B]: the separate critic's on the state, or the value head's on the last prefix hidden state [B, D]."""
        if self.critic is not None:
            inputs = self.state_norm(obs[keys.STATE])
            if self.config.asymmetric_critic:
                inputs = torch.cat([inputs, obs[keys.PRIVILEGED]], -1)
            return self.critic(inputs).squeeze(-1)
        return self.value_head(hidden).squeeze(-1)

    def to_env_action(self, bins: torch.Tensor) -> torch.Tensor:
        """Bin indices [B, A] -> the env action [B, A], within the spec's bounds."""
        action = self.action_norm.inverse(self.bins.detokenize(bins))
        if self.low is not None or self.high is not None:
            action = action.clamp(self.low, self.high)
        return action

    @torch.no_grad()
    def fit_normalizers(self, dataset: TensorDict) -> None:
        """Fit the state (mean/std), privileged (privileged_aux: mean/std) and action (min/max onto [-1, 1], the bins'
        range) normalizers."""
        if self.state_dim:
            self.state_norm.fit(dataset[keys.OBS, keys.STATE], "mean_std")
        if self.aux_head is not None:
            self.fit_privileged(dataset[keys.OBS, keys.PRIVILEGED])
        self.action_norm.fit(dataset[keys.ACTION], "min_max")

    @torch.no_grad()
    def fit_privileged(self, privileged: torch.Tensor) -> None:
        """Fit the privileged normalizer (mean/std): the aux head's target scale."""
        self.privileged_norm.fit(privileged, "mean_std")

    def perception_parameters(self) -> list[nn.Parameter]:
        """The vision tower's and the aux head's weights: what the pipeline's perception stage trains on
        privileged_loss alone (embodied/runner/perception.py)."""
        return [*self.vision.parameters(), *self.aux_head.parameters()]
