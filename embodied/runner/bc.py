"""Imitation from scripted demonstrations, then (optionally) PPO fine-tuning of the same policy.

    trainer = ImitationTrainer(config, run_dir)   # config: a run config with an `imitation` section
    summary = trainer.learn()

Stage 1 (`bc/`): collect `imitation.episodes` expert episodes (seed-derived, unseen by training
and evaluation), fit the policy's normalizers on them, train `policy.bc_loss` (plus a value
regression onto the demos' Monte Carlo returns, so PPO starts with a critic that knows the
task's scale), optionally distil a one-step sampler (`policy.student`), evaluate, save
`bc/checkpoints/final`. Stage 2: when `imitation.finetune`, the ordinary `Trainer` loop
(Collector -> PPO) continues from those weights; the run's final evaluation follows it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from embodied import keys
from embodied.config import build_config, check
from embodied.demos import chunk_dataset, collect_episodes, load_expert
from embodied.runner import checkpoint
from embodied.runner.trainer import Trainer, make_env


@dataclass(frozen=True)
class ImitationConfig:
    episodes: int = 100  # scripted-expert episodes (one per env, run in parallel)
    updates: int = 3000  # BC gradient steps
    batch_size: int = 256  # rows per BC step (Diffusion Policy trains with 256)
    lr: float = 1e-3  # Adam step of the BC stage
    value_coef: float = 0.5  # weight of the critic's regression onto demo returns (0 = leave the critic untrained)
    distill_updates: int = 0  # consistency-distillation steps of a diffusion policy's one-step student; 0 = skip
    eval_episodes: int = 1000  # episodes of the evaluation after BC; 0 = skip
    finetune: bool = False  # continue with the run's algo (PPO) for train.total_env_steps

    def __post_init__(self):
        check(self.episodes >= 1 and self.updates >= 0 and self.batch_size >= 1, "imitation: episodes >= 1, "
              "updates >= 0 and batch_size >= 1")
        check(self.lr > 0 and self.value_coef >= 0, "imitation.lr must be > 0 and imitation.value_coef >= 0")
        check(self.distill_updates >= 0 and self.eval_episodes >= 0, "imitation: distill_updates, eval_episodes >= 0")


def train_bc(policy, dataset: TensorDict, updates: int, batch_size: int, lr: float, value_coef: float,
             generator: torch.Generator) -> dict[str, float]:
    """Minibatch Adam on policy.bc_loss (+ value_coef * 0.5 (V - G)^2); returns the last losses."""
    optimizer = torch.optim.Adam(policy.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, max(updates, 1))  # Diffusion Policy's cosine decay
    size = dataset.batch_size[0]
    bc = value = torch.zeros(())
    for _ in range(updates):
        batch = dataset[torch.randint(0, size, (batch_size,), generator=generator).to(dataset.device)]
        bc = policy.bc_loss(batch)
        loss = bc
        if value_coef:
            value = 0.5 * (policy.value(batch[keys.OBS]) - batch[keys.MC_RETURN]).square().mean()
            loss = bc + value_coef * value
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
    return {"bc_loss": bc.detach().item(), "value_loss": float(value.detach())}


class ImitationTrainer(Trainer):
    def __init__(self, config: dict[str, Any], run_dir: Path):
        super().__init__(config, run_dir)
        self.imitation = build_config(ImitationConfig, config["imitation"], "imitation")

    def learn(self) -> dict[str, Any]:
        cfg, stage = self.imitation, self.run_dir / "bc"
        final = stage / "checkpoints" / "final"
        if (final / "model.safetensors").exists():
            if self.iteration == 0:
                self.policy.load_state_dict(checkpoint.load_model(final, self.device))
            summary = json.loads((stage / "summary.json").read_text())
        else:
            summary = self.imitate(stage)
        if not cfg.finetune:
            return {"run_dir": str(self.run_dir), "env_steps": 0, **summary}
        rl = super().learn()
        return {**{f"bc/{k}": v for k, v in summary.items() if k.startswith("eval/")}, **rl}

    def imitate(self, stage: Path) -> dict[str, Any]:
        cfg, seed = self.imitation, self.config["seed"]
        start = time.perf_counter()
        generator = torch.Generator().manual_seed(seed)
        env = make_env(self.config, cfg.episodes, self.device)
        episodes = collect_episodes(env, load_expert(self.config["env"]["name"]), seed=seed + 2_000_003)
        gamma = float(self.config["algo"].get("gamma", 0.99))
        dataset = chunk_dataset(episodes, self.policy.config.horizon, gamma)
        if hasattr(self.policy, "fit_normalizers"):
            self.policy.fit_normalizers(dataset)
        metrics = train_bc(self.policy, dataset, cfg.updates, cfg.batch_size, cfg.lr, cfg.value_coef, generator)
        if cfg.distill_updates:
            from policies.diffusion.distill import distill, teacher_observations  # only diffusion has a student

            visited = teacher_observations(self.policy, env, seed=seed + 3_000_017)
            observations = torch.cat([dataset.select(keys.OBS), visited])
            metrics.update(distill(self.policy, observations, cfg.distill_updates, cfg.batch_size, cfg.lr, generator))
            metrics["distill_rows"] = observations.batch_size[0]
        summary = {"train_seconds": time.perf_counter() - start, "demo_rows": dataset.batch_size[0],
                   "demo_success": float(episodes[keys.SUCCESS][0].float().mean()), **metrics}
        if cfg.eval_episodes:
            result = self.evaluate(cfg.eval_episodes)
            summary.update({f"eval/{k}": v for k, v in result.items()})
        stage.mkdir(parents=True, exist_ok=True)
        checkpoint.save_checkpoint(stage / "checkpoints" / "final", self.policy.state_dict(), summary, self.config)
        (stage / "summary.json").write_text(json.dumps(summary, indent=1))
        print("imitation: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                        for k, v in summary.items()), flush=True)
        return summary
