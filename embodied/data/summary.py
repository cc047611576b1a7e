"""What a dataset holds, for `embodied data info`: an episode store or a LeRobot v3 directory.

    summarize("demos.zarr")          # or a session's --store directory, or a LeRobot dataset
    -> Summary(kind="episode store", episodes=100, frames=5000, keys={"obs/state": ((4,), "float32"), ...},
               success_rate=0.8, success_from="label", intervention_share=0.12, instructions=1, ...)

Success: an episode succeeded when its `label` is 1 (a correction session's label: 1 success,
0 failure, -1 unlabelled episodes are left out), else when any of its `success` rows is true
(`next.success` in a LeRobot dataset). Intervention share: the fraction of frames with
`is_intervention`. Instructions: distinct `obs/language` strings (a LeRobot dataset's tasks).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from embodied.data.store import EpisodeStore

LABEL, SUCCESS, INTERVENTION, LANGUAGE = "label", "success", "is_intervention", "obs/language"


@dataclasses.dataclass
class Summary:
    path: Path
    kind: str  # "episode store" or "LeRobot v3.x"
    episodes: int
    frames: int
    keys: dict[str, tuple[tuple[int, ...], str]]  # name -> (row shape, dtype)
    fps: float | None = None
    success_rate: float | None = None  # over the episodes that say (see the module docstring)
    success_from: str | None = None  # the key it was read from
    intervention_share: float | None = None
    instructions: int | None = None


def find_dataset(path: Path) -> tuple[str, Path]:
    """("store" or "lerobot", its directory) for a store, a directory holding episodes.zarr, or a LeRobot dataset."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file or directory: {path}")
    if (path / "meta" / "info.json").exists():
        return "lerobot", path
    for candidate in (path, path / "episodes.zarr"):
        if (candidate / "zarr.json").exists():
            return "store", candidate
    raise FileNotFoundError(f"{path} is neither an episode store (zarr.json) nor a LeRobot dataset (meta/info.json)")


def summarize(path: str | Path) -> Summary:
    kind, path = find_dataset(Path(path))
    return summarize_lerobot(path) if kind == "lerobot" else summarize_store(EpisodeStore(path))


def summarize_store(store: EpisodeStore) -> Summary:
    keys = {k: (store.spec(k)[0], str(store.spec(k)[1])) for k in store.keys}
    out = Summary(store.path, "episode store", store.num_episodes, store.num_steps, keys, fps=store.attrs.get("fps"))
    if store.num_episodes == 0:
        return out
    starts = np.concatenate([[0], store.episode_ends[:-1]])
    if LABEL in keys:
        labels = store.read(LABEL)[store.episode_ends - 1].reshape(-1)
        labelled = labels[labels >= 0]
        if len(labelled):
            out.success_rate, out.success_from = float(np.mean(labelled == 1)), LABEL
    elif SUCCESS in keys:
        success = store.read(SUCCESS).reshape(store.num_steps, -1).any(1)
        out.success_rate, out.success_from = float(np.mean(np.logical_or.reduceat(success, starts))), SUCCESS
    if INTERVENTION in keys:
        out.intervention_share = float(np.mean(store.read(INTERVENTION)))
    if LANGUAGE in keys:
        rows = store.read(LANGUAGE)
        out.instructions = len({bytes(r).rstrip(b"\0") for r in np.unique(rows, axis=0)} - {b""})
    return out


def summarize_lerobot(root: Path) -> Summary:
    from embodied.data.lerobot_format import _require, read_info

    info = read_info(root)
    keys = {k: (tuple(ft["shape"]), ft["dtype"]) for k, ft in info["features"].items()}
    out = Summary(root, f"LeRobot {info['codebase_version']}", int(info["total_episodes"]), int(info["total_frames"]),
                  keys, fps=info.get("fps"), instructions=info.get("total_tasks"))
    wanted = [k for k in ("next.success", INTERVENTION) if k in keys and keys[k][1] != "video"]
    if not wanted:
        return out
    _, pa = _require()
    files = sorted(root.glob("data/*/*.parquet"))
    if not files:
        raise FileNotFoundError(f"{root}: no data/*/*.parquet files")
    table = pa.concat_tables([pa.parquet.read_table(f, columns=[*wanted, "episode_index"]) for f in files])
    if "next.success" in wanted:
        episode = table.column("episode_index").to_numpy()
        success = np.asarray(table.column("next.success").to_pylist(), bool).reshape(len(episode), -1).any(1)
        ids = np.unique(episode)
        out.success_rate = float(np.mean([success[episode == e].any() for e in ids])) if len(ids) else None
        out.success_from = "next.success"
    if INTERVENTION in wanted:
        out.intervention_share = float(np.mean(np.asarray(table.column(INTERVENTION).to_pylist(), float)))
    return out


def describe(summary: Summary) -> str:
    """The summary as `embodied data info` prints it."""
    fps = f", {summary.fps:g} fps" if summary.fps else ""
    lines = [f"{summary.path}: {summary.kind}, {summary.episodes} episodes, {summary.frames} frames{fps}"]
    width = max((len(k) for k in summary.keys), default=0)
    lines += ["keys:"] + [f"  {k:{width}s}  {list(shape)}  {dtype}" for k, (shape, dtype) in summary.keys.items()]
    if summary.success_rate is not None:
        lines.append(f"success rate: {summary.success_rate:.1%} (from {summary.success_from!r})")
    if summary.intervention_share is not None:
        lines.append(f"intervention share: {summary.intervention_share:.1%} of frames")
    if summary.instructions is not None:
        lines.append(f"language instructions: {summary.instructions}")
    return "\n".join(lines)
