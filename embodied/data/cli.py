"""`embodied data`: show an episode store or a LeRobot v3 dataset, convert one into the other (embodied/cli.py
dispatches here).

    embodied data info <store or LeRobot dir>
    embodied data export <store> <out dir> [--fps N] [--task TEXT]
    embodied data import <LeRobot dir> <store>
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    """Show an episode store or a LeRobot v3 dataset; convert one into the other."""
    parser = argparse.ArgumentParser(prog="embodied data", description="Show and convert datasets.")
    actions = parser.add_subparsers(dest="action", required=True)
    info = actions.add_parser("info", help="episodes, frames, keys, success rate, intervention share")
    info.add_argument("path", type=Path,
                      help="an episode store (.zarr), a session's --store directory, or a LeRobot dataset")
    export = actions.add_parser("export", help="write a store as a LeRobotDataset v3")
    export.add_argument("store", type=Path)
    export.add_argument("out", type=Path, help="the dataset directory to create (absent or empty)")
    export.add_argument("--fps", type=int, default=None, help="frames per second (default: the store's fps attribute)")
    export.add_argument("--task", default="", help="the task string of episodes without obs/language")
    export.add_argument("--robot-type", default=None, help="info.json's robot_type")
    imp = actions.add_parser("import", help="read a LeRobotDataset v3 into a new store")
    imp.add_argument("lerobot", type=Path, help="the dataset directory (with meta/info.json)")
    imp.add_argument("store", type=Path, help="the store to create")
    imp.add_argument("--language-bytes", type=int, default=128,
                     help="width of obs/language (task strings, zero-padded); an env's width to round-trip its store")
    args = parser.parse_args(argv)
    try:
        message = _data(args)
    except (FileNotFoundError, FileExistsError, ValueError, KeyError, ImportError, OSError) as err:
        # DamagedStoreError is a ValueError: it names the damaged file
        print(f"error: {err.args[0] if isinstance(err, KeyError) else err}", file=sys.stderr)
        return 1
    print(message)
    return 0


def _data(args) -> str:
    from embodied.data.lerobot_format import import_lerobot
    from embodied.data.lerobot_writer import export_lerobot
    from embodied.data.store import EpisodeStore
    from embodied.data.summary import describe, find_dataset, summarize

    if args.action == "info":
        return describe(summarize(args.path))
    if args.action == "export":
        kind, path = find_dataset(args.store)
        if kind != "store":
            raise ValueError(f"{args.store} is a LeRobot dataset already; export takes an episode store")
        with EpisodeStore(path) as store:
            out = export_lerobot(store, args.out, fps=args.fps, robot_type=args.robot_type, default_task=args.task,
                                 progress=True)
            return f"exported {store.num_episodes} episodes ({store.num_steps} frames) to {out}"
    if not args.lerobot.exists():
        raise FileNotFoundError(f"no such file or directory: {args.lerobot}")
    store = import_lerobot(args.lerobot, args.store, max_language_bytes=args.language_bytes, progress=True)
    return f"imported {store.num_episodes} episodes ({store.num_steps} frames) into {store.path}"
