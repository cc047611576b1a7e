"""A pretrained causal LM as the VLA's backbone: its own tokenizer for the instruction, LoRA, freezing, config errors.

Only tiny models: `tiny_llama(byte_tokenizer())` saved into a directory stands for a pretrained checkpoint."""

import pytest
import torch

pytest.importorskip("transformers", reason="the VLA policy needs the 'transformers' extra")

from embodied import keys, registry  # noqa: E402
from embodied.config import ConfigError  # noqa: E402
from embodied.specs import decode_text, encode_text  # noqa: E402
from policies.lm.load import byte_tokenizer, tiny_llama  # noqa: E402
from policies.vla import VLAConfig, VLAPolicy  # noqa: E402
from policies.vla.pretrained import load_pretrained, save_pretrained  # noqa: E402

N_BINS = 32  # the byte tokenizer has 260 ids; its last 32 are bytes 127..173, which no ASCII instruction uses


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    """A local causal-LM directory: a tiny random Llama and its tokenizer, as save_pretrained writes them."""
    path = tmp_path_factory.mktemp("tiny_lm")
    tokenizer = byte_tokenizer()
    tiny_llama(tokenizer, seed=0).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def arm(n=4):
    return registry.build("env", "arm_reach", {}, num_envs=n, device="cpu")


def pretrained(lm_dir, env, **cfg):
    torch.manual_seed(0)
    return VLAPolicy(VLAConfig(backbone=str(lm_dir), n_bins=N_BINS, **cfg), env.observation_spec, env.action_spec)


def test_instruction_ids_in_the_backbone_input_come_from_its_tokenizer(lm_dir):
    env = arm(4)
    obs, _ = env.reset(seed=0)
    policy = pretrained(lm_dir, env)
    fed = []
    hook = policy.lm.get_input_embeddings().register_forward_hook(lambda m, args, out: fed.append(args[0]))
    prefix = policy.prefix(obs)
    hook.remove()
    assert len(fed) == 1  # the instruction alone goes through the token embeddings: no BOS or bytes of ours
    width = env.observation_spec[keys.LANGUAGE].shape[0]  # byte width + 0 specials for this tokenizer
    tokenizer = policy.tokenizer
    expected = [[tokenizer.pad_token_id] * (width - len(ids)) + ids
                for ids in (tokenizer(text).input_ids for text in decode_text(obs[keys.LANGUAGE]))]
    assert fed[0].tolist() == expected
    assert len(expected[0]) - expected[0].count(tokenizer.pad_token_id) == len(decode_text(obs[keys.LANGUAGE])[0])
    # the sequence ends with those ids' own embeddings, after the projected state
    torch.testing.assert_close(prefix[:, -width:], policy.lm.get_input_embeddings()(torch.tensor(expected)))
    assert prefix.shape[1] == 1 + width


def test_the_instruction_text_changes_the_action_distribution(lm_dir):
    env = arm(3)
    obs, _ = env.reset(seed=0)
    policy = pretrained(lm_dir, env)
    out = policy.act(obs)
    other = obs.clone()
    other[keys.LANGUAGE] = encode_text(["touch the purple cube"] * 3, env.observation_spec[keys.LANGUAGE].shape[0])
    changed, _, _ = policy.evaluate(other, out.action, out.extras)
    assert (changed - out.log_prob).abs().min() > 1e-4


def test_act_evaluate_and_bc_loss_agree(lm_dir):
    env = arm(6)
    obs, _ = env.reset(seed=0)
    policy = pretrained(lm_dir, env, horizon=2, temperature=1.5)
    out = policy.act(obs)
    assert ((out.extras["tokens"] >= 260 - N_BINS) & (out.extras["tokens"] < 260)).all()  # the vocabulary's last ids
    log_prob, entropy, value = policy.evaluate(obs, out.action, out.extras)
    torch.testing.assert_close(log_prob, out.log_prob, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(value, out.value)
    assert (entropy > 0).all()
    loss = policy.bc_loss({keys.OBS: obs, keys.ACTION: out.action})
    assert torch.isfinite(loss) and loss > 0


def bc_backward(policy, env):
    obs, _ = env.reset(seed=0)
    policy.bc_loss({keys.OBS: obs, keys.ACTION: policy.act(obs).action}).backward()


def test_lora_trains_adapters_projections_and_heads_only(lm_dir):
    env = arm(4)
    policy = pretrained(lm_dir, env, lora_rank=4)
    trained = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert any("lora_A" in n for n in trained) and any(n.startswith("state_proj.") for n in trained)
    assert all("lora_" in n or not n.startswith("lm.") for n in trained), trained
    bc_backward(policy, env)
    assert all(p.grad is None for n, p in policy.lm.named_parameters() if "lora_" not in n)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for n, p in policy.lm.named_parameters() if "lora_B" in n)


def test_a_frozen_backbone_gets_no_gradient(lm_dir):
    env = arm(4)
    policy = pretrained(lm_dir, env, freeze_backbone=True)
    bc_backward(policy, env)
    assert all(p.grad is None for p in policy.lm.parameters())
    assert all(p.grad is not None for p in policy.state_proj.parameters())
    with pytest.raises(ConfigError, match="unset policy.freeze_backbone"):
        VLAConfig(backbone=str(lm_dir), lora_rank=4, freeze_backbone=True)


def test_a_directory_that_is_not_a_causal_lm_fails_clearly(tmp_path):
    import transformers

    transformers.ViTModel(transformers.ViTConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                                 intermediate_size=8, image_size=8, patch_size=4)).save_pretrained(
        tmp_path / "vit")
    with pytest.raises(ConfigError, match=r"policy.backbone=.*vit.*holds a 'vit' model .*not a causal language model"):
        VLAConfig(backbone=str(tmp_path / "vit"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="found no config.json"):
        VLAConfig(backbone=str(tmp_path / "empty"))


def test_an_unknown_backbone_name_lists_the_choices(tmp_path):
    with pytest.raises(ConfigError, match="policy.backbone='smollm3': valid choices llama, gpt2, smollm2-135m-instruct "
                                          "or a causal-LM directory"):
        VLAConfig(backbone="smollm3")


def test_an_instruction_longer_than_the_token_width_is_an_error(lm_dir):
    env = arm(2)
    policy = pretrained(lm_dir, env, language_tokens=5)
    with pytest.raises(ValueError, match=r"instruction '.+' is \d+ tokens, more than the width 5"):
        policy.act(env.reset(seed=0)[0])


def test_the_backbone_is_reachable_from_the_run_config(lm_dir):
    """`embodied train experiment=arm_reach_vla_bc policy.backbone=<dir> policy.lora_rank=4` builds this policy."""
    from embodied.build import make_env, make_policy
    from embodied.cli import compose

    # the experiment's language_tokens=12 fits SmolLM2's tokens; this byte-level tokenizer needs the byte width (0)
    config = compose(["experiment=arm_reach_vla_bc", f"policy.backbone={lm_dir}", "policy.lora_rank=4",
                      "policy.language_tokens=0"])
    env = make_env(config, 2, torch.device("cpu"))
    policy = make_policy(config, env)
    assert policy.config.backbone == str(lm_dir) and policy.text is not None
    assert policy.layout.first_action == 260 - policy.config.n_bins
    out = policy.act(env.reset(seed=0)[0])
    assert out.action.shape == (2, env.action_spec.shape[0])


def perturb_adapters(policy):
    with torch.no_grad():  # lora_B starts at zero (the adapters start as the identity): make them matter
        for name, p in policy.lm.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.05)


def test_run_checkpoints_hold_the_trained_tensors_and_reload_equal(lm_dir):
    from safetensors.torch import load_file, save_file

    env = arm(3)
    obs, _ = env.reset(seed=0)
    policy = pretrained(lm_dir, env, lora_rank=4)
    perturb_adapters(policy)
    state = policy.state_dict()
    assert not any(k.startswith("lm.") and "lora_" not in k for k in state)  # frozen weights come from the dir
    save_file({k: v.contiguous() for k, v in state.items()}, lm_dir.parent / "lora.safetensors")
    fresh = pretrained(lm_dir, env, lora_rank=4)
    fresh.load_state_dict(load_file(lm_dir.parent / "lora.safetensors"))
    assert torch.equal(policy.act(obs, True).log_prob, fresh.act(obs, True).log_prob)
    with pytest.raises(RuntimeError, match="missing .*lora_"):
        fresh.load_state_dict({k: v for k, v in state.items() if "lora_" not in k})


def test_random_weights_keep_the_architecture_and_tokenizer_and_checkpoint_whole(lm_dir):
    """policy.random_weights: the directory's architecture and tokenizer, fresh weights (the control for what
    pretraining brings); its checkpoints hold those random frozen weights, so a reload under another seed acts alike."""
    env = arm(3)
    obs, _ = env.reset(seed=0)
    trained = pretrained(lm_dir, env, lora_rank=4)
    torch.manual_seed(1)  # the directory's tiny Llama was itself drawn from seed 0
    fresh = VLAPolicy(VLAConfig(backbone=str(lm_dir), n_bins=N_BINS, lora_rank=4, random_weights=True),
                      env.observation_spec, env.action_spec)
    weights = dict(trained.lm.named_parameters())
    shapes = {k: v.shape for k, v in fresh.lm.named_parameters()}
    assert shapes == {k: v.shape for k, v in weights.items()}
    assert not torch.equal(fresh.lm.get_input_embeddings().weight, trained.lm.get_input_embeddings().weight)
    assert torch.equal(fresh.text(obs[keys.LANGUAGE]), trained.text(obs[keys.LANGUAGE]))  # the same tokenizer
    state = fresh.state_dict()
    assert any(k.startswith("lm.") and "lora_" not in k for k in state)  # the random frozen weights travel
    torch.manual_seed(123)
    again = VLAPolicy(VLAConfig(backbone=str(lm_dir), n_bins=N_BINS, lora_rank=4, random_weights=True),
                      env.observation_spec, env.action_spec)
    again.load_state_dict(state)
    assert torch.equal(fresh.act(obs, True).log_prob, again.act(obs, True).log_prob)
    with pytest.raises(ConfigError, match="policy.random_weights=true re-initialises a pretrained backbone"):
        VLAConfig(random_weights=True)


def test_a_tied_backbone_checkpoints_once(tmp_path):
    """SmolLM2 ties its output head to its input embedding: safetensors writes the tensor once, under one name."""
    import transformers
    from safetensors.torch import save_file

    tokenizer = byte_tokenizer()
    config = transformers.LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32,
                                      num_hidden_layers=1, num_attention_heads=2, tie_word_embeddings=True,
                                      pad_token_id=tokenizer.pad_token_id)
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path / "tied")
    tokenizer.save_pretrained(tmp_path / "tied")
    env = arm(2)
    policy = pretrained(tmp_path / "tied", env)
    state = policy.state_dict()
    assert "lm.model.embed_tokens.weight" in state and "lm.lm_head.weight" not in state
    save_file({k: v.contiguous() for k, v in state.items()}, tmp_path / "model.safetensors")
    with torch.no_grad():
        state["lm.model.embed_tokens.weight"].add_(1.0)
    fresh = pretrained(tmp_path / "tied", env)
    fresh.load_state_dict(state)
    assert torch.equal(fresh.lm.lm_head.weight, state["lm.model.embed_tokens.weight"])  # still tied


def test_openvla_style_directory_of_a_lora_policy_reloads_equal(lm_dir, tmp_path):
    env = arm(3)
    obs, _ = env.reset(seed=0)
    policy = pretrained(lm_dir, env, lora_rank=4, horizon=2)
    perturb_adapters(policy)
    save_pretrained(policy, tmp_path / "ckpt")
    loaded = load_pretrained(tmp_path / "ckpt")
    assert loaded.config.backbone == str(tmp_path / "ckpt") and loaded.text is not None
    a, b = policy.act(obs, deterministic=True), loaded.act(obs, deterministic=True)
    assert torch.equal(a.extras["tokens"], b.extras["tokens"])
    torch.testing.assert_close(a.log_prob, b.log_prob, atol=1e-4, rtol=1e-5)
