#!/usr/bin/env bash
# The README's main job at two commits, interleaved per seed in one job (the host's speed drifts 2-4x by day):
#   git worktree add --detach /tmp/before <commit>
#   bash benchmarks/bench_hover_side_by_side.sh /tmp/before [seeds...]      # default seeds 0 1 2
# Prints, per seed, each side's training seconds and success over 1000 episodes, with the load average.
set -uo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
BEFORE=$(cd "${1:?usage: $0 <worktree of the commit before> [seeds...]}" && pwd)
shift
SEEDS=${*:-0 1 2}
RUNS=$(mktemp -d)
for s in $SEEDS; do
  for side in before after; do
    tree=$HERE; [ "$side" = before ] && tree=$BEFORE
    out=$(cd "$RUNS" && PYTHONPATH=$tree "$HERE/.venv/bin/embodied" train experiment=quadrotor_hover seed="$s" \
          train.progress=false hydra.run.dir="$RUNS/${side}_s$s" 2>&1 | grep -E "^(trained|evaluation)" | tr '\n' ' ')
    echo "$side seed=$s $out load=$(cut -d' ' -f1 /proc/loadavg)"
  done
done
rm -rf "$RUNS"
