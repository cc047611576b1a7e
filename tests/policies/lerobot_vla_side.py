"""Runs inside the separate LeRobot environment (scripts/lerobot_env.sh plus lerobot[smolvla,pi] and tensordict),
never in .venv, with the repository on PYTHONPATH: builds a randomly initialised, tiny SmolVLA or pi0 from local
configs (the VLM's config, tokenizer and processor are written here: nothing comes from a hub), saves it and its
processors with LeRobot's own save_pretrained, loads the directory through policies.vla.pretrained.load_lerobot and
records what the wrapper did as JSON; tests/policies/test_vla.py judges it.

    python tests/policies/lerobot_vla_side.py smolvla|pi0 FOLDER OUT.json

SmolVLA shrinks through its config (any SmolVLM directory is its backbone). pi0 does not: LeRobot 0.6.1 fixes its
sizes (get_gemma_config's gemma_300m / gemma_2b, a 27-layer SigLIP tower, a 257,152-token vocabulary; 4.0B
parameters, 15 GiB in float32, at its defaults), so `shrink_pi0` patches those two places in this process, which
builds the checkpoint and loads it again; the wrapper and LeRobot's pi0 code paths are otherwise the real ones.

Exits 3 (the test skips) when the environment lacks transformers or tensordict.
"""

import json
import resource
import sys
import time
from pathlib import Path

try:
    import tensordict  # noqa: F401
    import transformers  # noqa: F401
except ImportError as err:
    print(f"the LeRobot environment lacks {err.name}: .lerobot-env/bin/pip install 'lerobot[smolvla,pi]==0.6.1' "
          "'tensordict>=0.15,<0.16' 'numpy<2.3'", file=sys.stderr)
    sys.exit(3)

import torch
from lerobot.configs import FeatureType, PolicyFeature
from lerobot.policies.factory import make_pre_post_processors
from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig
from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy
from tensordict import TensorDict

from embodied import keys, registry
from embodied.specs import Spec, encode_text
from policies.vla.pretrained import load_lerobot

CAMERA, SIZE, HORIZON = "front", 32, 4
PARTS = {"vision": ["vision_model", "vision_tower"], "expert": ["lm_expert", "gemma_expert"],
         "action_proj": ["action_in_proj", "action_out_proj"], "state_proj": ["state_proj"]}  # parameter names


def tiny_smolvlm(folder: Path) -> Path:
    """A SmolVLM directory of a 2-layer, 64-wide text model and a 1-layer vision tower on 32-pixel images, with a
    byte-level tokenizer carrying SmolVLM's image tokens (SmolVLA reads fake_image_token_id and
    global_image_token_id from it): what SmolVLA's AutoConfig / AutoProcessor calls read from a model id."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, SmolVLMConfig, SmolVLMImageProcessor, SmolVLMProcessor
    from transformers.models.smolvlm.video_processing_smolvlm import SmolVLMVideoProcessor

    special = ["<unk>", "<pad>", "<end_of_utterance>", "<fake_token_around_image>", "<global-img>", "<image>",
               "<video>"]
    vocab = {t: i for i, t in enumerate(special)}
    for char in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[char] = len(vocab)
    bpe = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    bpe.pre_tokenizer, bpe.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, unk_token="<unk>", pad_token="<pad>",
        extra_special_tokens={"fake_image_token": "<fake_token_around_image>", "global_image_token": "<global-img>",
                              "image_token": "<image>", "end_of_utterance_token": "<end_of_utterance>"})  # fmt: skip
    image_processor = SmolVLMImageProcessor(size={"longest_edge": SIZE}, max_image_size={"longest_edge": SIZE})
    processor = SmolVLMProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                 video_processor=SmolVLMVideoProcessor(), image_seq_len=4)
    processor.save_pretrained(folder)
    SmolVLMConfig(
        text_config={"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": len(tokenizer),
                     "max_position_embeddings": 256},
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
                       "image_size": SIZE, "patch_size": 8},
        scale_factor=2, image_token_id=tokenizer.convert_tokens_to_ids("<image>"), pad_token_id=tokenizer.pad_token_id,
    ).save_pretrained(folder)
    return folder


def shrink_pi0(tokenizer: Path) -> None:
    """pi0 at 64 wide, 2 layers (8 heads of 8: LeRobot's pi0 reshapes attention to 8 heads), a 1-layer vision tower
    on 8-pixel patches, and the tiny byte-level tokenizer instead of PaliGemma's hub tokenizer."""
    from lerobot.policies import pi_gemma
    from lerobot.policies.pi0 import modeling_pi0, processor_pi0
    from lerobot.processor import TokenizerProcessorStep

    modeling_pi0.get_gemma_config = lambda variant: modeling_pi0.GemmaConfig(
        width=64, depth=2, mlp_dim=128, num_heads=8, num_kv_heads=1, head_dim=8)
    paligemma_init = pi_gemma.PaliGemmaForConditionalGenerationWithPiGemma.__init__

    def tiny_paligemma(self, config):
        vision = config.vision_config  # pi0 sets intermediate_size 4304 and projection_dim 2048 (gemma_2b's width)
        vision.hidden_size, vision.intermediate_size, vision.num_hidden_layers = 32, 64, 1
        vision.num_attention_heads, vision.patch_size = 2, 8
        vision.projection_dim = config.text_config.hidden_size
        paligemma_init(self, config)

    pi_gemma.PaliGemmaForConditionalGenerationWithPiGemma.__init__ = tiny_paligemma
    local = {"tokenizer_name": str(tokenizer)}  # instead of "google/paligemma-3b-pt-224"
    processor_pi0.TokenizerProcessorStep = lambda **kw: TokenizerProcessorStep(**kw | local)


def save_tiny(kind: str, folder: Path, observation_spec, action_spec):
    """A random SmolVLA or pi0 for these specs and its processors (normalizer statistics), saved as a checkpoint."""
    features = {"input_features": {
        "observation.state": PolicyFeature(FeatureType.STATE, observation_spec["state"].shape),
        f"observation.images.{CAMERA}": PolicyFeature(FeatureType.VISUAL, (3, SIZE, SIZE))},
        "output_features": {"action": PolicyFeature(FeatureType.ACTION, action_spec.shape)}}  # fmt: skip
    common = {"chunk_size": HORIZON, "n_action_steps": HORIZON, "max_state_dim": 32, "max_action_dim": 8,
              "tokenizer_max_length": 24, "device": "cpu", **features}  # fmt: skip
    vlm = tiny_smolvlm(folder / "vlm")
    torch.manual_seed(0)
    if kind == "smolvla":
        model = SmolVLAPolicy(SmolVLAConfig(vlm_model_name=str(vlm), load_vlm_weights=False, num_vlm_layers=2,
                                            resize_imgs_with_padding=(SIZE, SIZE), num_steps=3, **common))
    else:
        from lerobot.policies.pi0.configuration_pi0 import PI0Config
        from lerobot.policies.pi0.modeling_pi0 import PI0Policy

        shrink_pi0(vlm)
        model = PI0Policy(PI0Config(image_resolution=(SIZE, SIZE), num_inference_steps=3, **common))
    config = model.config
    d, a = observation_spec["state"].shape[0], action_spec.shape[0]
    stats = {"observation.state": {"mean": torch.zeros(d), "std": torch.ones(d)},
             "action": {"mean": torch.zeros(a), "std": torch.full((a,), 0.5)}}  # fmt: skip
    preprocessor, postprocessor = make_pre_post_processors(config, dataset_stats=stats)
    for part in (model, preprocessor, postprocessor):
        part.save_pretrained(folder / "checkpoint")
    return model, preprocessor, postprocessor


def main(kind: str, folder: Path, out: Path) -> None:
    torch.set_num_threads(1)
    started = time.perf_counter()
    env = registry.build("env", "arm_reach", {}, num_envs=2, device="cpu")
    obs, _ = env.reset(seed=0)
    tasks = ["reach the red target", "reach the blue target"]
    obs[keys.LANGUAGE] = encode_text(tasks, obs[keys.LANGUAGE].shape[1])
    pixels = torch.randint(0, 256, (2, 3, SIZE, SIZE), dtype=torch.uint8)  # LeRobot's layout, channels first
    obs[keys.IMAGES] = TensorDict({CAMERA: pixels.permute(0, 2, 3, 1)}, [2])  # ours: [N, H, W, 3]
    spec = {**env.observation_spec, f"images/{CAMERA}": Spec((SIZE, SIZE, 3), torch.uint8, 0, 255)}
    saved, preprocessor, postprocessor = save_tiny(kind, folder, spec, env.action_spec)
    rec = {"params": sum(p.numel() for p in saved.parameters())}

    policy = load_lerobot(folder / "checkpoint", kind, spec, env.action_spec)
    theirs, ours = saved.state_dict(), policy.model.state_dict()
    rec["same_weights"] = theirs.keys() == ours.keys() and all(torch.equal(theirs[k], ours[k]) for k in theirs)
    rec["wrapper"] = type(policy).__name__
    # LeRobot's own pipeline on the in-memory model, fed a batch as LeRobot's docs describe it (float images
    # [N, 3, H, W] in [0, 1], task strings): the wrapper must map our observation to exactly this
    raw = {"observation.state": obs[keys.STATE], f"observation.images.{CAMERA}": pixels.float() / 255, "task": tasks}
    chunk = saved.predict_action_chunk(preprocessor(raw), noise=torch.zeros(2, HORIZON, saved.config.max_action_dim))
    reference = postprocessor(chunk)[:, 0].clamp(env.action_spec.low, env.action_spec.high)
    rec["act"] = acting(policy, obs, env.action_spec, reference)
    rec["errors"] = errors(policy, folder / "checkpoint", kind, spec, env.action_spec, obs)
    rec["bc"] = imitation(policy, obs)
    rec["seconds"] = time.perf_counter() - started
    rec["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out.write_text(json.dumps(rec, indent=1))


def acting(policy, obs: TensorDict, action_spec: Spec, reference: torch.Tensor) -> dict:
    def moved(other: TensorDict, deterministic: bool = True) -> float:  # how far the action moves from obs's
        return (policy.act(other, deterministic).action - out.action).abs().max().item()

    out = policy.act(obs, deterministic=True)
    other_image, other_task = obs.clone(), obs.clone()
    other_image[keys.IMAGES, CAMERA] = 255 - obs[keys.IMAGES, CAMERA]
    other_task[keys.LANGUAGE] = encode_text(["put the gripper far away"] * 2, obs[keys.LANGUAGE].shape[1])
    return {"reference_diff": (out.action - reference).abs().max().item(), "action_shape": list(out.action.shape),
            "chunk_shape": list(out.extras["chunk"].shape), "log_prob_shape": list(out.log_prob.shape),
            "in_spec": action_spec.contains(out.action), "repeat_diff": moved(obs), "image_diff": moved(other_image),
            "task_diff": moved(other_task), "sampled_diff": moved(obs, deterministic=False)}  # fmt: skip


def errors(policy, checkpoint: Path, kind: str, spec: dict, action_spec: Spec, obs: TensorDict) -> dict:
    messages = {}
    for name, bad in {"missing_camera": {k: v for k, v in spec.items() if not k.startswith("images/")},
                      "extra_camera": {**spec, "images/wrist": spec[f"images/{CAMERA}"]}}.items():  # fmt: skip
        try:
            load_lerobot(checkpoint, kind, bad, action_spec)
        except ValueError as err:
            messages[name] = str(err)
    try:
        policy.evaluate(obs, obs[keys.STATE][:, :4], None)
    except ValueError as err:
        messages["evaluate"] = str(err)
    return messages


def imitation(policy, obs: TensorDict) -> dict:
    """The BC loss's gradient on a fixed batch of demonstrated chunks, then 20 Adam steps on that batch."""
    g = torch.Generator().manual_seed(1)
    batch = TensorDict({keys.OBS: obs, keys.ACTION: torch.rand(2, HORIZON, 4, generator=g) * 1.6 - 0.8}, [2])

    def seeded_loss():  # the same flow-matching noise and time draws each call: losses compare across updates
        torch.manual_seed(123)
        return policy.bc_loss(batch)

    def has_grad(p: torch.Tensor) -> bool:
        return p.grad is not None and bool(p.grad.abs().sum() > 0)

    policy.train()
    loss = seeded_loss()
    loss.backward()
    trainable = {n: p for n, p in policy.named_parameters() if p.requires_grad}
    rec = {"loss": loss.item(), "trainable": sum(p.numel() for p in trainable.values()),
           "no_grad": sorted(n for n, p in trainable.items() if not has_grad(p)),
           "grad_reaches": {part: any(has_grad(p) for n, p in trainable.items() if any(m in n for m in names))
                            for part, names in PARTS.items()},
           "finite_grad": all(bool(p.grad.isfinite().all()) for p in trainable.values() if p.grad is not None)}
    optimizer = torch.optim.Adam(trainable.values(), lr=3e-3)
    rec["losses"] = []
    for _ in range(20):
        optimizer.zero_grad()
        loss = seeded_loss()
        loss.backward()
        optimizer.step()
        rec["losses"].append(loss.item())
    with torch.no_grad():
        rec["losses"].append(seeded_loss().item())
    return rec


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
