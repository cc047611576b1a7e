"""Isaac Gym (IsaacGymEnvs `VecTask`) behind the VecEnv contract: see `sims.isaacgym.env`.

Isaac Gym must be imported before torch. This package's `__init__` imports
nothing, so `python -m sims.isaacgym <embodied CLI args>` can import isaacgym
first and then run the CLI; in your own script, put `import isaacgym` first.
"""
