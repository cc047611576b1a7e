"""Diffusion and flow policies: step log-probs against torch.distributions, evaluate() reproduces act()
on the stored chain, golden outputs, schedule math, BC on demonstrations."""

import math

import pytest
import torch
from tensordict import TensorDict

from embodied import keys, registry
from embodied.config import ConfigError, build_config
from embodied.data.record import record
from embodied.data.sources import open_data
from policies.common.nets import gaussian_log_prob
from policies.diffusion import DiffusionPolicy
from policies.diffusion.schedule import cosine_alpha_bars, ddim_step, ddim_timesteps
from policies.flow import FlowPolicy

VARIANTS = [("diffusion", {}), ("diffusion", {"prediction": "sample", "eta": 0.5}), ("diffusion", {"step_ratios": True}),
            ("flow", {"step_ratios": True}),
            ("flow", {"noise_method": "flow_noise"}), ("flow", {"noise_method": "flow_sde"})]


def build(name, params, env_name="arm_reach", n=5):
    torch.manual_seed(0)
    env = registry.build("env", env_name, {}, num_envs=n)
    policy = registry.build("policy", name, params, observation_spec=env.observation_spec, action_spec=env.action_spec)
    return env, policy


def test_gaussian_log_prob_matches_torch_distributions():
    x, mean, std = torch.randn(7, 3), torch.randn(7, 3), torch.rand(7, 3) + 0.05
    expected = torch.distributions.Normal(mean, std).log_prob(x)
    torch.testing.assert_close(gaussian_log_prob(x, mean, std), expected)


def test_ddim_step_log_prob_matches_normal_and_the_formula():
    """One stochastic DDIM step scored by hand (Song et al. 2021, eq. 12) and by torch.distributions."""
    ab = cosine_alpha_bars(100)
    k, k_prev = 50, 40
    x, eps = torch.randn(4, 2, 3), torch.randn(4, 2, 3)
    mean, std = ddim_step(x, eps, ab[k], ab[k_prev], "epsilon", eta=1.0, min_std=1e-6)
    x0 = ((x - (1 - ab[k]).sqrt() * eps) / ab[k].sqrt()).clamp(-1, 1)
    eps_c = (x - ab[k].sqrt() * x0) / (1 - ab[k]).sqrt()
    sigma = ((1 - ab[k_prev]) / (1 - ab[k]) * (1 - ab[k] / ab[k_prev])).sqrt()
    torch.testing.assert_close(std, sigma.expand_as(x))
    torch.testing.assert_close(mean, ab[k_prev].sqrt() * x0 + (1 - ab[k_prev] - sigma**2).sqrt() * eps_c)
    sample = mean + std * torch.randn_like(mean)
    torch.testing.assert_close(gaussian_log_prob(sample, mean, std),
                               torch.distributions.Normal(mean, std).log_prob(sample))
    # the last step (alpha_bar_prev = 1) has no noise of its own: the floor takes over
    _, last_std = ddim_step(x, eps, ab[0], torch.tensor(1.0), "epsilon", eta=1.0, min_std=0.1)
    assert torch.all(last_std == 0.1)


def test_schedule_hand_values():
    ab = cosine_alpha_bars(100)
    f = lambda t: math.cos((t / 100 + 0.008) / 1.008 * math.pi / 2) ** 2  # noqa: E731
    assert ab[0].item() == pytest.approx(f(1) / f(0), rel=1e-6)
    assert ab[99].item() < 1e-3 and torch.all(ab[1:] < ab[:-1])
    assert ddim_timesteps(100, 10).tolist() == [90, 80, 70, 60, 50, 40, 30, 20, 10, 0]


def test_flow_sde_step_moments_by_hand():
    """Flow-SDE (Flow-GRPO eq. 9) at one step, recomputed from the formula."""
    _, policy = build("flow", {"noise_method": "flow_sde", "noise_level": 0.7})
    cond = torch.randn(3, policy.encoder.dim)
    x = torch.randn(3, policy.config.horizon, 4)
    i = torch.tensor([2, 2, 2])
    v = policy.velocity(x, policy.times[i], cond)
    t, dt = 0.8, 0.1
    sigma = 0.7 * math.sqrt(t / (1 - t))
    a_hat, e_hat = x - t * v, x + (1 - t) * v
    mean = (1 - (t - dt)) * a_hat + (t - dt - sigma**2 * dt / (2 * t)) * e_hat
    got_mean, got_std = policy._step(x, i, cond, "flow_sde")
    torch.testing.assert_close(got_mean, mean, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_std, torch.full_like(x, math.sqrt(dt) * sigma))
    ode_mean, _ = policy._step(x, i, cond, "ode")
    torch.testing.assert_close(ode_mean, x - dt * v)


@pytest.mark.parametrize("name", ["diffusion", "flow"])
def test_step_ratios_score_each_denoising_step(name):
    """step_ratios: log_prob [N, S] whose sum is the chain's joint log-prob under the same weights."""
    _, per_chain = build(name, {})
    env, per_step = build(name, {"step_ratios": True})
    obs, _ = env.reset(seed=1)
    out = per_step.act(obs)
    assert out.log_prob.shape == (5, per_step.config.sample_steps)
    chain_log_prob, _, _ = per_chain.evaluate(obs, out.action, out.extras)  # build() seeds: identical weights
    torch.testing.assert_close(out.log_prob.sum(-1), chain_log_prob, atol=1e-3, rtol=1e-5)
    _, entropy, _ = per_step.evaluate(obs, out.action, out.extras)
    assert entropy.shape == out.log_prob.shape
    with pytest.raises(ConfigError, match="flow_sde has one stochastic step"):
        build("flow", {"step_ratios": True, "noise_method": "flow_sde"})


@pytest.mark.parametrize("name,params", VARIANTS)
def test_evaluate_reproduces_act_log_prob_on_the_stored_chain(name, params):
    env, policy = build(name, params)
    obs, _ = env.reset(seed=1)
    out = policy.act(obs)
    chain = out.extras["chain"]
    assert chain.shape == (5, policy.config.sample_steps + 1, policy.config.horizon, 4)
    log_prob, entropy, value = policy.evaluate(obs, out.action, out.extras)
    torch.testing.assert_close(log_prob, out.log_prob, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(value, out.value)
    assert torch.isfinite(entropy).all()
    # the executed action is the chain's last point, first row, un-normalized and clipped
    torch.testing.assert_close(out.action, policy.first_action(chain[:, -1]))
    # gradients reach the denoiser through the log-prob (what PPO needs)
    log_prob.sum().backward()
    net = policy.denoiser if name == "diffusion" else policy.velocity
    assert net.inp.weight.grad.abs().sum() > 0


def test_flow_noise_log_prob_is_the_joint_of_every_step():
    env, policy = build("flow", {"noise_method": "flow_noise"})
    obs, _ = env.reset(seed=2)
    out = policy.act(obs)
    chain, cond = out.extras["chain"], policy.encoder(obs)
    total = torch.zeros(5)
    for i in range(policy.config.sample_steps):
        mean, std = policy._step(chain[:, i], torch.full((5,), i), cond, "flow_noise")
        assert torch.all((std >= policy.config.noise_min) & (std <= policy.config.noise_max))
        total += torch.distributions.Normal(mean, std).log_prob(chain[:, i + 1]).sum((1, 2))
    torch.testing.assert_close(total, out.log_prob, atol=1e-4, rtol=1e-5)


def test_flow_sde_has_one_stochastic_step():
    env, policy = build("flow", {"noise_method": "flow_sde"})
    out = policy.act(env.reset(seed=3)[0])
    chain, index, cond = out.extras["chain"], out.extras["index"], policy.encoder(env.reset(seed=3)[0])
    for i in range(policy.config.sample_steps):
        ode, _ = policy._step(chain[:, i], torch.full((5,), i), cond, "ode")
        same = torch.isclose(ode, chain[:, i + 1], atol=1e-5).flatten(1).all(-1)
        assert torch.equal(same, index != i)


# fixed seed and weights -> pinned numbers; a change here is a change of behaviour. Per policy: the
# deterministic action of envs 0-1, the stochastic chain's last point (first chunk row) of envs 0-1
# with torch.manual_seed(5), and that chain's log-probability for all 5 envs.
GOLDEN = {
    "diffusion": ([[-1.0, -1.0, -0.99934, -1.0], [-1.0, -1.0, 1.0, -1.0]],
                  [[1.02092, 0.94422, 0.98319, 0.87692], [-0.17664, 0.91682, 1.09, 0.05367]],
                  [-30.668, -34.935, -37.875, -36.358, -39.542]),
    "flow": ([[-0.39444, -0.34491, -0.42996, -0.33242], [-0.29283, -0.16649, 0.67491, -0.32966]],
             [[1.12327, 1.25785, -1.79326, -2.52931], [3.07063, 1.05258, -0.11072, -0.61304]],
             [120.59, 113.493, 106.899, 123.422, 119.196]),
}


@pytest.mark.parametrize("name", ["diffusion", "flow"])
def test_golden_outputs(name):
    env, policy = build(name, {})
    obs, _ = env.reset(seed=0)
    action, last, log_prob = (torch.tensor(v) for v in GOLDEN[name])
    torch.testing.assert_close(policy.act(obs, deterministic=True).action[:2], action, atol=1e-4, rtol=1e-4)
    torch.manual_seed(5)
    out = policy.act(obs)
    torch.testing.assert_close(out.extras["chain"][:2, -1, 0], last, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out.log_prob, log_prob, atol=2e-3, rtol=1e-5)


def test_consistency_sampler_acts_in_one_call():
    env, policy = build("diffusion", {"sampler": "consistency"})
    calls = []
    policy.student.register_forward_hook(lambda *a: calls.append(1))
    policy.denoiser.register_forward_hook(lambda *a: calls.append(10))
    out = policy.act(env.reset(seed=0)[0], deterministic=True)
    assert calls == [1] and out.action.shape == (5, 4)


def test_bad_config_names_the_key():
    with pytest.raises(ConfigError, match="noise_method"):
        build("flow", {"noise_method": "langevin"})
    with pytest.raises(ConfigError, match="sample_steps"):
        build("diffusion", {"sample_steps": 7})


def test_bc_needs_matching_chunks():
    env, policy = build("diffusion", {"horizon": 4})
    batch = TensorDict({keys.OBS: env.reset(seed=0)[0], keys.ACTION: torch.zeros(5, 3, 4)}, batch_size=[5])
    with pytest.raises(ValueError, match="horizon"):
        policy.bc_loss(batch)
    with pytest.raises(ValueError, match="chain"):
        policy.evaluate(env.reset(seed=0)[0], torch.zeros(5, 4), {})


@pytest.mark.parametrize("name", ["diffusion", "flow"])
def test_bc_on_demos_lowers_the_loss(name, tmp_path):
    """200 Adam steps on expert chunks: the held-fixed evaluation loss falls by more than half."""
    env, policy = build(name, {"width": 64})
    demo_env = registry.build("env", "arm_reach", {}, num_envs=16)
    record(demo_env, tmp_path / "demos.zarr", episodes=16, seed=0)  # the pipeline's demos: a store, read as windows
    source = open_data([tmp_path / "demos.zarr"], demo_env.observation_spec, demo_env.action_spec, 0.99,
                       horizon=policy.config.horizon)
    policy.fit_normalizers(source.columns())
    data = source.sample(1024, torch.Generator().manual_seed(0))

    def held_out_loss():
        torch.manual_seed(123)
        with torch.no_grad():
            return policy.bc_loss(data).item()

    before = held_out_loss()
    opt = torch.optim.Adam(policy.parameters(), lr=2e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        loss = policy.bc_loss(data[torch.randint(0, data.batch_size[0], (128,), generator=gen)])
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert held_out_loss() < 0.5 * before


@pytest.mark.parametrize("name,params", VARIANTS)
def test_ppo_update_through_the_stored_chain(name, params):
    """Collector stores act()'s chain under batch['extras']; PPO's first minibatch sees ratio 1 exactly."""
    from embodied.algorithms.ppo import PPO
    from embodied.rollout import Collector

    env, policy = build(name, {**params, "width": 32}, n=4)
    batch = Collector(env, policy, steps=3).collect()
    assert batch[keys.EXTRAS, "chain"].shape[:2] == (3, 4)
    flat = batch.reshape(-1)
    log_prob, _, _ = policy.evaluate(flat[keys.OBS], flat[keys.ACTION], flat[keys.EXTRAS])
    torch.testing.assert_close(log_prob, flat[keys.LOG_PROB], atol=1e-4, rtol=1e-5)
    before = [p.detach().clone() for p in policy.parameters()]
    metrics = PPO(PPO.Config(epochs=1, minibatches=2, desired_kl=None), policy).update(batch)
    assert all(math.isfinite(v) for v in metrics.values())
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.parameters()))


def test_experiment_configs_compose():
    from embodied.cli import compose
    from embodied.runner.pipeline import PipelineConfig, runner_class

    for name in ("arm_reach_flow_ppo", "quadrotor_hover_diffusion_bc"):  # Hydra composes ~1-2 s each
        config = compose([f"experiment={name}"])
        assert runner_class(config).__name__ == "Pipeline"
        build_config(PipelineConfig, config["pipeline"], "pipeline")
        env = registry.build("env", config["env"]["name"], {k: v for k, v in config["env"].items() if k != "name"})
        registry.build("policy", config["policy"]["name"], {k: v for k, v in config["policy"].items() if k != "name"},
                       observation_spec=env.observation_spec, action_spec=env.action_spec)
