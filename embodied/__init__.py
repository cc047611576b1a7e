"""embodied: one framework from GPU-parallel simulators to real robots.

Importing this package has no side effects and imports no optional backend.
The contracts live in `embodied.envs` (VecEnv), `embodied.policy` (Policy),
`embodied.specs` (Spec) and `embodied.keys` (batch keys); `embodied.registry`
maps names to implementations.
"""

__version__ = "0.1.0"
