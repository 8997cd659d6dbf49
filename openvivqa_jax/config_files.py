"""Loading experiment config files (``configs/**/*.py``) by path.

Config files are plain Python files, not a package (``--config configs/openvivqa/m4c.py:images`` is read by
``ml_collections.config_flags`` from its path), so configs that build on another config, the benchmarks, the
parameter counter and the tests all import them through :func:`config_module`.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import os
from types import ModuleType

__all__ = ["config_module", "load_config", "load_config_spec", "split_config_spec", "apply_overrides"]


def config_module(path: str, relative_to: str | None = None) -> ModuleType:
    """Imports the config file at ``path``.

    Args:
      path: the ``.py`` file; relative paths are taken from the folder of ``relative_to`` (a config passes
        its ``__file__``), else from the current directory.
      relative_to: a file path, or None.

    Returns:
      The executed module (with ``get_config`` and any helpers the file defines).

    Raises:
      FileNotFoundError: if there is no such file.
    """
    if relative_to is not None and not os.path.isabs(path):
        path = os.path.join(os.path.dirname(os.path.abspath(relative_to)), path)
    path = os.path.normpath(os.path.abspath(path))
    if not os.path.isfile(path):
        raise FileNotFoundError(f"config file {path} does not exist")
    name = "openvivqa_config_" + "".join(ch if ch.isalnum() else "_" for ch in path)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_config(path: str, *args, relative_to: str | None = None):
    """``get_config(*args)`` of the config file at ``path`` (see :func:`config_module`)."""
    return config_module(path, relative_to).get_config(*args)


def split_config_spec(spec: str) -> tuple[str, tuple[str, ...]]:
    """``"configs/x.py:variant"`` -> ``("configs/x.py", ("variant",))``, as ``--config`` of the main entry point
    names a variant; a spec without one (or whose ``:`` is part of an existing path) -> ``(spec, ())``."""
    head, sep, tail = spec.rpartition(":")
    if sep and head.endswith(".py") and tail and "/" not in tail and not os.path.isfile(spec):
        return head, (tail,)
    return spec, ()


def load_config_spec(spec: str):
    """The config ``--config`` names (``path[:variant]``, :func:`split_config_spec`) for the commands besides the
    main entry point.

    Raises:
      FileNotFoundError: no such file.
      openvivqa_jax.errors.ConfigError: the file or its ``get_config`` raised (a syntax error, an unknown
        variant): one line naming the spec and the error.
    """
    from openvivqa_jax.errors import ConfigError

    path, variant = split_config_spec(spec)
    try:
        return load_config(path, *variant)
    except FileNotFoundError:
        raise
    except Exception as e:
        raise ConfigError(f"config file {spec} did not load: {type(e).__name__}: {e}") from None


def _parse_value(old, raw: str):
    if isinstance(old, bool):
        low = raw.strip().lower()
        if low not in ("true", "false", "1", "0"):
            raise ValueError(f"{raw!r} is not a boolean (true/false)")
        return low in ("true", "1")
    if isinstance(old, (int, float)):
        return type(old)(raw)
    if isinstance(old, str) or old is None:
        return raw
    return ast.literal_eval(raw)


def apply_overrides(cfg, overrides: list[str]):
    """Applies ``--config.a.b=value`` arguments to ``cfg`` in place, each value parsed as the field's current type
    (booleans ``true``/``false``, numbers, strings as given, tuples and lists as Python literals), as the main
    entry point's ``--config.*`` flags; returns ``cfg``.

    Raises:
      openvivqa_jax.errors.ConfigError: an argument that is not ``--config.<field>=<value>``, a field the config
        does not have (with the nearest field of its level), or a value that does not parse as the field's type
        (names the argument).
    """
    from openvivqa_jax.errors import ConfigError

    for arg in overrides:
        key, eq, raw = arg.partition("=")
        if not (key.startswith("--config.") and eq):
            raise ConfigError(f"{arg}: expected --config.<field>=<value>")
        *parents, leaf = key[len("--config."):].split(".")
        node = cfg
        try:
            for name in parents:
                node = node[name]
            old = node[leaf]
        except (KeyError, TypeError, AttributeError):
            close = difflib.get_close_matches(leaf, list(node.keys()), n=1) if hasattr(node, "keys") else []
            hint = f'; did you mean "{close[0]}" instead of "{leaf}"?' if close else ""
            raise ConfigError(f"{key}: the config has no field {key[len('--config.'):]!r}{hint}") from None
        try:
            node[leaf] = _parse_value(old, raw)
        except (TypeError, ValueError, SyntaxError) as e:
            raise ConfigError(f"{key}: bad value {raw!r}: {e}") from None
    return cfg
