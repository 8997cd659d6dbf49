"""The base class of every error a user can cause: a bad config value, file, record, checkpoint or flag.

An entry point (``main``, ``predict``, ``evaluate``, ``analyze``, ``plot``, ``param_count``, the benchmarks)
reports such an error as one ``error: <ErrorClass>: <message>`` line on stderr, without a traceback, and exits
with the error's :attr:`UserError.exit_code`. Anything else is a bug of the program and keeps its traceback.
"""

from __future__ import annotations

__all__ = ["UserError", "ConfigError", "UsageError", "USAGE_EXIT_CODE", "INPUT_EXIT_CODE"]

#: Exit status of a usage error (a misspelt flag or config field, a config file that does not load), as
#: argparse uses.
USAGE_EXIT_CODE = 2
#: Exit status of an input error (a value out of range, a bad file or record, a missing download).
INPUT_EXIT_CODE = 1


class UserError(Exception):
    """An error caused by the user's input, reported in one line with :attr:`exit_code`.

    Subclasses name what was wrong (``ConfigError``, ``DatasetError``, ...). The message is one line that names
    the record, the file and what is wrong, and where it helps, the option that fixes it.
    """

    #: The process exit status an entry point uses for this error.
    exit_code: int = INPUT_EXIT_CODE


class ConfigError(UserError, ValueError):
    """A config value out of range; the message (one line) names the field, the value and what is allowed.

    Raised by the config checks (:mod:`openvivqa_jax.config_check`, the tasks' ``config`` modules) before
    anything is built.
    """


class UsageError(UserError):
    """A flag whose value cannot be used as given (a path that does not exist or cannot be written, a name that
    is not one of the choices): exit status :data:`USAGE_EXIT_CODE`, as argparse's own usage errors."""

    exit_code: int = USAGE_EXIT_CODE
