"""Typed configs: dataclasses validated on construction, built from plain dicts
(Hydra's composed config) with errors that name the key and the valid choices."""

from __future__ import annotations

import dataclasses
import difflib
import typing
from typing import Any


class ConfigError(ValueError):
    pass


def build_config(cls: type, params: dict[str, Any], where: str = "") -> Any:
    """`cls(**params)` with unknown keys and wrong types reported by name.

    Nested dataclass fields are built recursively. `params` is never mutated.
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in params.items():
        path = f"{where}.{key}" if where else key
        if key not in fields:
            close = difflib.get_close_matches(key, fields, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"unknown key {path!r}{hint}; valid keys: {', '.join(sorted(fields))}")
        hint_type = hints[key]
        if dataclasses.is_dataclass(hint_type) and isinstance(value, dict):
            value = build_config(hint_type, value, path)
        kwargs[key] = _check_type(path, value, hint_type)
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{where or cls.__name__}: {err}") from err


def _check_type(path: str, value: Any, hint: Any) -> Any:
    """Accept ints for floats and lists for tuples; reject anything else that mismatches."""
    origin = typing.get_origin(hint)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (int, float, str, bool) and not (isinstance(value, hint) and not (hint is int and isinstance(value, bool))):
        raise ConfigError(f"{path}={value!r} must be {hint.__name__}")
    if origin is tuple and isinstance(value, (list, tuple)):
        return tuple(value)
    if origin is typing.Literal and value not in typing.get_args(hint):
        choices = ", ".join(repr(c) for c in typing.get_args(hint))
        raise ConfigError(f"{path}={value!r} is not a valid choice; valid choices: {choices}")
    return value


def check(condition: bool, message: str) -> None:
    """For `__post_init__` validation: raise ConfigError(message) unless condition."""
    if not condition:
        raise ConfigError(message)


def to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)
