"""`embodied record`: episodes from a scripted expert or a trained policy, written to an episode store that `data=`
trains from and `embodied data export` turns into a LeRobot dataset.

    summary = record(env, "demos.zarr", episodes=100, seed=0)      # the env's scripted expert (env.expert_action)
    summary = record(env, "runs.zarr", episodes=100, seed=0, policy=policy)

Each env of the batched `env` runs one episode per round (`embodied.demos.collect_episodes`), so rounds of
`env.num_envs` episodes are appended until `episodes` are in, each as one committed store episode with
`obs/<key>` (language and camera frames when the env has them), `action`, `reward`, `terminated`, `truncated`
and `success`. A human operator records through `embodied correct` (its store is a `data=` source as well).
"""

from __future__ import annotations

from pathlib import Path

from embodied import keys
from embodied.data.lerobot_format import progress_bar
from embodied.data.store import EpisodeStore
from embodied.demos import LIVE, collect_episodes


def record(env, store_path: str | Path, episodes: int, seed: int, policy=None, progress: bool = False,
           action_noise: float = 0.0, generator=None) -> dict:
    """Append `episodes` episodes to the store at `store_path` (created if absent); returns what was written."""
    written, frames, successes = 0, 0, 0
    rounds = (episodes + env.num_envs - 1) // env.num_envs
    with EpisodeStore(store_path, mode="a") as store:
        for round_ in progress_bar(range(rounds), rounds, "record", progress):
            batch = collect_episodes(env, seed + round_, policy, action_noise, generator).to("cpu")  # [T, N]
            for i in range(min(env.num_envs, episodes - written)):
                rows = batch[:, i][batch[LIVE][:, i]]
                flat = rows.exclude(LIVE, keys.DONE).flatten_keys("/")
                store.append_episode({k: flat[k].numpy() for k in flat.keys()})
                written, frames, successes = written + 1, frames + rows.numel(), successes + bool(rows[keys.SUCCESS][-1])
        total = store.num_episodes
    return {"episodes": written, "frames": frames, "success": successes / max(written, 1), "store_episodes": total}
