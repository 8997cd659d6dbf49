"""Loading experiment config files (``configs/**/*.py``) by path.

Config files are plain Python files, not a package (``--config configs/openvivqa/m4c.py:images`` is read by
``ml_collections.config_flags`` from its path), so configs that build on another config, the benchmarks, the
parameter counter and the tests all import them through :func:`config_module`.
"""

from __future__ import annotations

import importlib.util
import os
from types import ModuleType

__all__ = ["config_module", "load_config"]


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
