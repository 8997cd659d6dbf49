"""The span reader's config checks: the reading fields :func:`openvivqa_jax.config_check.check_config` does not
know (run when a reading run starts, :mod:`openvivqa_jax.reading.data`).
"""

from __future__ import annotations

from openvivqa_jax.errors import ConfigError
from openvivqa_jax.reading.model import ENCODERS

__all__ = ["EVAL_METRICS", "check_reading_config"]

#: The metrics a reading run scores and may select its best checkpoint by.
EVAL_METRICS = ("EM", "F1")


def check_reading_config(cfg) -> None:
    """Checks the reading fields :func:`openvivqa_jax.config_check.check_config` does not know.

    Raises:
      ConfigError: ``model.max_seq_len`` too small for the question and 3 special pieces, ``model.doc_stride``
        or ``model.num_layers`` < 1, ``train.best_metric`` not EM/F1, ``model.encoder`` unknown (one line, the
        field and the flag).
    """
    m = cfg.model
    checks = (
        ("model.num_layers", m.num_layers, isinstance(m.num_layers, int) and m.num_layers >= 1, "an integer >= 1"),
        ("model.doc_stride", m.doc_stride, isinstance(m.doc_stride, int) and m.doc_stride >= 1, "an integer >= 1"),
        ("model.max_seq_len", m.max_seq_len, isinstance(m.max_seq_len, int) and m.max_seq_len >= m.max_question_len + 4,
         f"an integer >= model.max_question_len + 4 = {m.max_question_len + 4} (the question, 3 special pieces "
         "and one passage piece)"),
        ("train.best_metric", cfg.train.best_metric, cfg.train.best_metric in EVAL_METRICS, "'EM' or 'F1'"),
        ("model.encoder", m.encoder, m.encoder in ENCODERS, "one of " + ", ".join(repr(k) for k in ENCODERS)),
    )
    for field, value, ok, allowed in checks:
        if not ok:
            raise ConfigError(f"config value {field}={value!r} is out of range: must be {allowed} "
                              f"(set it with --config.{field}=...)")
