"""Chunk-window sampling with images: our zarr EpisodeStore + WindowSampler against LeRobotDataset.

Both read the same episodes: a synthetic image dataset is written to an EpisodeStore and exported
with `export_lerobot` (AV1 mp4 at LeRobot's default settings). A window is what a diffusion or
ACT policy trains on: `n_obs` frames of history (image + state) and `horizon` actions. LeRobot
cannot run in this interpreter (its torchvision fails beside .venv's torch; ENVIRONMENT.md), so its
side runs in the separate environment (scripts/lerobot_env.sh) as a subprocess that times only its
sampling loop (startup excluded); the two alternate, round by round, from this one driver.

    .venv/bin/python benchmarks/bench_data.py --rounds 5

`--stream-rss`: memory of training from a store far larger than RAM. Writes a store of `--frames` frames
(default 1,000,000; episodes of 1,000) with two 64x64 RGB cameras (obs/images/front, obs/images/wrist: the
mujoco envs' default image_size) and a 26-dim state, then, in a fresh process, opens it with
`embodied.data.sources.open_data` and samples `--batches` batches of 256 transitions, reporting that process's
peak RSS (ru_maxrss), the time to open (the damage scan and the in-memory columns) and rows sampled per second.
The store goes to `--store-dir` (default /tmp/embodied-stream-rss.zarr) and is deleted afterwards unless `--keep`.

    .venv/bin/python benchmarks/bench_data.py --stream-rss
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
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

from embodied.data.lerobot_writer import export_lerobot  # noqa: E402
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


def camera_frames(length: int, size: int, episode: int, camera: int) -> np.ndarray:
    """[length, size, size, 3] uint8: a still gradient background with a 12-pixel block moving across it (an arm)."""
    yy, xx = np.mgrid[0:size, 0:size]
    base = np.stack([(xx * 2 + episode * 17 + camera * 50) % 256, (yy * 2 + camera * 30) % 256,
                     ((xx + yy) // 2 + episode) % 256], -1).astype(np.uint8)
    out = np.repeat(base[None], length, 0)
    for t in range(length):
        p = (2 * t + episode) % (size - 12)
        out[t, p : p + 12, p : p + 12] = 255 - out[t, p : p + 12, p : p + 12]
    return out


def write_stream_store(path: Path, frames: int, length: int, size: int) -> float:
    """A store of `frames` rows, written episode by episode from 4 distinct episodes repeated; returns seconds."""
    rng = np.random.default_rng(0)
    episodes = [{"obs/images/front": camera_frames(length, size, e, 0),
                 "obs/images/wrist": camera_frames(length, size, e, 1),
                 "obs/state": rng.normal(size=(length, 26)).astype(np.float32),
                 "action": rng.uniform(-1, 1, size=(length, 7)).astype(np.float32),
                 "reward": rng.random(length).astype(np.float32), "terminated": np.arange(length) == length - 1}
                for e in range(4)]
    start = time.perf_counter()
    with EpisodeStore(path, mode="w") as store:
        for e in range(frames // length):
            store.append_episode(episodes[e % 4])
            if e % 100 == 99:
                print(f"  wrote {(e + 1) * length:,} frames ({time.perf_counter() - start:.0f} s)", flush=True)
    return time.perf_counter() - start


def stream_sample(path: Path, size: int, batches: int, batch: int, horizon: int) -> dict:
    """Open the store through open_data and sample from it; run in a fresh process so ru_maxrss is this alone."""
    from embodied.data.sources import open_data
    from embodied.specs import Spec

    obs_spec = {"state": Spec((26,)), "images/front": Spec((size, size, 3), torch.uint8),
                "images/wrist": Spec((size, size, 3), torch.uint8)}
    start = time.perf_counter()
    source = open_data([path], obs_spec, Spec((7,)), gamma=0.99, horizon=horizon)
    opened = time.perf_counter() - start
    rss_open = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    g = torch.Generator().manual_seed(0)
    source.sample(batch, g)
    start = time.perf_counter()
    for _ in range(batches):
        out = source.sample(batch, g)
    seconds = time.perf_counter() - start
    assert out["obs", "images", "front"].shape == (batch, size, size, 3)
    return {"rows": len(source), "open_s": round(opened, 1), "peak_rss_after_open_mb": round(rss_open),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "batches": batches, "batch": batch, "horizon": horizon, "sample_s": round(seconds, 1),
            "rows_per_s": round(batches * batch / seconds)}


def stream_rss(args) -> None:
    path = Path(args.store_dir)
    try:
        if not (path / "zarr.json").exists() or not args.keep:
            print(f"writing {args.frames:,} frames to {path}", flush=True)
            seconds = write_stream_store(path, args.frames, 1000, args.size)
            print(f"written in {seconds:.0f} s ({args.frames / seconds:,.0f} frames/s)", flush=True)
        size = subprocess.run(["du", "-sh", str(path)], capture_output=True, text=True).stdout.split()[0]
        print(f"store on disk: {size}", flush=True)
        for horizon in (1, 4):
            out = subprocess.run([sys.executable, __file__, "--stream-child", str(path), "--size", str(args.size),
                                  "--batches", str(args.batches), "--horizon", str(horizon)],
                                 capture_output=True, text=True, check=True)
            print(out.stdout.strip().splitlines()[-1], flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(path, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--length", type=int, default=100)
    parser.add_argument("--size", type=int, default=None, help="image height = width (96; --stream-rss: 64, "
                        "the mujoco envs' image_size)")
    parser.add_argument("--horizon", type=int, default=16)  # Diffusion Policy's action horizon (Chi et al. 2023)
    parser.add_argument("--n-obs", type=int, default=2)  # Diffusion Policy's observation history
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lerobot-env", default=str(ROOT / ".lerobot-env"))
    parser.add_argument("--stream-rss", action="store_true", help="peak RSS of open_data over a big store")
    parser.add_argument("--stream-child", default=None, help=argparse.SUPPRESS)  # the sampling process
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--store-dir", default="/tmp/embodied-stream-rss.zarr")
    parser.add_argument("--keep", action="store_true", help="keep (and reuse) the --stream-rss store")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.stream_child:
        print(json.dumps(stream_sample(Path(args.stream_child), args.size, args.batches, 256, args.horizon)))
        return
    if args.stream_rss:
        args.size = args.size or 64
        stream_rss(args)
        return
    args.size = args.size or 96
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
