"""Chunk-window sampling with images: our zarr EpisodeStore + WindowSampler against LeRobotDataset.

Both read the same episodes: a synthetic image dataset is written to an EpisodeStore and exported
with `export_lerobot` (AV1 mp4 at LeRobot's default settings). A window is what a diffusion or
ACT policy trains on: `n_obs` frames of history (image + state) and `horizon` actions. LeRobot
cannot run in this interpreter (its torchvision fails beside .venv's torch; ENVIRONMENT.md), so its
side runs in the separate environment (scripts/lerobot_env.sh) as a subprocess that times only its
sampling loop (startup excluded); the two alternate, round by round, from this one driver.

    .venv/bin/python benchmarks/bench_data.py --rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from embodied.data.lerobot_format import export_lerobot  # noqa: E402
from embodied.data.samplers import WindowSampler  # noqa: E402
from embodied.data.store import EpisodeStore  # noqa: E402


def make_store(path: Path, episodes: int, length: int, size: int) -> EpisodeStore:
    """Smooth moving gradients (video-friendly, like camera frames) plus state and actions."""
    store = EpisodeStore(path, mode="a")
    yy, xx = np.mgrid[0:size, 0:size]
    for e in range(episodes):
        t = np.arange(length)[:, None, None]
        image = np.stack([(xx[None] * 2 + t * 3 + e * 17) % 256, (yy[None] * 2 + t) % 256,
                          np.broadcast_to((xx + yy)[None] // 2 + e, (length, size, size)) % 256], -1)
        store.append_episode({
            "obs/images/cam": image.astype(np.uint8),
            "obs/state": np.random.default_rng(e).normal(size=(length, 8)).astype(np.float32),
            "action": np.random.default_rng(e + 1000).normal(size=(length, 7)).astype(np.float32),
            "reward": np.zeros(length, np.float32),
            "terminated": np.arange(length) == length - 1,
        })
    store.set_attrs(fps=10)
    return store


def ours(path: Path, horizon: int, n_obs: int, batch: int, iters: int, cache_bytes: int) -> float:
    store = EpisodeStore(path, cache_bytes=cache_bytes)
    sampler = WindowSampler(store, WindowSampler.Config(horizon=horizon, n_obs_steps=n_obs))
    g = torch.Generator().manual_seed(0)
    sampler.sample(batch, g)
    start = time.perf_counter()
    for _ in range(iters):
        sampler.sample(batch, g)
    return iters * batch / (time.perf_counter() - start)


def lerobot(python: str, root: Path, horizon: int, n_obs: int, batch: int, iters: int) -> float:
    out = subprocess.run([python, str(ROOT / "tests/data/lerobot_side.py"), "bench", str(root), str(horizon),
                          str(n_obs), str(batch), str(iters)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["windows_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--length", type=int, default=100)
    parser.add_argument("--size", type=int, default=96, help="image height = width")
    parser.add_argument("--horizon", type=int, default=16)  # Diffusion Policy's action horizon (Chi et al. 2023)
    parser.add_argument("--n-obs", type=int, default=2)  # Diffusion Policy's observation history
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lerobot-env", default=str(ROOT / ".lerobot-env"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    subprocess.run(["bash", str(ROOT / "scripts/lerobot_env.sh")], check=True)
    python = str(Path(args.lerobot_env) / "bin" / "python")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        store = make_store(tmp / "s.zarr", args.episodes, args.length, args.size)
        export_lerobot(store, tmp / "lerobot")
        shape = (args.horizon, args.n_obs, args.batch)
        rows = []
        for r in range(args.rounds):
            row = {"round": r,
                   "ours_cold": ours(tmp / "s.zarr", *shape, iters=20, cache_bytes=0),
                   "lerobot": lerobot(python, tmp / "lerobot", *shape, iters=3),
                   "ours_cached": ours(tmp / "s.zarr", *shape, iters=50, cache_bytes=1 << 30)}
            rows.append(row)
            print(json.dumps({k: round(v, 1) for k, v in row.items()}), flush=True)
    for name in ("ours_cold", "ours_cached"):
        ratios = [r[name] / r["lerobot"] for r in rows]
        print(f"{name} / lerobot windows/s: median {statistics.median(ratios):.1f}x "
              f"(min {min(ratios):.1f}x, max {max(ratios):.1f}x); "
              f"ours median {statistics.median(r[name] for r in rows):.0f}/s, "
              f"lerobot median {statistics.median(r['lerobot'] for r in rows):.0f}/s")


if __name__ == "__main__":
    main()
