"""`python -m sims.isaacgym train env=isaacgym ...`: the embodied CLI with isaacgym imported before torch."""

import sys

try:
    import isaacgym  # noqa: F401  (must precede torch: Isaac Gym refuses to load after it)
except ImportError as err:
    sys.exit(f"isaacgym is not importable ({err}); install NVIDIA's Isaac Gym Preview 4 and IsaacGymEnvs")

from embodied.cli import main  # noqa: E402

main()
