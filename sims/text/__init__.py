"""Multi-turn text tasks behind the `embodied.text_env.TextEnv` contract, for language-model agents.

- `sims.text.calculator:CalculatorEnv` (`lm_calculator`): arithmetic from reasoning-gym, solved with a
  calculator tool call and an `<answer>`.
- `sims.text.guess_number:GuessNumberEnv` (`lm_guess_number`): textarena's guess-the-number, several turns
  of higher/lower feedback.

Each task imports its library (reasoning-gym, textarena) when the env is built, not on `import sims.text` nor
on importing its module (reading its `Config` stays cheap: `embodied train` reads every registered env's).
"""

import importlib

_EXPORTS = {
    "CalculatorEnv": "sims.text.calculator",
    "CalculatorConfig": "sims.text.calculator",
    "GuessNumberEnv": "sims.text.guess_number",
    "GuessNumberConfig": "sims.text.guess_number",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'sims.text' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
