"""Metrics and the evaluator of openvivqa_jax (docs/design.md §9).

Public API (the contract): :func:`score`, :func:`evaluate_split`, :func:`format_table`. The metric
modules (``bleu``, ``rouge``, ``cider``, ``meteor``, ``anls``, ``vqa_accuracy``, ``squad``, ``wmd``)
match the reference toolkits; ``sanitize`` prepares inputs; ``formats`` reads published file formats.
The command line is ``python -m openvivqa_jax.evaluate``.
"""

from __future__ import annotations

from openvivqa_jax.evaluation.evaluator import ALL_METRICS, DEFAULT_METRICS, evaluate_split, format_table, score

__all__ = ["score", "evaluate_split", "format_table", "ALL_METRICS", "DEFAULT_METRICS"]
