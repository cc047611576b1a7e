"""The bar chart of benchmarks/RESULTS.md, "The VLA follows its instruction, with FiLM": success with the true words
and with words naming another ball, per seed, from `embodied eval <run> --env language_shift=<0|1|2>` (1000 episodes
each; the figures in following.json, copied from those commands' output).

    .venv/bin/python benchmarks/vla_language/plot_following.py     # -> benchmarks/figures/vla_language_following.png
"""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent
runs = json.loads((HERE / "following.json").read_text())  # {"FiLM, seed 0": [shift 0, shift 1, shift 2], ...}
fig, ax = plt.subplots(figsize=(7, 3.8))
width = 0.27
for shift, label in enumerate(["true words", "words naming the next ball", "words naming the other ball"]):
    values = [100 * v[shift] if v[shift] is not None else 0 for v in runs.values()]
    ax.bar([i + (shift - 1) * width for i in range(len(runs))], values, width, label=label, color=f"C{shift}")
ax.set_xticks(range(len(runs)), list(runs), fontsize=8)
ax.set_ylabel("success over 1000 episodes (%)")
ax.set_title("arm reach, goal named only by the words: BC of the byte-level VLA, 500 demos", fontsize=9)
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(HERE.parent / "figures" / "vla_language_following.png", dpi=120)
