"""The relevance task's config checks: the fields :func:`openvivqa_jax.config_check.check_config` does not know
(run when a relevance run starts, :func:`openvivqa_jax.relevance.data.setup`).
"""

from __future__ import annotations

from openvivqa_jax.errors import ConfigError

__all__ = ["PAIR_TEXTS", "VISUAL_SOURCES", "check_relevance_config"]

#: ``data.pair_text`` values.
PAIR_TEXTS = ("answer", "question_answer")
#: ``visual.source`` values.
VISUAL_SOURCES = ("regions", "cnn", "vit", "file")


def check_relevance_config(cfg) -> None:
    """Checks ``data.pair_text``, ``visual.source``, ``visual.features_file`` and ``visual.pool_grid``.

    Raises:
      ConfigError: a value out of range, or a missing features file (one line naming the field and the flag).
    """
    if cfg.data.pair_text not in PAIR_TEXTS:
        raise ConfigError(f"config value data.pair_text={cfg.data.pair_text!r} is out of range: must be one of "
                          f"{', '.join(map(repr, PAIR_TEXTS))} (set it with --config.data.pair_text=...)")
    if cfg.visual.source not in VISUAL_SOURCES:
        raise ConfigError(f"config value visual.source={cfg.visual.source!r} is out of range: must be one of "
                          f"{', '.join(map(repr, VISUAL_SOURCES))} (set it with --config.visual.source=...)")
    if cfg.visual.source == "file" and not cfg.visual.get("features_file"):
        raise ConfigError("config value visual.features_file is empty: visual.source='file' needs a file of "
                          "image vectors (set it with --config.visual.features_file=...)")
    g = tuple(cfg.visual.pool_grid)
    if len(g) != 2 or not all(isinstance(x, int) and x >= 1 for x in g):
        raise ConfigError(f"config value visual.pool_grid={g!r} is out of range: must be (rows, cols), two "
                          "integers >= 1 (set it with --config.visual.pool_grid=...)")
