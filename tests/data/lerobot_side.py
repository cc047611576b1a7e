"""Runs inside the separate LeRobot environment (scripts/lerobot_env.sh), never in .venv.

    python tests/data/lerobot_side.py read  ROOT OUT.npz      # LeRobotDataset(root=ROOT): every frame -> npz
    python tests/data/lerobot_side.py write ROOT OUT.npz      # LeRobot's writer makes a dataset; what it was fed -> npz
    python tests/data/lerobot_side.py write_npz ROOT IN.npz   # LeRobot's writer makes a dataset of IN.npz's frames
    python tests/data/lerobot_side.py bench ROOT H N_OBS BATCH ITERS   # chunk windows through LeRobotDataset
Video decoding uses LeRobot's "pyav" backend: torchcodec needs the ffmpeg shared libraries, which
these machines lack (ENVIRONMENT.md).
"""

import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("SVT_LOG", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: E402

BACKEND = "pyav"


def read(root, out):
    ds = LeRobotDataset("local/embodied_export", root=root, video_backend=BACKEND)
    frames = [ds[i] for i in range(len(ds))]
    keys = [k for k, v in frames[0].items() if isinstance(v, torch.Tensor)]
    arrays = {k: np.stack([f[k].numpy() for f in frames]) for k in keys}
    arrays["task"] = np.array([f["task"] for f in frames])
    meta = {"num_episodes": ds.num_episodes, "num_frames": ds.num_frames, "fps": ds.fps,
            "camera_keys": ds.meta.camera_keys, "features": list(ds.features)}
    np.savez(out, meta=json.dumps(meta), **{k.replace("/", "|"): v for k, v in arrays.items()})


def write(root, out):
    """Three episodes with every entry a function of (episode, frame), images included."""
    features = {
        "observation.state": {"dtype": "float32", "shape": (3,), "names": ["a", "b", "c"]},
        "action": {"dtype": "float32", "shape": (2,), "names": ["x", "y"]},
        "next.reward": {"dtype": "float32", "shape": (1,), "names": None},
        "next.done": {"dtype": "bool", "shape": (1,), "names": None},
        "observation.images.front": {"dtype": "video", "shape": (64, 64, 3), "names": ["height", "width", "channels"]},
    }
    ds = LeRobotDataset.create("local/lerobot_written", fps=10, features=features, root=root, use_videos=True)
    fed = {k: [] for k in ["observation.state", "action", "next.reward", "next.done", "observation.images.front", "task"]}
    for e, length in enumerate([7, 12, 5]):
        for t in range(length):
            yy, xx = np.mgrid[0:64, 0:64]
            image = np.stack([(xx * 4 + e * 40) % 256, (yy * 4 + t * 8) % 256, np.full_like(xx, 60 * e)], -1).astype(np.uint8)
            frame = {
                "observation.state": np.array([e, t, e * 100 + t], np.float32),
                "action": np.array([np.sin(t), np.cos(e)], np.float32),
                "next.reward": np.array([float(t == length - 1)], np.float32),
                "next.done": np.array([t == length - 1]),
                "observation.images.front": image,
                "task": f"task number {e % 2}",
            }
            for k in fed:
                fed[k].append(frame[k])
            ds.add_frame(dict(frame))
        ds.save_episode()
    ds.finalize()
    np.savez(out, **{k: np.stack(v) if k != "task" else np.array(v) for k, v in fed.items()})


def write_npz(root, npz):
    """A dataset of the frames in `npz`: one array [F, ...] per LeRobot feature (float32 or bool; scalars as [F]),
    plus `episode_index` [F], `task` [F] (strings) and `fps` (a scalar), written frame by frame with LeRobot's own
    writer as a user's recording script would."""
    data = np.load(npz)
    names = [k for k in data.files if k not in ("episode_index", "task", "fps")]
    arrays = {k: data[k].reshape(len(data[k]), -1) for k in names}  # scalars -> [F, 1], LeRobot's shape for them
    features = {k: {"dtype": str(v.dtype), "shape": v.shape[1:], "names": None} for k, v in arrays.items()}
    ds = LeRobotDataset.create("local/written_from_npz", fps=int(data["fps"]), features=features, root=root,
                               use_videos=False)
    episode = data["episode_index"]
    for i in range(len(episode)):
        ds.add_frame({**{k: v[i] for k, v in arrays.items()}, "task": str(data["task"][i])})
        if i + 1 == len(episode) or episode[i + 1] != episode[i]:
            ds.save_episode()
    ds.finalize()
    print(json.dumps({"episodes": ds.num_episodes, "frames": ds.num_frames, "features": list(features)}))


def bench(root, horizon, n_obs, batch, iters):
    """Draws random chunk windows (n_obs frames of history with images, horizon actions) as a policy's
    dataloader would, with delta_timestamps; prints windows/s."""
    fps = LeRobotDataset("local/x", root=root, video_backend=BACKEND).fps
    obs_t = [(i - n_obs + 1) / fps for i in range(n_obs)]
    ds = LeRobotDataset("local/x", root=root, video_backend=BACKEND, delta_timestamps={
        "observation.images.cam": obs_t, "observation.state": obs_t, "action": [i / fps for i in range(horizon)]})
    rng = np.random.default_rng(0)
    ds[0]
    start = time.perf_counter()
    for _ in range(iters):
        items = [ds[int(i)] for i in rng.integers(len(ds), size=batch)]
        torch.utils.data.default_collate(items)
    print(json.dumps({"windows_per_s": iters * batch / (time.perf_counter() - start)}))


if __name__ == "__main__":
    torch.set_num_threads(1)
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "bench":
        bench(args[0], *map(int, args[1:]))
    else:
        {"read": read, "write": write, "write_npz": write_npz}[cmd](*args)
