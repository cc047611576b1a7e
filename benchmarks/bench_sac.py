"""SAC gradient updates/s: ours vs Stable-Baselines3, same networks and batch, one process, interleaved.

    .venv/bin/python benchmarks/bench_sac.py                      # Pendulum-v1, 256x256, batch 256, 5 rounds
    .venv/bin/python benchmarks/bench_sac.py --updates 200 --rounds 7

Both sides train on the same 10,000 Pendulum-v1 transitions (uniform random
actions), held in each framework's own replay buffer: SB3's `ReplayBuffer`
inside `SAC.train(gradient_steps, batch_size)`, ours in `embodied.data`'s
`ReplayBuffer` sampled by the same loop `embodied.runner.offpolicy` runs. One
update = sample a batch, one critic step, one actor step, one temperature step,
one Polyak step: SB3's SAC defaults (lr 3e-4, tau 0.005, gamma 0.99, automatic
entropy from 1.0 toward -dim(A), two 256x256 ReLU critics, log-std clamp
[-20, 2]), which ours is configured to match. Rounds interleave ours and SB3, so
machine noise hits both alike; the ratio is the median of per-round ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from tensordict import TensorDict

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from embodied import keys  # noqa: E402
from embodied.algorithms.sac import SAC, SACConfig  # noqa: E402
from embodied.specs import Spec  # noqa: E402
from policies.sac_mlp import SACPolicy, SACPolicyConfig  # noqa: E402


def random_transitions(size: int, seed: int) -> dict[str, np.ndarray]:
    """`size` Pendulum-v1 transitions under uniform random actions."""
    import gymnasium as gym

    env = gym.make("Pendulum-v1")
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    rows: dict[str, list] = {"obs": [], "action": [], "reward": [], "next_obs": [], "terminated": []}
    for _ in range(size):
        action = env.action_space.sample()
        next_obs, reward, terminated, truncated, _ = env.step(action)
        for key, value in zip(rows, (obs, action, reward, next_obs, terminated)):
            rows[key].append(value)
        obs = env.reset()[0] if terminated or truncated else next_obs
    return {k: np.asarray(v, dtype=np.float32) for k, v in rows.items()}


class Ours:
    def __init__(self, data: dict[str, np.ndarray], batch_size: int):
        from embodied.data.replay import ReplayBuffer

        obs_spec = {keys.STATE: Spec((3,))}
        self.policy = SACPolicy(SACPolicyConfig(log_std_min=-20.0), obs_spec, Spec((1,), torch.float32, -2.0, 2.0))
        self.algo = SAC(SACConfig(batch_size=batch_size), self.policy)
        n = len(data["reward"])
        td = TensorDict({
            keys.OBS: {keys.STATE: torch.from_numpy(data["obs"])}, keys.ACTION: torch.from_numpy(data["action"]),
            keys.REWARD: torch.from_numpy(data["reward"]), keys.NEXT_OBS: {keys.STATE: torch.from_numpy(data["next_obs"])},
            keys.TERMINATED: torch.from_numpy(data["terminated"]).bool(),
        }, batch_size=[n])
        self.buffer = ReplayBuffer(n, "cpu")
        self.buffer.extend(td)
        self.generator = torch.Generator().manual_seed(0)
        self.batch_size = batch_size

    def run(self, updates: int) -> None:
        for _ in range(updates):
            self.algo.update(self.buffer.sample(self.batch_size, self.generator))


class Sb3:
    def __init__(self, data: dict[str, np.ndarray], batch_size: int):
        import gymnasium as gym
        from stable_baselines3 import SAC as Sb3SAC

        # SB3's defaults for SAC are the settings listed in the module docstring
        self.model = Sb3SAC("MlpPolicy", gym.make("Pendulum-v1"), batch_size=batch_size, buffer_size=len(data["reward"]),
                            learning_starts=0, policy_kwargs={"net_arch": [256, 256]}, seed=0, device="cpu")
        from stable_baselines3.common.logger import Logger

        self.model.set_logger(Logger(None, []))  # no output; SB3's configure() makes an SB3-<date> folder in /tmp
        buf = self.model.replay_buffer
        for i in range(len(data["reward"])):
            buf.add(data["obs"][i][None], data["next_obs"][i][None], data["action"][i][None],
                    data["reward"][i][None], data["terminated"][i][None], [{}])
        self.batch_size = batch_size

    def run(self, updates: int) -> None:
        self.model.train(gradient_steps=updates, batch_size=self.batch_size)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--updates", type=int, default=100, help="timed updates per framework per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    data = random_transitions(10_000, seed=0)
    sides = {"ours": Ours(data, args.batch_size), "sb3": Sb3(data, args.batch_size)}
    for side in sides.values():
        side.run(10)  # warm-up: allocator, optimizer state
    rates: dict[str, list[float]] = {name: [] for name in sides}
    for r in range(args.rounds):
        for name, side in sides.items():
            start = time.perf_counter()
            side.run(args.updates)
            rates[name].append(args.updates / (time.perf_counter() - start))
        print(f"round {r + 1}: " + ", ".join(f"{n} {v[-1]:.1f} updates/s" for n, v in rates.items()), flush=True)
    ratios = [o / s for o, s in zip(rates["ours"], rates["sb3"])]
    print(f"\nSAC updates/s, Pendulum-v1, 256x256 critics and actor, batch {args.batch_size}, "
          f"{args.threads} thread(s), {args.rounds} rounds x {args.updates} updates")
    for name, values in rates.items():
        print(f"  {name:5s} median {statistics.median(values):6.1f}  (min {min(values):.1f}, max {max(values):.1f})")
    print(f"  ours / sb3: median {statistics.median(ratios):.2f}x  (min {min(ratios):.2f}x, max {max(ratios):.2f}x)")


if __name__ == "__main__":
    main()
