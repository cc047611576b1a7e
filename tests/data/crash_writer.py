"""A writer for the crash tests: appends deterministic episodes to a store forever, reporting each commit.

    python -m tests.data.crash_writer STORE_PATH    # prints "ready", then "<i>" after committing episode i
"""

import os
import sys

import numpy as np

from embodied.data.store import EpisodeStore


def episode(i: int) -> dict[str, np.ndarray]:
    """Episode i: every entry is a function of (i, t), so a reader can check it exactly."""
    T = 3 + (i * 7) % 17
    t = np.arange(T)
    text = np.zeros((T, 24), np.uint8)
    raw = np.frombuffer(f"episode {i}".encode(), np.uint8)
    text[:, : len(raw)] = raw
    pixels = (i * 31 + t[:, None, None, None] * 3 + np.arange(16)[None, :, None, None]) % 256
    return {
        "obs/state": ((i * 1000 + t)[:, None] + np.arange(4)[None]).astype(np.float32),
        "obs/images/cam": np.broadcast_to(pixels, (T, 16, 16, 3)).astype(np.uint8),
        "obs/language": text,
        "action": np.stack([np.sin(i + t), np.cos(i + t)], -1).astype(np.float32),
        "reward": (t == T - 1).astype(np.float32),
        "terminated": t == T - 1,
        "is_intervention": (t + i) % 3 == 0,
    }


def write_forever(path: str, out_fd: int) -> None:
    store = EpisodeStore(path, mode="a")
    os.write(out_fd, b"ready\n")
    i = store.num_episodes
    while True:
        ep = episode(i)
        cut = len(ep["reward"]) // 2  # stream each episode in two pieces: kills land mid-episode too
        store.add_rows({k: v[:cut] for k, v in ep.items()})
        store.add_rows({k: v[cut:] for k, v in ep.items()})
        store.end_episode()
        os.write(out_fd, f"{i}\n".encode())
        i += 1


if __name__ == "__main__":
    write_forever(sys.argv[1], sys.stdout.fileno())
