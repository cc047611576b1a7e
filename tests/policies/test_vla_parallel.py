"""Parallel decoding of the VLA (`policy.decoding=parallel`, OpenVLA-OFT): one backbone pass per act,
exact log-probs shared by act and evaluate, learning by BC, PPO and GRPO through the shared core."""

import pytest
import torch

pytest.importorskip("transformers", reason="the VLA policy needs the 'transformers' extra")

from tensordict import TensorDict  # noqa: E402

from embodied import keys  # noqa: E402
from embodied.algorithms.advantages import group_relative_advantages  # noqa: E402
from embodied.algorithms.grpo import GRPO  # noqa: E402
from embodied.config import ConfigError  # noqa: E402
from embodied.rollout import collect_groups  # noqa: E402
from policies.lm.load import byte_tokenizer, tiny_llama  # noqa: E402
from policies.vla import VLAConfig, VLAPolicy  # noqa: E402
from policies.vla.pretrained import load_pretrained, save_pretrained  # noqa: E402
from tests.policies.test_vla import arm, policy_for, ppo_moves_log_probs_with_the_advantage  # noqa: E402


def count_backbone_passes(policy, fn):
    """How many times `fn()` runs the backbone's forward."""
    calls = []
    hook = policy.lm.register_forward_hook(lambda *args: calls.append(1))
    try:
        fn()
    finally:
        hook.remove()
    return len(calls)


def test_bad_decoding_names_the_key_and_the_choices():
    with pytest.raises(ConfigError, match="policy.decoding='beam': valid choices autoregressive, parallel"):
        VLAConfig(decoding="beam")


def test_parallel_act_runs_the_backbone_once_where_autoregressive_runs_it_per_token():
    env = arm(3)
    obs, _ = env.reset(seed=0)
    parallel = policy_for(env, horizon=3, decoding="parallel")
    serial = policy_for(env, horizon=3)
    assert parallel.tokens == 12
    assert count_backbone_passes(parallel, lambda: parallel.act(obs)) == 1
    assert count_backbone_passes(serial, lambda: serial.act(obs)) == 12
    out = parallel.act(obs)
    assert count_backbone_passes(parallel, lambda: parallel.evaluate(obs, out.action, out.extras)) == 1
    assert out.extras["tokens"].shape == (3, 12) and out.action.shape == (3, 4)
    assert ((out.action >= env.action_spec.low) & (out.action <= env.action_spec.high)).all()


@pytest.mark.parametrize("token_ratios", [False, True])
def test_parallel_act_log_probs_equal_evaluate_exactly(token_ratios):
    env = arm(6)
    obs, _ = env.reset(seed=1)
    policy = policy_for(env, horizon=2, temperature=1.5, decoding="parallel", token_ratios=token_ratios)
    torch.nn.init.normal_(policy.value_head.weight, std=0.1)
    torch.nn.init.normal_(policy.action_queries, std=1.0)  # slots far apart: their distributions differ
    out = policy.act(obs)
    log_prob, entropy, value = policy.evaluate(obs, out.action, out.extras)
    assert torch.equal(log_prob, out.log_prob)  # the same single pass, not a re-computation by another route
    assert torch.equal(value, out.value)
    torch.testing.assert_close(policy.value(obs), value)  # the value position sees the prefix only (causal)
    assert log_prob.shape == ((6, 8) if token_ratios else (6,))
    assert (entropy > 0).all()
    # the slots are independent given the prefix: the joint log-prob is the sum of the slots' own
    log_p, _ = policy.token_log_probs(obs, None, 1.5)
    per_slot = log_p.gather(-1, policy.layout.action_bins(out.extras["tokens"]).unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(per_slot.sum(-1), out.extras["token_log_prob"].sum(-1))
    assert not torch.allclose(log_p[:, 0], log_p[:, 1])  # each slot its own distribution
    # greedy picks each slot's most likely bin
    greedy = policy.act(obs, deterministic=True)
    assert torch.equal(policy.layout.action_bins(greedy.extras["tokens"]), log_p.argmax(-1))


@pytest.mark.parametrize("backbone", ["llama", "gpt2"])
def test_action_slots_attend_to_each_other_and_the_prefix_never_sees_them(backbone):
    env = arm(2)
    obs, _ = env.reset(seed=0)
    policy = policy_for(env, backbone=backbone, horizon=2, decoding="parallel")
    torch.nn.init.normal_(policy.value_head.weight, std=0.1)
    first_slot = -policy.tokens
    with torch.no_grad():
        out, value = policy.forward_actions(obs, None)
        # move the last slot's placeholder only (randomly: GPT-2's layer norms remove a constant shift)
        policy.action_queries[-1].add_(torch.randn(policy.action_queries.shape[1]))
        moved, moved_value = policy.forward_actions(obs, None)
    # the first slot sees the last one (bidirectional)
    assert not torch.allclose(moved.hidden_states[-1][:, first_slot], out.hidden_states[-1][:, first_slot])
    assert torch.equal(moved_value, value)  # the value position is in the prefix: it never sees a slot
    # the prefix is still causal: its last position's hidden state is the same as a prefix-only pass
    with torch.no_grad():
        full, _ = policy.forward_actions(obs, None)
        alone = policy.lm(inputs_embeds=policy.prefix(obs), output_hidden_states=True)
    p = alone.hidden_states[-1].shape[1]
    torch.testing.assert_close(full.hidden_states[-1][:, :p], alone.hidden_states[-1], atol=1e-5, rtol=1e-5)


def fit_random_chunks(policy, env, obs, steps: int) -> tuple[list[float], torch.Tensor]:
    """BC on one fixed batch of random 2-step chunks (seeded): the loss of every Adam step, and the chunks."""
    torch.manual_seed(0)
    low, high = env.action_spec.low, env.action_spec.high
    chunk = low + (high - low) * torch.rand(len(obs), 2, 4)
    batch = TensorDict({keys.OBS: obs, keys.ACTION: chunk}, batch_size=[len(obs)])
    optimizer = torch.optim.Adam(policy.parameters(), lr=3e-3)
    losses = []
    for _ in range(steps):
        loss = policy.bc_loss(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, chunk


def test_parallel_bc_loss_learns_a_fixed_batch():
    env = arm(16)
    obs, _ = env.reset(seed=0)
    policy = policy_for(env, horizon=2, n_bins=32, decoding="parallel")
    losses, _ = fit_random_chunks(policy, env, obs, steps=30)
    assert losses[0] == pytest.approx(torch.log(torch.tensor(32.0)).item(), abs=0.3)  # ~uniform at init
    assert losses[-1] < 0.5 * losses[0]  # it fits the demos, not merely runs
    assert policy.action_queries.grad is not None and policy.action_queries.grad.abs().sum() > 0


@pytest.mark.parametrize("token_ratios", [False, True])
def test_ppo_update_over_parallel_decoding_moves_log_probs_with_the_advantage(token_ratios):
    env = arm(8)
    policy = policy_for(env, horizon=2, decoding="parallel", token_ratios=token_ratios, critic="mlp")
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    assert ppo_moves_log_probs_with_the_advantage(env, policy)
    moved = [n for n, p in policy.named_parameters() if not torch.equal(p, before[n])]
    assert "action_queries" in moved and any(n.startswith("lm.") for n in moved)


def test_grpo_update_from_identical_resets_over_parallel_decoding():
    env = arm(8, max_episode_steps=6)
    policy = policy_for(env, decoding="parallel")
    batch = collect_groups(env, policy, group_size=4, seed=0)
    assert torch.equal(batch[keys.OBS, "state"][0, 0], batch[keys.OBS, "state"][3, 0])  # one start per group
    metrics = GRPO(GRPO.Config(lr=1e-3, minibatches=1), policy).update(batch)
    assert metrics["approx_kl"] < 1e-6  # act's log-probs are evaluate's: ratio exactly 1 on the first step
    new, _, _ = policy.evaluate(batch[keys.OBS], batch[keys.ACTION], batch[keys.EXTRAS])
    change = ((new - batch[keys.LOG_PROB]) * batch[keys.MASK]).sum(1)
    advantage = group_relative_advantages(batch[keys.REWARD], batch[keys.GROUP])
    assert (change * advantage).sum() > 0


@pytest.mark.parametrize("action_head", ["bins", "l1"])
def test_parallel_policy_directory_roundtrip(tmp_path, action_head):
    env = arm(3)
    obs, _ = env.reset(seed=0)
    policy = policy_for(env, horizon=2, decoding="parallel", action_head=action_head)
    torch.nn.init.normal_(policy.action_queries, std=1.0)  # the trained placeholders must travel
    save_pretrained(policy, tmp_path)
    loaded = load_pretrained(tmp_path)
    assert (loaded.config.decoding, loaded.config.action_head) == ("parallel", action_head)
    a, b = policy.act(obs, deterministic=True), loaded.act(obs, deterministic=True)
    assert torch.equal(a.action, b.action) and torch.equal(a.log_prob, b.log_prob)


def test_parallel_decoding_over_a_pretrained_backbone_with_lora(tmp_path):
    tokenizer = byte_tokenizer()
    tiny_llama(tokenizer, seed=0).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    env = arm(3)
    obs, _ = env.reset(seed=0)
    torch.manual_seed(0)
    policy = VLAPolicy(VLAConfig(backbone=str(tmp_path), n_bins=32, lora_rank=4, decoding="parallel"),
                       env.observation_spec, env.action_spec)
    assert policy.action_queries.requires_grad  # trained beside the adapters
    assert count_backbone_passes(policy, lambda: policy.act(obs)) == 1
    out = policy.act(obs)
    assert torch.equal(policy.evaluate(obs, out.action, out.extras)[0], out.log_prob)
    assert "action_queries" in policy.state_dict()


# --- the L1 head: OFT's continuous actions, BC only ---------------------------------------------
def test_l1_head_learns_by_regression_and_refuses_what_needs_a_distribution():
    with pytest.raises(ConfigError, match="policy.action_head='gauss': valid choices bins, l1"):
        VLAConfig(action_head="gauss", decoding="parallel")
    with pytest.raises(ConfigError, match="action_head=l1 .*set policy.decoding=parallel"):
        VLAConfig(action_head="l1")
    env = arm(16)
    obs, _ = env.reset(seed=0)
    policy = policy_for(env, horizon=2, n_bins=32, decoding="parallel", action_head="l1")
    losses, chunk = fit_random_chunks(policy, env, obs, steps=80)
    low, high = env.action_spec.low, env.action_spec.high
    assert losses[-1] < 0.6 * losses[0]  # ~0.5 (the best constant's) -> ~0.2: it fits each sample's chunk
    out = policy.act(obs, deterministic=True)
    assert count_backbone_passes(policy, lambda: policy.act(obs, deterministic=True)) == 1
    assert ((out.action >= low) & (out.action <= high)).all()
    # the executed action is the first row of the regressed chunk, mapped back to the env's units
    torch.testing.assert_close(out.action, policy.action_norm.inverse(out.extras["chunk"][:, 0]).clamp(low, high))
    assert (out.action - chunk[:, 0]).abs().mean() < (chunk[:, 0] - chunk[:, 0].mean(0)).abs().mean()  # fitted
    with pytest.raises(ValueError, match="act\\(deterministic=False\\) with policy.action_head=l1.*action_head=bins"):
        policy.act(obs)
    with pytest.raises(ValueError, match="evaluate with policy.action_head=l1.*PPO and GRPO need action_head=bins"):
        policy.evaluate(obs, out.action, out.extras)
