"""One-step consistency distillation of the DDIM sampler into `DiffusionPolicy.student`.

    metrics = distill(policy, dataset, updates=3000, batch_size=256, lr=1e-3, generator=gen)
    # then act with it: build the policy with `sampler: consistency` and load these weights

The consistency function of a probability-flow ODE maps every point of a
trajectory to the trajectory's end (Song et al. 2023, "Consistency Models",
eq. 3); a model of it samples in one call, f(x_K). Consistency distillation
learns it from a teacher's ODE solver. Our teacher is the policy's own
deterministic DDIM sampler (eta = 0), S steps in all, so we run it to the end
for each batch and regress f(x_n, n) onto the trajectory's end for every point
x_n (n = steps remaining) instead of bootstrapping the target from the
neighbouring point with an EMA network: the same fixed point, with an exact
target, which costs S denoiser calls per batch and suits S = 10. A quarter of
the trajectories start at x_K = 0, where the deterministic act() starts.

The observations come from the demonstrations and from `teacher_observations`:
the states the teacher itself visits when it acts in the env. Demonstrations
alone leave the student unfitted off the expert's path, where the teacher (and
so the student) drives on its own (measured: benchmarks/RESULTS.md).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from embodied import keys
from embodied.envs import VecEnv

ZERO_START_FRACTION = 0.25  # share of trajectories from x_K = 0 (the deterministic act's start)


def distill(policy, dataset: TensorDict, updates: int, batch_size: int = 256, lr: float = 1e-3,
            generator: torch.Generator | None = None) -> dict[str, float]:
    """Train policy.student on observations from `dataset` (TensorDict [M] with obs); returns final metrics."""
    if updates < 1:
        raise ValueError(f"distill updates={updates} must be >= 1")
    cfg, student = policy.config, policy.student
    optimizer = torch.optim.Adam(student.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, updates)
    size, loss = dataset.batch_size[0], torch.zeros(())
    for _ in range(updates):
        idx = torch.randint(0, size, (batch_size,), generator=generator).to(dataset.device)
        obs = dataset[keys.OBS][idx]
        with torch.no_grad():
            cond = policy.encoder(obs)
            shape = (batch_size, cfg.horizon, policy.action_dim)
            x_k = torch.randn(shape, generator=generator).to(cond.device)
            x_k[: int(ZERO_START_FRACTION * batch_size)] = 0.0
            path = policy.teacher_trajectory(x_k, cond)  # [B, S + 1, H, A]
        n = torch.randint(1, cfg.sample_steps + 1, (batch_size,), generator=generator).to(cond.device)
        n[: batch_size // 4] = cfg.sample_steps  # the one-step use: from x_K
        start = path[torch.arange(batch_size, device=cond.device), cfg.sample_steps - n]
        pred = student(start, n, cond)
        loss = (pred - path[:, -1]).square().sum((1, 2)).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
    return {"distill_loss": float(loss.detach())}


@torch.no_grad()
def teacher_observations(policy, env: VecEnv, seed: int) -> TensorDict:
    """Observations [M] of one episode per env driven by the policy's deterministic DDIM sampler."""
    obs, live, seen = env.reset(seed=seed)[0], torch.ones(env.num_envs, dtype=torch.bool, device=env.device), []
    for _ in range(env.max_episode_steps):
        seen.append(obs[live])
        obs, _, terminated, truncated, _ = env.step(policy.act(obs, deterministic=True).action)
        live &= ~(terminated | truncated)
        if not live.any():
            break
    return TensorDict({keys.OBS: torch.cat(seen)}, batch_size=[sum(o.batch_size[0] for o in seen)])
