"""PPO's optimizer wiring: a separate critic's own step size, the critic-only warm-up, the compiled and bf16 updates."""

import pytest
import torch

from embodied import device, registry
from embodied.algorithms.ppo import PPO
from embodied.config import ConfigError
from embodied.rollout import Collector


def rollout(seed=0):
    torch.manual_seed(seed)
    env = registry.build("env", "arm_reach", {}, num_envs=16, device="cpu")
    policy = registry.build("policy", "mlp", {}, observation_spec=env.observation_spec, action_spec=env.action_spec)
    collector = Collector(env, policy, steps=8)
    collector.reset(seed=seed)
    return policy, collector


def snapshot(module):
    return [p.detach().clone() for p in module.parameters()]


def changed(before, module):
    return any(not torch.equal(a, b) for a, b in zip(before, module.parameters()))


def test_critic_warmup_trains_the_critic_alone_then_both():
    policy, collector = rollout()
    algo = PPO(PPO.Config(critic_warmup=1, epochs=2, minibatches=2), policy)
    actor, critic, log_std = snapshot(policy.actor), snapshot(policy.critic), policy.log_std.detach().clone()
    lr = algo.lr
    algo.update(collector.collect())
    assert not changed(actor, policy.actor) and torch.equal(log_std, policy.log_std)  # the actor untouched
    assert changed(critic, policy.critic)
    assert algo.lr == lr  # no KL step while the actor stands still
    algo.update(collector.collect())
    assert changed(actor, policy.actor)
    assert PPO(PPO.Config(critic_warmup=1), policy).state_dict()["updates"] == 0
    restored = PPO(PPO.Config(critic_warmup=1), policy)
    restored.load_state_dict(algo.state_dict())
    assert restored.updates == 2  # a resumed run does not warm up again


def test_critic_lr_stays_fixed_while_the_kl_schedule_moves_the_actor_lr():
    policy, collector = rollout()
    algo = PPO(PPO.Config(lr=1e-2, critic_lr=3e-4, desired_kl=1e-6), policy)  # any real step exceeds 2x this KL
    actor_group, critic_group = algo.optimizer.param_groups
    assert {id(p) for p in critic_group["params"]} == {id(p) for p in policy.critic.parameters()}
    assert not {id(p) for p in actor_group["params"]} & {id(p) for p in critic_group["params"]}
    algo.update(collector.collect())
    assert actor_group["lr"] < 1e-2 and critic_group["lr"] == 3e-4


def test_the_compiled_update_trains_as_the_eager_one(monkeypatch):
    """algo.compile=true (torch.compile of the minibatch loss): the same metrics, weights and KL schedule as the
    eager update over two updates (each update's first KL is 0 up to rounding, 4e-16 eager and 0.0 compiled: the
    schedule must read both alike)."""
    # inductor compiles in this process: its default pool of compile subprocesses takes both of CI's cores for
    # seconds, and the other test worker's real-time robot loops stalled past their watchdogs beside it
    monkeypatch.setattr(torch._inductor.config, "compile_threads", 1)
    runs = {}
    for compile in (False, True):
        policy, collector = rollout()
        algo = PPO(PPO.Config(compile=compile, epochs=2, minibatches=2), policy)
        runs[compile] = ([algo.update(collector.collect()) for _ in range(2)], policy)
    (eager_metrics, eager_policy), (compiled_metrics, compiled_policy) = runs.values()
    assert eager_metrics[-1]["lr"] > PPO.Config().lr  # the schedule moved the step size, alike in both
    for a, b in zip(eager_metrics, compiled_metrics):
        assert a.keys() == b.keys()
        for k in a:
            assert b[k] == pytest.approx(a[k], rel=1e-4, abs=1e-6), k
    for a, b in zip(eager_policy.parameters(), compiled_policy.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


def test_a_bf16_update_computes_the_fp32_loss_up_to_bf16_rounding():
    """algo.precision=bf16 (the policy's forward under autocast): one update's losses within bf16's rounding of the
    fp32 update's, the weights and optimizer still fp32; an unknown precision names the valid ones."""
    runs = {}
    for precision in ("fp32", "bf16"):
        policy, collector = rollout()
        algo = PPO(PPO.Config(precision=precision, epochs=1, minibatches=1, desired_kl=None), policy)
        runs[precision] = (algo.update(collector.collect()), policy)
    (fp32, _), (bf16, policy) = runs.values()
    for k in ("policy_loss", "value_loss", "entropy", "loss"):
        assert bf16[k] == pytest.approx(fp32[k], rel=2e-2, abs=1e-3), k
    assert bf16["loss"] != fp32["loss"]  # the forward did run in bf16
    assert all(p.dtype == torch.float32 for p in policy.parameters())
    with pytest.raises(ConfigError, match="valid choices: fp32, bf16"):
        PPO.Config(precision="fp16")


def test_bf16_on_a_cpu_without_native_bf16_says_it_is_emulated(tmp_path, monkeypatch, capsys):
    """/proc/cpuinfo's flags decide: without avx512_bf16 or amx_bf16 a notice names the slower emulation."""
    cpuinfo = tmp_path / "cpuinfo"
    monkeypatch.setattr(device, "CPUINFO", str(cpuinfo))
    for flags, native in (("fpu avx2 avx512f", False), ("fpu avx512f avx512_bf16", True), ("fpu amx_bf16", True)):
        cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        assert device.native_bf16() is native
        policy, _ = rollout()
        PPO(PPO.Config(precision="bf16"), policy)
        PPO(PPO.Config(), policy)  # fp32: never a notice
        assert ("torch emulates the bf16 matmuls" in capsys.readouterr().err) is not native, flags
    monkeypatch.setattr(device, "CPUINFO", str(tmp_path / "absent"))
    assert device.native_bf16() is None


def test_critic_options_need_a_separate_critic():
    class NoCritic(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(2, 2)

    with pytest.raises(ConfigError, match="critic_lr / algo.critic_warmup"):
        PPO(PPO.Config(critic_lr=1e-3), NoCritic())
    with pytest.raises(ConfigError, match="critic_warmup"):
        PPO.Config(critic_warmup=-1)


def test_stale_data_is_clipped_around_the_current_policy_and_weighted_by_the_capped_ratio():
    """Decoupled PPO (cluster.max_staleness > 0): fresh data passes unchanged; on stale data the old log-probs
    become the current policy's and each advantage is weighted by min(pi_current / pi_behaviour, cap)."""
    from embodied import keys
    from embodied.algorithms.ppo import decoupled

    policy, collector = rollout()
    batch = collector.collect()
    flat = batch.select(keys.OBS, keys.ACTION, keys.LOG_PROB).reshape(-1)
    advantage = torch.randn(len(flat))
    fresh = decoupled(policy, flat, advantage, torch.zeros(len(flat), dtype=torch.long), 2.0, 4)
    assert fresh[0] is flat[keys.LOG_PROB] and fresh[1] is advantage
    PPO(PPO.Config(lr=1e-2), policy).update(batch)  # the learner moves on: the batch is now one update old
    old, weighted = decoupled(policy, flat, advantage, torch.ones(len(flat), dtype=torch.long), 2.0, 4)
    current, _, _ = policy.evaluate(flat[keys.OBS], flat[keys.ACTION], None)
    torch.testing.assert_close(old, current.detach())
    weight = weighted / advantage
    torch.testing.assert_close(weight, (current - flat[keys.LOG_PROB]).exp().clamp(max=2.0).detach())
    assert (weight != 1).any() and (weight <= 2.0 + 1e-6).all()
    # the update takes the stale batch and trains (finite metrics)
    stale = batch.clone()
    stale[keys.STALENESS] = torch.ones(batch.batch_size, dtype=torch.long)
    metrics = PPO(PPO.Config(), policy).update(stale)
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())


def test_a_synchronous_ray_batch_costs_no_extra_pass():
    """cluster=ray marks every batch with its staleness; at 0 everywhere (max_staleness=0) the update is the
    single-process one, with no pass of the current policy over the batch for nothing (it cost the hover
    iteration ~8 ms, benchmarks/RESULTS.md)."""
    from embodied import keys

    policy, collector = rollout()
    batch = collector.collect()
    marked = batch.clone()
    marked[keys.STALENESS] = torch.zeros(batch.batch_size, dtype=torch.long)
    calls = []
    evaluate = policy.evaluate
    policy.evaluate = lambda *a, **k: calls.append(len(a[0])) or evaluate(*a, **k)
    results = []
    for data in (batch, marked):
        start = len(calls)
        torch.manual_seed(1)
        PPO(PPO.Config(), policy).update(data)
        results.append(calls[start:])
    assert results[0] == results[1] and results[0]  # the same minibatch passes, and nothing else


def test_stale_data_takes_the_current_critics_values():
    """On stale data (cluster.max_staleness > 0) GAE and the value loss use the learner's critic, not the values
    the collection stored (a critic trained toward its own lagged bootstraps oscillates, issue 20): the update
    ignores the stored values except where the rollout holds no next observation (time-limit cuts, the last
    step). Fresh data keeps the stored ones."""
    from embodied import keys
    from embodied.algorithms.ppo import current_values, evaluate_chunks

    def critic_now(batch):  # the learner's pass over the rollout (PPO.update's)
        return evaluate_chunks(policy, batch.select(keys.OBS, keys.ACTION).reshape(-1), 4)[1]

    policy, collector = rollout()
    batch = collector.collect()
    fresh = current_values(batch, torch.zeros(batch.batch_size, dtype=torch.long), critic_now(batch))
    assert fresh[0] is batch[keys.VALUE] and fresh[1] is batch["next_value"]
    PPO(PPO.Config(lr=1e-2), policy).update(batch)  # the learner moves on: the batch is now one update old
    stale = torch.ones(batch.batch_size, dtype=torch.long)
    value, next_value = current_values(batch, stale, critic_now(batch))
    with torch.no_grad():
        now = policy.value(batch[keys.OBS].reshape(-1)).reshape(batch.batch_size)
    torch.testing.assert_close(value, now)
    assert not torch.allclose(value, batch[keys.VALUE])  # the critic moved
    cut = batch[keys.TRUNCATED]
    moved = batch["next_value"] + now - batch[keys.VALUE]  # no next observation: the critic's change at t
    expected = torch.where(cut, moved, torch.cat([now[1:], moved[-1:]]))
    torch.testing.assert_close(next_value, expected)
    # the update reads those values: stored ones shifted where they are recomputed change nothing (where they are
    # moved by the critic's change, the stored next value and value shift together)
    scrambled = batch.clone()
    keep = torch.zeros_like(cut)
    keep[-1] = True
    keep |= cut
    scrambled[keys.VALUE] = batch[keys.VALUE] + 5.0
    scrambled["next_value"] = torch.where(keep, batch["next_value"] + 5.0, batch["next_value"] - 5.0)
    results = []
    for data in (batch, scrambled):
        data = data.clone()
        data[keys.STALENESS] = stale
        copy = rollout()[0]
        copy.load_state_dict(policy.state_dict())
        torch.manual_seed(1)
        PPO(PPO.Config(), copy).update(data)
        results.append(snapshot(copy))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b)  # equal up to rounding
