"""Fleiss' kappa and percent agreement (OpenViVQA paper §3.2.3, eq. 2-4; Fleiss 1971).

For ``N`` items, each labelled by ``n`` annotators into one of ``k`` categories, let ``n_ij`` be the number of
annotators who put item ``i`` in category ``j``. Then (paper eq. 3 and 4; the same definitions as Fleiss 1971)::

    P_i = 1 / (n (n - 1)) * sum_j n_ij (n_ij - 1)        (agreement on item i)
    p_j = 1 / (N n) * sum_i n_ij                          (share of all labels in category j)
    P_bar = 1/N sum_i P_i,  P_e = sum_j p_j^2
    kappa = (P_bar - P_e) / (1 - P_e)                    (paper eq. 2)

Percent agreement (paper §3.2.3): the share of items on which all ``n`` annotators give the same label.

The agreement file (:func:`read_agreement_file`) has one row per item and one label per annotator, comma- or
tab-separated (tab when the first data row has a tab); blank lines and lines starting with ``#`` (e.g. a header)
are skipped; labels are any strings (``text``/``non-text``, ``1``/``0``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from openvivqa_jax.analysis.records import AnalysisInputError

__all__ = ["AgreementFileError", "read_agreement_file", "counts_from_labels", "fleiss_kappa", "agreement"]


class AgreementFileError(AnalysisInputError):
    """The agreement file cannot be used; the message names the file, the line and what is wrong."""


def read_agreement_file(path: str | os.PathLike) -> list[list[str]]:
    """Reads an agreement file (module doc).

    Returns:
      ``[[label per annotator] per item]``, ``(num_items, num_annotators)``.

    Raises:
      AgreementFileError: the file cannot be read, has no item, has rows of different lengths (names the
        first such line), has an empty label, or has fewer than two annotators.
    """
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8-sig") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        raise AgreementFileError(f"cannot read agreement file {path!r}: no such file") from None
    except UnicodeDecodeError as e:
        raise AgreementFileError(f"cannot read agreement file {path!r}: not UTF-8 text ({e.reason})") from None
    except OSError as e:
        raise AgreementFileError(f"cannot read agreement file {path!r}: {e.strerror or e}") from None
    rows: list[list[str]] = []
    delimiter = None
    first_line = 0
    for no, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if delimiter is None:
            delimiter = "\t" if "\t" in line else ","
            first_line = no
        cells = [c.strip() for c in line.split(delimiter)]
        if rows and len(cells) != len(rows[0]):
            raise AgreementFileError(
                f"{path}: line {no} has {len(cells)} labels but line {first_line} has {len(rows[0])}; every row "
                "needs one label per annotator")
        if any(not c for c in cells):
            raise AgreementFileError(f"{path}: line {no}: empty label in column {cells.index('') + 1}")
        rows.append(cells)
    if not rows:
        raise AgreementFileError(f"{path}: no item rows (one row per item, one label per annotator)")
    if len(rows[0]) < 2:
        raise AgreementFileError(f"{path}: {len(rows[0])} annotator per row; kappa needs at least two")
    return rows


def counts_from_labels(rows: Sequence[Sequence[str]]) -> tuple[np.ndarray, list[str]]:
    """Label rows -> the count matrix of Fleiss (1971).

    Args:
      rows: ``(num_items, num_annotators)`` labels.

    Returns:
      ``(counts, categories)``: ``counts`` int64 ``(num_items, num_categories)``, ``counts[i, j]`` = annotators
      who gave item ``i`` the label ``categories[j]``; ``categories`` sorted.
    """
    categories = sorted({c for r in rows for c in r})
    index = {c: j for j, c in enumerate(categories)}
    counts = np.zeros((len(rows), len(categories)), np.int64)
    for i, r in enumerate(rows):
        for c in r:
            counts[i, index[c]] += 1
    return counts, categories


def fleiss_kappa(counts: np.ndarray) -> dict:
    """Fleiss' kappa of a count matrix (module doc; paper eq. 2-4).

    Args:
      counts: ``(num_items N, num_categories k)`` non-negative integers; every row sums to the same ``n >= 2``.

    Returns:
      ``{"kappa", "P_bar", "P_e", "p_j" (k,), "percent_agreement", "N", "n", "k"}``; ``kappa`` is None when
      ``P_e == 1`` (every label in one category: chance agreement is total and kappa is undefined).

    Raises:
      ValueError: not a 2-D non-negative integer matrix, no item, unequal row sums, or ``n < 2``.
    """
    c = np.asarray(counts)
    if c.ndim != 2 or c.shape[0] == 0 or c.shape[1] == 0:
        raise ValueError(f"counts must be a non-empty (items, categories) matrix, got shape {c.shape}")
    if not np.issubdtype(c.dtype, np.integer) or (c < 0).any():
        raise ValueError("counts must be non-negative integers")
    c = c.astype(np.float64)
    sums = c.sum(axis=1)
    n = sums[0]
    if not np.all(sums == n):
        bad = int(np.argmax(sums != n))
        raise ValueError(f"item {bad} has {int(sums[bad])} labels but item 0 has {int(n)}; every item needs n labels")
    if n < 2:
        raise ValueError(f"kappa needs at least two annotators per item, got {int(n)}")
    num_items = c.shape[0]
    p_i = (c * (c - 1)).sum(axis=1) / (n * (n - 1))  # eq. 3
    p_j = c.sum(axis=0) / (num_items * n)  # eq. 4
    p_bar = float(p_i.mean())
    p_e = float((p_j ** 2).sum())
    kappa = None if np.isclose(p_e, 1.0) else (p_bar - p_e) / (1.0 - p_e)  # eq. 2
    return {
        "kappa": kappa,
        "P_bar": p_bar,
        "P_e": p_e,
        "p_j": [float(x) for x in p_j],
        "percent_agreement": float(np.mean(c.max(axis=1) == n)),
        "N": int(num_items),
        "n": int(n),
        "k": int(c.shape[1]),
    }


def agreement(path: str | os.PathLike) -> dict:
    """Kappa and percent agreement of an agreement file.

    Returns:
      :func:`fleiss_kappa`'s dict with ``categories`` (the sorted labels) and ``file``.

    Raises:
      AgreementFileError: see :func:`read_agreement_file`.
    """
    counts, categories = counts_from_labels(read_agreement_file(path))
    out = fleiss_kappa(counts)
    out["categories"] = categories
    out["file"] = os.fspath(path)
    return out
