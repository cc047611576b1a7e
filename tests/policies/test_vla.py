"""The autoregressive VLA: action tokenizer, decoding, log-probs, checkpoints, RL updates."""

import pytest
import torch

pytest.importorskip("transformers", reason="the VLA policy needs the 'transformers' extra")

from tensordict import TensorDict  # noqa: E402

from embodied import keys, registry  # noqa: E402
from embodied.algorithms.advantages import group_relative_advantages  # noqa: E402
from embodied.algorithms.grpo import GRPO  # noqa: E402
from embodied.algorithms.ppo import PPO  # noqa: E402
from embodied.config import ConfigError  # noqa: E402
from embodied.rollout import Collector, collect_groups  # noqa: E402
from embodied.specs import Spec, encode_text  # noqa: E402
from policies.vla import VLAConfig, VLAPolicy  # noqa: E402
from policies.vla.pretrained import load_pretrained, save_pretrained  # noqa: E402
from policies.vla.tokenizer import PAD_ID, ActionTokenizer, TokenLayout  # noqa: E402


def arm(n=4, **env):
    return registry.build("env", "arm_reach", env, num_envs=n, device="cpu")


def policy_for(env, seed=0, **cfg):
    torch.manual_seed(seed)
    return VLAPolicy(VLAConfig(**cfg), env.observation_spec, env.action_spec)


# --- tokenizers ----------------------------------------------------------------------------
@pytest.mark.parametrize("n_bins", [2, 7, 256])
def test_action_tokenizer_roundtrip_within_half_a_bin(n_bins):
    bins = ActionTokenizer(n_bins)
    a = torch.cat([torch.rand(10_000) * 2 - 1, torch.tensor([-1.0, 1.0, 0.0])])
    index = bins.tokenize(a)
    assert index.min() >= 0 and index.max() < n_bins
    assert (bins.detokenize(index) - a).abs().max() <= bins.width / 2 + 1e-6
    assert torch.equal(bins.tokenize(torch.tensor([-5.0, 5.0])), torch.tensor([0, n_bins - 1]))
    with pytest.raises(ValueError, match="bin indices"):
        bins.detokenize(torch.tensor([n_bins]))


def test_token_layout_puts_bytes_after_specials_and_bins_at_the_end():
    layout = TokenLayout(vocab_size=600, n_bins=256)
    assert layout.first_action == 600 - 256
    ids = layout.text_ids(encode_text(["hi"], 4))
    assert ids.tolist() == [[ord("h") + 3, ord("i") + 3, PAD_ID, PAD_ID]]
    assert layout.action_bins(layout.action_ids(torch.tensor([0, 255]))).tolist() == [0, 255]
    with pytest.raises(ValueError, match="action range"):
        layout.action_bins(torch.tensor([3]))
    with pytest.raises(ValueError, match="vocab_size=300"):
        TokenLayout(300, 256)
    with pytest.raises(ValueError, match="uint8"):
        layout.text_ids(torch.zeros(1, 4, dtype=torch.long))


def test_bad_config_names_the_key():
    with pytest.raises(ConfigError, match="policy.backbone='bert'.*llama, gpt2"):
        VLAConfig(backbone="bert")
    with pytest.raises(ConfigError, match="policy.temperature"):
        VLAConfig(temperature=0.0)


# --- decoding and log-probs ---------------------------------------------------------------
def test_golden_outputs():
    """Pinned for seed 0 with transformers 5.23's Llama init: a change here is a behaviour change."""
    env = arm(2)
    obs, _ = env.reset(seed=0)
    policy = policy_for(env, horizon=2)
    torch.nn.init.normal_(policy.value_head.weight, std=0.1)
    out = policy.act(obs, deterministic=True)
    assert out.extras["tokens"].tolist() == [[467, 269, 378, 369, 485, 337, 278, 382],
                                             [467, 269, 378, 294, 269, 378, 294, 269]]
    torch.testing.assert_close(out.action[0], torch.tensor([0.628906, -0.917969, -0.066406, -0.136719]),
                               atol=1e-6, rtol=0)
    torch.testing.assert_close(out.log_prob, torch.tensor([-40.530766, -41.035275]), atol=1e-4, rtol=0)
    torch.testing.assert_close(out.value, torch.tensor([0.757735, 0.790443]), atol=1e-4, rtol=0)
    torch.manual_seed(1)
    out = policy.act(obs)
    assert out.extras["tokens"].tolist() == [[428, 302, 399, 371, 329, 307, 388, 476],
                                             [513, 368, 350, 335, 368, 364, 306, 387]]
    torch.testing.assert_close(out.log_prob, torch.tensor([-44.805183, -44.567387]), atol=1e-4, rtol=0)


@pytest.mark.parametrize("backbone", ["llama", "gpt2"])
def test_kv_cache_decoding_equals_full_sequence_decoding(backbone):
    env = arm(5)
    obs, _ = env.reset(seed=1)
    cached = policy_for(env, backbone=backbone, horizon=3, use_cache=True)
    full = VLAPolicy(VLAConfig(backbone=backbone, horizon=3, use_cache=False), env.observation_spec, env.action_spec)
    full.load_state_dict(cached.state_dict())
    for deterministic in (True, False):
        torch.manual_seed(2)
        a = cached.act(obs, deterministic)
        torch.manual_seed(2)
        b = full.act(obs, deterministic)
        assert torch.equal(a.extras["tokens"], b.extras["tokens"])
        torch.testing.assert_close(a.extras["token_log_prob"], b.extras["token_log_prob"], atol=1e-5, rtol=1e-5)


def test_evaluate_reproduces_act_per_token_and_over_any_batch_shape():
    env = arm(6)
    obs, _ = env.reset(seed=0)
    policy = policy_for(env, horizon=3, temperature=1.5)
    torch.nn.init.normal_(policy.value_head.weight, std=0.1)
    out = policy.act(obs)
    assert out.extras["tokens"].shape == (6, 3 * 4)
    torch.testing.assert_close(out.log_prob, out.extras["token_log_prob"].sum(-1))
    log_prob, entropy, value = policy.evaluate(obs, out.action, out.extras)
    torch.testing.assert_close(log_prob, out.log_prob, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(value, out.value, atol=1e-5, rtol=1e-5)
    assert (entropy > 0).all() and (entropy <= 12 * torch.log(torch.tensor(256.0)) + 1e-3).all()
    # [2, 3] episodes x steps, as GRPO passes them: same numbers, that shape
    shaped = TensorDict({k: v.view(2, 3, *v.shape[1:]) for k, v in out.extras.items()}, batch_size=[2, 3])
    lp2, _, v2 = policy.evaluate(obs.reshape(2, 3), out.action.view(2, 3, 4), shaped)
    torch.testing.assert_close(lp2.reshape(-1), log_prob, atol=1e-4, rtol=1e-5)
    assert v2.shape == (2, 3)
    with pytest.raises(ValueError, match="extras\\['tokens'\\]"):
        policy.evaluate(obs, out.action, None)


def test_horizon_one_evaluates_an_action_without_extras():
    env = arm(4)
    obs, _ = env.reset(seed=0)
    policy = policy_for(env)
    out = policy.act(obs)
    log_prob, _, _ = policy.evaluate(obs, out.action, None)  # bin centres tokenize back to their bins
    torch.testing.assert_close(log_prob, out.log_prob, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("vision", ["siglip", "vit", "cnn", "keypoints"])
def test_image_observations_become_patch_tokens(vision):
    spec = {"state": Spec((3,)), "images/front": Spec((32, 32, 3), torch.uint8, 0, 255),
            "language": Spec((16,), torch.uint8, 0, 255)}
    torch.manual_seed(0)
    policy = VLAPolicy(VLAConfig(vision=vision, horizon=2), spec, Spec((2,), torch.float32, -1.0, 1.0))
    obs = TensorDict({"state": torch.randn(3, 3), "images/front": torch.randint(0, 256, (3, 32, 32, 3),
                      dtype=torch.uint8), "language": encode_text(["a", "bb", "ccc"], 16)}, batch_size=[3])
    obs = obs.unflatten_keys("/")
    # 16 patches (8-pixel SigLIP/ViT patches of 32x32, or the CNN's 4x4 pool; one keypoint token) + state + BOS + 16 bytes
    patches = 1 if vision == "keypoints" else 16 + (1 if vision == "vit" else 0)
    assert policy.prefix(obs).shape[1] == patches + 1 + 1 + 16
    out = policy.act(obs)
    log_prob, _, _ = policy.evaluate(obs, out.action, out.extras)
    torch.testing.assert_close(log_prob, out.log_prob, atol=1e-4, rtol=1e-5)
    other = obs.clone()
    other["images", "front"] = 255 - other["images", "front"]
    assert not torch.allclose(policy.evaluate(other, out.action, out.extras)[0], log_prob)  # the image matters



def test_asymmetric_critic_reads_the_privileged_observation():
    """policy.asymmetric_critic: the MLP critic also reads obs["privileged"] (the goal the cameras must find);
    without it, or with the value head, a clear error."""
    spec = {"state": Spec((3,)), "privileged": Spec((2,))}
    action = Spec((2,), torch.float32, -1.0, 1.0)
    torch.manual_seed(0)
    policy = VLAPolicy(VLAConfig(critic="mlp", asymmetric_critic=True), spec, action)
    obs = TensorDict({"state": torch.randn(4, 3), "privileged": torch.randn(4, 2)}, batch_size=[4])
    other = obs.clone()
    other["privileged"] = other["privileged"] + 1.0
    assert not torch.allclose(policy.value(obs), policy.value(other))
    with pytest.raises(ConfigError, match="needs policy.critic=mlp"):
        VLAConfig(asymmetric_critic=True)
    with pytest.raises(ConfigError, match="needs a 'privileged' observation"):
        VLAPolicy(VLAConfig(critic="mlp", asymmetric_critic=True), {"state": Spec((3,))}, action)

@pytest.mark.parametrize("vision", ["cnn", "keypoints"])
def test_privileged_aux_adds_the_camera_features_regression_of_privileged(vision):
    """policy.privileged_aux: BC's loss gains w x the aux head's squared error on the standardized privileged
    observation, from the cameras' features only; its gradient reaches the vision tower; acting ignores it."""
    spec = {"state": Spec((3,)), "privileged": Spec((2,)), "images/front": Spec((32, 32, 3), torch.uint8, 0, 255),
            "images/side": Spec((32, 32, 3), torch.uint8, 0, 255)}
    action = Spec((2,), torch.float32, -1.0, 1.0)
    obs = TensorDict({"state": torch.randn(6, 3), "privileged": torch.randn(6, 2) * 3 + 1,
                      "images/front": torch.randint(0, 256, (6, 32, 32, 3), dtype=torch.uint8),
                      "images/side": torch.randint(0, 256, (6, 32, 32, 3), dtype=torch.uint8)}, batch_size=[6])
    batch = TensorDict({"obs": obs.unflatten_keys("/"), "action": torch.rand(6, 2) * 2 - 1}, batch_size=[6])
    torch.manual_seed(0)
    plain = VLAPolicy(VLAConfig(vision=vision), spec, action)
    torch.manual_seed(0)
    aux = VLAPolicy(VLAConfig(vision=vision, privileged_aux=0.5), spec, action)
    aux.fit_normalizers(batch)
    plain.load_state_dict({k: v for k, v in aux.state_dict().items() if not k.startswith(("aux_head", "privileged"))})
    plain.action_norm.load_state_dict(aux.action_norm.state_dict())
    features = torch.cat([aux.vision((batch["obs", "images", cam].permute(0, 3, 1, 2).float() / 127.5 - 1)).mean(1)
                          for cam in ("front", "side")], -1)
    privileged = batch["obs", "privileged"]
    standardized = (privileged - privileged.mean(0)) / privileged.std(0, correction=0)
    expected = ((aux.aux_head(features) - standardized) ** 2).mean()
    torch.testing.assert_close(aux.bc_loss(batch), plain.bc_loss(batch) + 0.5 * expected, atol=1e-4, rtol=1e-4)
    aux.zero_grad()
    aux.privileged_loss(batch["obs"]).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in aux.vision.parameters())
    torch.testing.assert_close(aux.act(batch["obs"], deterministic=True).action,
                               plain.act(batch["obs"], deterministic=True).action)
    with pytest.raises(ConfigError, match="privileged_aux > 0 regresses the 'privileged' observation"):
        VLAPolicy(VLAConfig(privileged_aux=1.0), {"state": Spec((3,)), "privileged": Spec((2,))}, action)


def test_ppo_aux_coef_trains_the_vision_tower_on_the_rollout_frames():
    """algo.aux_coef: each PPO minibatch adds w x policy.aux_loss (the VLA's privileged regression from its cameras)
    on the rollout's frames, so the aux head (and through it the vision tower) learns during RL; 0 leaves the aux head
    alone; a policy without an auxiliary loss is a clear error."""
    reach = pytest.importorskip("sims.mujoco").MujocoReachEnv
    env = reach(reach.Config(cameras=("front", "side"), image_size=32, goal_in_state=False), 4)
    make = dict(vision="keypoints", privileged_aux=1.0, critic="mlp", asymmetric_critic=True)
    policy = policy_for(env, **make)
    collector = Collector(env, policy, steps=4)
    collector.reset(seed=0)
    batch = collector.collect()
    flat = batch[keys.OBS].reshape(-1)
    for coef in (0.0, 1.0):
        policy = policy_for(env, **make)
        before = policy.privileged_loss(flat).detach()
        aux_head = [p.detach().clone() for p in policy.aux_head.parameters()]
        algo = PPO(PPO.Config(lr=1e-3, epochs=1, minibatches=1, desired_kl=None, aux_coef=coef), policy)
        metrics = algo.update(batch)
        moved = any(not torch.equal(a, b) for a, b in zip(aux_head, policy.aux_head.parameters()))
        assert moved == bool(coef) and ("aux_loss" in metrics) == bool(coef)
        if coef:
            assert metrics["aux_loss"] == pytest.approx(float(before), rel=1e-4)  # one minibatch: the whole rollout
            assert float(policy.privileged_loss(flat).detach()) < float(before)
    with pytest.raises(ConfigError, match="algo.aux_coef=1.0 weighs the policy's auxiliary loss; VLAPolicy has none"):
        PPO(PPO.Config(aux_coef=1.0), policy_for(env, vision="keypoints"))


def test_freeze_vision_keeps_the_tower_and_trains_the_rest():
    spec = {"state": Spec((3,)), "images/front": Spec((32, 32, 3), torch.uint8, 0, 255)}
    obs = TensorDict({"state": torch.randn(4, 3), "images/front": torch.randint(0, 256, (4, 32, 32, 3),
                      dtype=torch.uint8)}, batch_size=[4]).unflatten_keys("/")
    batch = TensorDict({"obs": obs, "action": torch.rand(4, 2) * 2 - 1}, batch_size=[4])
    torch.manual_seed(0)
    policy = VLAPolicy(VLAConfig(vision="keypoints", freeze_vision=True), spec, Spec((2,), torch.float32, -1.0, 1.0))
    tower = {k: v.clone() for k, v in policy.vision.state_dict().items()}
    rest = {k: v.clone() for k, v in policy.projector.state_dict().items()}
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
    policy.bc_loss(batch).backward()
    optimizer.step()
    assert all(torch.equal(v, tower[k]) for k, v in policy.vision.state_dict().items())
    assert not all(torch.equal(v, rest[k]) for k, v in policy.projector.state_dict().items())


# --- checkpoints ------------------------------------------------------------------------------
def test_openvla_style_directory_roundtrip(tmp_path):
    env = arm(3)
    obs, _ = env.reset(seed=0)
    policy = policy_for(env, horizon=2)
    policy.action_norm.scale.mul_(1.5)  # non-default normalizer statistics must travel too
    torch.nn.init.normal_(policy.value_head.weight, std=0.1)
    save_pretrained(policy, tmp_path)
    assert {"config.json", "model.safetensors", "vla_config.json", "heads.safetensors"} <= {
        p.name for p in tmp_path.iterdir()}
    loaded = load_pretrained(tmp_path)
    a, b = policy.act(obs, deterministic=True), loaded.act(obs, deterministic=True)
    assert torch.equal(a.action, b.action) and torch.equal(a.log_prob, b.log_prob)
    assert torch.equal(a.value, b.value)


def test_image_policy_directory_roundtrip(tmp_path):
    spec = {"state": Spec((3,)), "images/wrist": Spec((16, 16, 3), torch.uint8, 0, 255)}
    torch.manual_seed(0)
    policy = VLAPolicy(VLAConfig(), spec, Spec((2,), torch.float32, -1.0, 1.0))
    save_pretrained(policy, tmp_path)
    assert (tmp_path / "vision" / "config.json").exists()
    obs = TensorDict({"state": torch.randn(2, 3), "images": {"wrist": torch.randint(0, 256, (2, 16, 16, 3),
                      dtype=torch.uint8)}}, batch_size=[2])
    loaded = load_pretrained(tmp_path)
    assert torch.equal(policy.act(obs, True).log_prob, loaded.act(obs, True).log_prob)


def test_a_plain_causal_lm_directory_becomes_the_backbone(tmp_path):
    import transformers

    torch.manual_seed(0)
    lm = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=700, n_embd=32, n_layer=1, n_head=2))
    lm.save_pretrained(tmp_path)
    env = arm(2)
    policy = load_pretrained(tmp_path, VLAConfig(), env.observation_spec, env.action_spec)
    assert policy.layout.first_action == 700 - 256
    torch.testing.assert_close(policy.lm.transformer.wte.weight, lm.transformer.wte.weight)
    out = policy.act(env.reset(seed=0)[0])
    assert ((out.extras["tokens"] >= 444) & (out.extras["tokens"] < 700)).all()
    with pytest.raises(ValueError, match="observation_spec and action_spec"):
        load_pretrained(tmp_path)


def test_lerobot_checkpoints_are_local_directories(tmp_path):
    import json

    from policies.vla.pretrained import load_lerobot

    with pytest.raises(FileNotFoundError, match="no LeRobot smolvla checkpoint at .*missing"):
        load_lerobot(tmp_path / "missing")
    with pytest.raises(ValueError, match="valid choices: smolvla, pi0"):
        load_lerobot(tmp_path, kind="octo")
    with pytest.raises(FileNotFoundError, match="lacks .*'config.json'.*'policy_preprocessor.json'"):
        load_lerobot(tmp_path)
    for name in ("model.safetensors", "policy_preprocessor.json", "policy_postprocessor.json"):
        (tmp_path / name).write_text("{}")
    (tmp_path / "config.json").write_text(json.dumps({"type": "pi0"}))
    with pytest.raises(ValueError, match="holds a LeRobot 'pi0' policy, not 'smolvla'"):
        load_lerobot(tmp_path, "smolvla")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["smolvla", "pi0"])
def test_lerobot_vla_acts_and_imitates_behind_our_contract(kind, lerobot_python, tmp_path):
    """A tiny, random LeRobot SmolVLA / pi0, built from local configs and saved by LeRobot in its own environment
    (tests/policies/lerobot_vla_side.py, ~15 s and ~1 GB for SmolVLA, ~30 s and ~1.7 GB for pi0), loads through
    load_lerobot and speaks our contract: actions in the action spec that are exactly LeRobot's own pipeline's on
    the same observation, and depend on the image and the instruction; a BC loss whose gradient reaches the
    trainable weights and which a few steps lower on a fixed batch; clear errors for a camera too few or too many."""
    import json
    import math
    import os
    import subprocess
    from pathlib import Path

    here = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": str(here.parents[1]), "HF_LEROBOT_HOME": str(tmp_path / "home"),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}  # nothing from a hub
    side = [lerobot_python, str(here / "lerobot_vla_side.py"), kind, str(tmp_path), str(tmp_path / "out.json")]
    run = subprocess.run(side, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    if run.returncode == 3:  # the environment lacks lerobot's smolvla / pi extra or tensordict: it says which
        pytest.skip(run.stderr.strip().splitlines()[-1])
    assert run.returncode == 0, run.stderr[-4000:]
    rec = json.loads((tmp_path / "out.json").read_text())
    assert rec["wrapper"] == "LeRobotPolicy" and rec["same_weights"]  # the checkpoint loaded as it was saved
    act = rec["act"]
    assert act["action_shape"] == [2, 4] and act["chunk_shape"] == [2, 4, 4] and act["log_prob_shape"] == [2]
    assert act["in_spec"]
    assert act["reference_diff"] < 1e-6  # our observation became exactly the batch LeRobot documents
    assert act["repeat_diff"] == 0.0 and act["sampled_diff"] > 1e-3  # zero noise is deterministic; sampling is not
    assert act["image_diff"] > 1e-4 and act["task_diff"] > 1e-4  # the image and the instruction are read
    errors = rec["errors"]
    assert f"{kind} checkpoint needs observation.images.front (obs 'images/front')" in errors["missing_camera"]
    assert "observation cameras ['images/wrist'] are not read" in errors["extra_camera"]
    assert "without an action likelihood" in errors["evaluate"]
    bc = rec["bc"]
    assert math.isfinite(bc["loss"]) and bc["finite_grad"] and bc["trainable"] > 0
    reaches = bc["grad_reaches"]
    assert reaches["expert"] and reaches["action_proj"] and reaches["state_proj"]
    if kind == "smolvla":  # SmolVLA's default fine-tuning trains the expert only (train_expert_only): VLM frozen
        assert bc["no_grad"] == [] and not reaches["vision"]
    else:  # pi0 trains all of it; unused are the LM heads and the last VLM layer's query side (its prefix feeds K/V)
        assert reaches["vision"]
        assert all("lm_head" in n or "language_model.layers.1." in n or "language_model.norm" in n
                   for n in bc["no_grad"]), bc["no_grad"]
    assert bc["losses"][-1] < 0.5 * bc["losses"][0], bc["losses"]  # 20 Adam steps on one batch, same noise draws


# --- RL: token log-probs through the shared core ----------------------------------------------
@pytest.mark.parametrize("token_ratios", [False, True])
def test_grpo_update_on_group_rollouts_moves_log_probs_with_the_advantage(token_ratios):
    """token_ratios: a step's log-prob per action token [B, T, K], its mask [B, T] spread over the tokens."""
    env = arm(8, max_episode_steps=6)
    policy = policy_for(env, token_ratios=token_ratios)
    batch = collect_groups(env, policy, group_size=4, seed=0)
    assert torch.equal(batch[keys.OBS, "state"][0, 0], batch[keys.OBS, "state"][3, 0])  # one start per group
    assert not torch.equal(batch[keys.OBS, "state"][0, 0], batch[keys.OBS, "state"][4, 0])
    assert batch[keys.MASK].shape == (8, 6) and batch[keys.LOG_PROB].shape == ((8, 6, 4) if token_ratios else (8, 6))
    metrics = GRPO(GRPO.Config(lr=1e-3, minibatches=1), policy).update(batch)
    assert metrics["approx_kl"] < 1e-6  # the first step is on-policy: ratio 1
    new, _, _ = policy.evaluate(batch[keys.OBS], batch[keys.ACTION], batch[keys.EXTRAS])
    change = new - batch[keys.LOG_PROB]
    change = (change.sum(-1) if token_ratios else change) * batch[keys.MASK]
    change = change.sum(1)
    advantage = group_relative_advantages(batch[keys.REWARD], batch[keys.GROUP])
    assert (change * advantage).sum() > 0  # more likely where better than the group, less where worse


def ppo_moves_log_probs_with_the_advantage(env, policy):
    """One PPO update on Collector rollouts; True when the (summed) log-probs rose where the advantage is high."""
    from embodied.algorithms.advantages import gae

    collector = Collector(env, policy, steps=6)
    collector.reset(seed=0)
    batch = collector.collect()
    algo = PPO(PPO.Config(lr=1e-3, epochs=1, minibatches=1, desired_kl=None, entropy_coef=0.0), policy)
    advantage, _ = gae(batch[keys.REWARD], batch[keys.VALUE], batch["next_value"], batch[keys.TERMINATED].float(),
                       batch[keys.DONE].float(), algo.config.gamma, algo.config.lam)
    algo.update(batch)
    with torch.no_grad():
        new, _, _ = policy.evaluate(batch[keys.OBS], batch[keys.ACTION], batch[keys.EXTRAS])
    change = new - batch[keys.LOG_PROB]
    change = change.sum(-1) if change.dim() > advantage.dim() else change  # per-token ratios: [T, N, K]
    return bool((change * (advantage - advantage.mean())).sum() > 0)


def test_ppo_update_on_collector_rollouts_moves_log_probs_with_the_advantage():
    env = arm(8)
    assert ppo_moves_log_probs_with_the_advantage(env, policy_for(env, horizon=2))


def test_token_ratios_score_each_action_token_and_the_mlp_critic_leaves_the_backbone_alone():
    env = arm(6)
    obs, _ = env.reset(seed=0)
    policy = policy_for(env, horizon=2, token_ratios=True, critic="mlp")
    out = policy.act(obs)
    assert out.log_prob.shape == (6, 2 * 4)
    torch.testing.assert_close(out.log_prob, out.extras["token_log_prob"])
    log_prob, entropy, value = policy.evaluate(obs, out.action, out.extras)
    torch.testing.assert_close(log_prob, out.log_prob, atol=1e-4, rtol=1e-5)
    assert entropy.shape == (6, 8) and value.shape == (6,)
    torch.testing.assert_close(value, out.value)
    torch.testing.assert_close(policy.value(obs), value)  # no backbone pass needed, the same number
    # the critic's loss reaches the critic only: PPO's value gradient cannot reshape the token distribution
    (value.square().mean()).backward()
    assert all(p.grad is None for p in policy.lm.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.critic.parameters())
    # one PPO update on per-token ratios (log_prob [T, N, K], token-mean loss) moves the log-probs with the advantage
    assert ppo_moves_log_probs_with_the_advantage(env, policy)
    with pytest.raises(ConfigError, match="policy.critic"):
        VLAConfig(critic="shared")


# --- language FiLM (policy.language_film) --------------------------------------------------
def test_language_film_starts_as_the_identity_then_the_words_change_the_state_token_and_the_action():
    env = arm(6, goal_in_state=False)
    obs, _ = env.reset(seed=0)
    policy = policy_for(env, language_film=True, decoding="parallel")
    state, words = obs[keys.STATE], policy.layout.text_ids(obs[keys.LANGUAGE])
    other = policy.layout.text_ids(env.instructions[env.template * 3 + (env.goal + 1) % 3])  # another ball's name
    assert torch.equal(policy.project_state(state, words), policy.state_proj(policy.state_norm(state)))  # zero init
    torch.nn.init.normal_(policy.film[1].weight)  # as after training: the scale and shift read the words
    assert (policy.project_state(state, words) - policy.project_state(state, other)).abs().amax(-1).min() > 1e-3
    swapped = obs.clone()
    swapped[keys.LANGUAGE] = env.instructions[env.template * 3 + (env.goal + 1) % 3]
    logits = [policy.token_log_probs(o, None, 1.0)[0] for o in (obs, swapped)]
    assert (logits[0] - logits[1]).abs().amax() > 1e-3
    # padding is left out of the words' mean: the same instruction at another width gives the same token
    wide = torch.cat([words, torch.full((6, 8), PAD_ID)], 1)
    torch.testing.assert_close(policy.project_state(state, wide), policy.project_state(state, words))


def test_language_film_without_language_or_state_names_the_key():
    spec = Spec((4,), torch.float32, -1.0, 1.0)
    with pytest.raises(ConfigError, match="policy.language_film=true conditions the 'state' projection"):
        VLAPolicy(VLAConfig(language_film=True), {keys.STATE: Spec((5,), torch.float32)}, spec)
