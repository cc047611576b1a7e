#!/usr/bin/env bash
# The README's main job at several commits, interleaved per seed in one job (the host's speed drifts 2-4x by day):
#   git worktree add --detach /tmp/before <commit>
#   bash benchmarks/bench_hover_side_by_side.sh /tmp/before[,/tmp/other...] [seeds...]   # default seeds 0 1 2
# Prints, per seed, each tree's training seconds and success over 1000 episodes, with the load average; this
# checkout's tree runs last and is named "now".
set -uo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
IFS=, read -ra TREES <<< "${1:?usage: $0 <worktree of the commit before>[,<worktree>...] [seeds...]}"
shift
SEEDS=${*:-0 1 2}
RUNS=$(mktemp -d)
for s in $SEEDS; do
  for tree in "${TREES[@]}" "$HERE"; do
    tree=$(cd "$tree" && pwd)
    name=$(git -C "$tree" rev-parse --short HEAD); [ "$tree" = "$HERE" ] && name=now
    out=$(cd "$RUNS" && PYTHONPATH=$tree "$HERE/.venv/bin/embodied" train experiment=quadrotor_hover seed="$s" \
          train.progress=false hydra.run.dir="$RUNS/${name}_s$s" 2>&1 | grep -E "^(trained|evaluation)" | tr '\n' ' ')
    echo "$name seed=$s $out load=$(cut -d' ' -f1 /proc/loadavg)"
  done
done
rm -rf "$RUNS"
