"""Helpers of the user story (benchmarks/user_story.sh): checks that what LeRobot read equals the store and that a
round trip is exact, and raw rollouts of our env for LeRobot's own writer.

    .venv/bin/python benchmarks/user_story.py lerobot STORE READ.npz   # READ.npz: tests/data/lerobot_side.py read
    .venv/bin/python benchmarks/user_story.py roundtrip STORE_A STORE_B
    .venv/bin/python benchmarks/user_story.py rollout ENV EPISODES NOISE OUT.npz   # for lerobot_side.py write_npz

`rollout` runs the env's scripted expert (Gaussian action noise of std NOISE) and saves each live frame under
LeRobot's feature names (observation.state, action, next.reward, next.done), with episode_index, task and fps.
`lerobot` compares frame count, episode count and index, feature shapes and every value of observation.state,
action, next.reward, next.done and the task against the store; `roundtrip` compares every key of two stores,
frame for frame, and their episode boundaries. Prints one JSON line; exits 1 on any difference.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere
from embodied.data.store import EpisodeStore  # noqa: E402


def check_lerobot(store_path: str, npz: str) -> dict:
    got = np.load(npz)
    meta = json.loads(str(got["meta"]))
    with EpisodeStore(store_path) as store:
        ends = store.episode_ends
        episode_index = np.searchsorted(ends, np.arange(ends[-1]), side="right")
        texts = [bytes(r).rstrip(b"\0").decode() for r in store.read("obs/language")]
        pairs = {"observation.state": store.read("obs/state"), "action": store.read("action"),
                 "next.reward": store.read("reward")[:, None], "next.done": store.read("terminated")[:, None],
                 "episode_index": episode_index}  # fmt: skip
        result = {"frames": [meta["num_frames"], store.num_steps],
                  "episodes": [meta["num_episodes"], store.num_episodes],
                  "shapes": {k: [list(got[k].shape), list(v.shape)] for k, v in pairs.items()},
                  "equal": {k: bool(np.array_equal(got[k].reshape(v.shape), v)) for k, v in pairs.items()}}  # fmt: skip
        result["equal"]["task"] = got["task"].tolist() == texts
        result["first_state"] = [got["observation.state"][0, :3].tolist(), pairs["observation.state"][0, :3].tolist()]
    result["ok"] = (all(result["equal"].values()) and result["frames"][0] == result["frames"][1]
                    and result["episodes"][0] == result["episodes"][1])  # fmt: skip
    return result


def check_roundtrip(a: str, b: str) -> dict:
    with EpisodeStore(a) as sa, EpisodeStore(b) as sb:
        result = {"keys": [sa.keys, sb.keys], "frames": [sa.num_steps, sb.num_steps],
                  "episode_ends_equal": bool(np.array_equal(sa.episode_ends, sb.episode_ends)),
                  "equal": {k: k in sb.keys and sa.spec(k) == sb.spec(k)
                            and bool(np.array_equal(sa.read(k), sb.read(k))) for k in sa.keys}}  # fmt: skip
    result["ok"] = sorted(result["keys"][0]) == sorted(result["keys"][1]) and result["episode_ends_equal"] and all(
        result["equal"].values())
    return result


def rollout(env_name: str, episodes: str, noise: str, out: str) -> dict:
    import torch

    from embodied.build import make_env
    from embodied.data.record import LIVE, collect_episodes

    env = make_env({"env": {"name": env_name}}, int(episodes), torch.device("cpu"))
    torch.manual_seed(0)
    batch = collect_episodes(env, 0, action_noise=float(noise),
                             generator=torch.Generator().manual_seed(0))  # [T, N]
    rows = [batch[:, i][batch[LIVE][:, i]] for i in range(env.num_envs)]
    frames = {"observation.state": [r["obs", "state"].numpy() for r in rows],
              "action": [r["action"].numpy() for r in rows], "next.reward": [r["reward"].numpy() for r in rows],
              "next.done": [r["terminated"].numpy() for r in rows],
              "episode_index": [np.full(r.numel(), i) for i, r in enumerate(rows)],
              "task": [[bytes(t).rstrip(b"\0").decode() for t in r["obs", "language"].numpy()] for r in rows]}
    np.savez(out, fps=10, **{k: np.concatenate(v) for k, v in frames.items()})
    return {"ok": True, "episodes": len(rows), "frames": sum(r.numel() for r in rows),
            "success": float(np.mean([bool(r["success"].any()) for r in rows]))}


if __name__ == "__main__":
    what, *paths = sys.argv[1:]
    out = {"lerobot": check_lerobot, "roundtrip": check_roundtrip, "rollout": rollout}[what](*paths)
    print(json.dumps(out))
    sys.exit(0 if out["ok"] else 1)
