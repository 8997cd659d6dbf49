"""PNG figures of an analysis (matplotlib's Agg canvas through ``matplotlib.figure.Figure``; no display).

* :func:`plot_lengths`: question and answer length histograms in syllables, one line per split, as the share
  of questions (answers) of each length (paper Figures 4-5), the answer band [2, 10] shaded;
* :func:`plot_qa_types`: Text QA / Non-text QA / unknown counts per split (paper Table 2);
* :func:`plot_levels`: word / phrase / sentence shares of the answers per split (paper Table 4).

Each takes the ``splits`` part of ``analysis.json`` (``{split: statistics}``,
:func:`openvivqa_jax.analysis.stats.statistics`) and writes one PNG.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from openvivqa_jax import outputs
from openvivqa_jax.analysis.linguistic import LEVELS
from openvivqa_jax.analysis.stats import ANSWER_BAND

__all__ = ["MAX_LENGTH_SHOWN", "plot_lengths", "plot_qa_types", "plot_levels", "write_figures"]

#: Lengths above this are drawn in one last bin labelled ``>= MAX_LENGTH_SHOWN``.
MAX_LENGTH_SHOWN = 40


def _shares(histogram: Mapping[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """``{length: count}`` -> lengths ``(0..MAX_LENGTH_SHOWN)`` and their shares (the last bin holds the rest)."""
    x = np.arange(MAX_LENGTH_SHOWN + 1)
    y = np.zeros(MAX_LENGTH_SHOWN + 1)
    for k, v in histogram.items():
        y[min(int(k), MAX_LENGTH_SHOWN)] += v
    total = y.sum()
    return x, (y / total if total else y)


def plot_lengths(splits: Mapping[str, Mapping], output: str, title: str = "") -> str:
    """Question and answer length histograms (two panels); returns ``output``."""
    from matplotlib.figure import Figure  # heavy: only when figures are drawn
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(11, 4.2), dpi=110)
    for col, (key, label) in enumerate((("question_length", "Question"), ("answer_length", "Answer"))):
        ax = fig.add_subplot(1, 2, col + 1)
        longest = 1
        for split, st in splits.items():
            h = st[key]["histogram"]
            if not h:
                continue
            x, y = _shares(h)
            longest = max(longest, min(max(int(k) for k in h), MAX_LENGTH_SHOWN))
            mean = st[key]["mean"]
            ax.plot(x, 100 * y, marker="o", markersize=3, linewidth=1.4,
                    label=f"{split} (n={st[key]['count']}, mean {mean:.1f})")
        if key == "answer_length":
            ax.axvspan(ANSWER_BAND[0] - 0.5, ANSWER_BAND[1] + 0.5, color="tab:green", alpha=0.08,
                       label=f"{ANSWER_BAND[0]}-{ANSWER_BAND[1]} syllables")
        ax.set_xlim(0, longest + 1)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(f"{label} length (syllables; last bin >= {MAX_LENGTH_SHOWN})" if longest >= MAX_LENGTH_SHOWN
                      else f"{label} length (syllables)")
        ax.set_ylabel(f"% of {label.lower()}s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_title(f"{label} length")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    outputs.save_figure(fig, output)
    return output


def _stacked_bars(ax, splits: list[str], parts: list[tuple[str, np.ndarray, str]], fmt) -> None:
    left = np.zeros(len(splits))
    y = np.arange(len(splits))
    for name, values, color in parts:
        bars = ax.barh(y, values, left=left, color=color, label=name, height=0.6)
        for b, v in zip(bars, values):
            if v > 0:
                ax.text(b.get_x() + b.get_width() / 2, b.get_y() + b.get_height() / 2, fmt(v), ha="center",
                        va="center", fontsize=8)
        left = left + values
    ax.set_yticks(y, splits)
    ax.invert_yaxis()
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(axis="x", alpha=0.3)


def plot_qa_types(splits: Mapping[str, Mapping], output: str, title: str = "") -> str:
    """Text QA / Non-text QA / unknown counts per split (stacked bars); returns ``output``."""
    from matplotlib.figure import Figure  # heavy: only when figures are drawn

    names = list(splits)
    fig = Figure(figsize=(9, 1.4 + 0.6 * len(names)), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    parts = [("Text QA", np.array([splits[s]["qa_types"]["text"] for s in names], float), "tab:orange"),
             ("Non-text QA", np.array([splits[s]["qa_types"]["non_text"] for s in names], float), "tab:blue"),
             ("unknown", np.array([splits[s]["qa_types"]["unknown"] for s in names], float), "lightgray")]
    _stacked_bars(ax, names, parts, lambda v: f"{int(v)}")
    ax.set_xlabel("questions")
    ax.set_title(title or "Text QA / Non-text QA")
    fig.tight_layout()
    outputs.save_figure(fig, output)
    return output


def plot_levels(splits: Mapping[str, Mapping], output: str, title: str = "") -> str:
    """Word / phrase / sentence shares of the answers per split (stacked bars); returns ``output``."""
    from matplotlib.figure import Figure  # heavy: only when figures are drawn

    names = list(splits)
    fig = Figure(figsize=(9, 1.4 + 0.6 * len(names)), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    colors = {"word": "tab:red", "phrase": "tab:olive", "sentence": "tab:purple"}
    parts = [(lv, np.array([100 * (splits[s]["linguistic_level"]["shares"][lv] or 0.0) for s in names]), colors[lv])
             for lv in LEVELS]
    _stacked_bars(ax, names, parts, lambda v: f"{v:.0f}%")
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of answers (heuristic levels, see docs/analysis.md)")
    ax.set_title(title or "Linguistic level of answers")
    fig.tight_layout()
    outputs.save_figure(fig, output)
    return output


def write_figures(splits: Mapping[str, Mapping], out_dir: str, title: str = "") -> list[str]:
    """Writes ``lengths.png``, ``qa_types.png`` and ``linguistic_levels.png`` to ``out_dir``; returns the paths."""
    return [
        plot_lengths(splits, os.path.join(out_dir, "lengths.png"), title),
        plot_qa_types(splits, os.path.join(out_dir, "qa_types.png"),
                      f"Text QA / Non-text QA: {title}" if title else ""),
        plot_levels(splits, os.path.join(out_dir, "linguistic_levels.png"),
                    f"Linguistic level of answers: {title}" if title else ""),
    ]
