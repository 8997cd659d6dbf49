"""Pictures: training curves of a run, and one prediction (OCR boxes, copied words, decoder attention).

Command line::

    python -m openvivqa_jax.plot --workdir runs/default [--output runs/default/training_curves.png]

reads ``<workdir>/metrics.jsonl`` (one JSON object per line, written by :mod:`openvivqa_jax.vqa.train`:
``{"step", "kind": "train" | "eval" | "final", ...}``) and draws, against the training step,

* the training loss (``kind == "train"``, key ``loss``) and, on a second axis, the token accuracy;
* the dev metrics (``kind == "eval"``, keys ``dev/<metric>``): scores in [0, 1] (BLEU, ROUGE-L, ...)
  on the left axis and CIDEr (0-10) on its own right axis.

A step logged twice (a run resumed from a checkpoint logs the steps after it again) keeps its last value.
Rendering uses matplotlib's Agg canvas (no display needed).

Exit codes: 0 success; 2 unusable input (no ``metrics.jsonl``, invalid JSON on a line, nothing to plot):
one ``error:`` line on stderr naming the file and the line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from openvivqa_jax import outputs
from openvivqa_jax import paths
from openvivqa_jax.cli import run_main
from openvivqa_jax.errors import UserError

__all__ = ["MetricsFileError", "read_metrics", "plot_training_curves", "plot_prediction", "build_parser", "run"]

#: Dev metrics drawn on the CIDEr axis (scale 0-10) instead of the [0, 1] axis.
_WIDE_SCALE = ("CIDEr",)


class MetricsFileError(UserError, ValueError):
    """``metrics.jsonl`` is missing, malformed or empty; the message names the file and the line."""


def read_metrics(path: str) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Reads ``metrics.jsonl`` into series.

    Args:
      path: the file.

    Returns:
      ``{kind: {key: (steps (n,) int64, values (n,) float64)}}`` for every numeric key of every record
      kind, sorted by step, the last value kept for a step logged more than once.

    Raises:
      MetricsFileError: the file cannot be read, a line is not a JSON object with an integer ``step`` and a
        string ``kind`` (names the line), or no record has any numeric value.
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as e:
        raise MetricsFileError(f"{path}: cannot read metrics file: {e.strerror or e}") from e
    series: dict[str, dict[str, dict[int, float]]] = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise MetricsFileError(f"{path}: line {n} is not valid JSON ({e.msg} at column {e.colno})") from e
        if not isinstance(rec, dict) or not isinstance(rec.get("step"), int) or not isinstance(rec.get("kind"), str):
            raise MetricsFileError(f"{path}: line {n} is not an object with an integer 'step' and a string 'kind'")
        by_key = series.setdefault(rec["kind"], {})
        for k, v in rec.items():
            if k in ("step", "kind", "time") or isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            by_key.setdefault(k, {})[rec["step"]] = float(v)
    out = {kind: {k: (np.array(sorted(d), np.int64), np.array([d[s] for s in sorted(d)], np.float64))
                  for k, d in by_key.items() if d}
           for kind, by_key in series.items()}
    if not any(out.values()):
        raise MetricsFileError(f"{path}: no numeric metric in {len(lines)} lines; nothing to plot")
    return out


def plot_training_curves(metrics_path: str, output: str, title: str | None = None,
                         dev_metrics: Sequence[str] | None = None) -> dict[str, Any]:
    """Draws the loss and dev-metric curves of ``metrics_path`` into the PNG ``output``.

    Args:
      metrics_path: a ``metrics.jsonl`` file.
      output: the PNG path (its folder is created).
      title: figure title (default: the run folder's name).
      dev_metrics: dev metric names to draw (default: every ``dev/*`` key).

    Returns:
      ``{"output": path, "train_steps": int, "eval_steps": int, "series": [names drawn]}``.

    Raises:
      MetricsFileError: see :func:`read_metrics`, or neither training loss nor dev metrics found.
    """
    from matplotlib.figure import Figure  # heavy: only when a picture is drawn

    data = read_metrics(metrics_path)
    train = data.get("train", {})
    dev = {k[len("dev/"):]: v for k, v in data.get("eval", {}).items() if k.startswith("dev/")}
    if dev_metrics:
        dev = {k: v for k, v in dev.items() if k in dev_metrics}
    if "loss" not in train and not dev:
        raise MetricsFileError(f"{metrics_path}: no training loss and no dev metric records; nothing to plot")
    fig = Figure(figsize=(11, 4.2), dpi=110)
    axes = fig.subplots(1, 2)
    drawn = []
    ax = axes[0]
    if "loss" in train:
        s, v = train["loss"]
        ax.plot(s, v, color="tab:blue", label="train loss")
        drawn.append("train/loss")
        ax.set_yscale("log")
        ax.set_ylabel("loss (log scale)")
    acc_key = next((k for k in ("token_accuracy", "accuracy") if k in train), None)
    if acc_key:
        ax2 = ax.twinx()
        s, v = train[acc_key]
        ax2.plot(s, v, color="tab:orange", label=f"train {acc_key.replace('_', ' ')}")
        ax2.set_ylim(0, 1)
        ax2.set_ylabel(acc_key.replace("_", " "))
        drawn.append(f"train/{acc_key}")
        lines = ax.get_lines() + ax2.get_lines()
        ax.legend(lines, [ln.get_label() for ln in lines], loc="center right", fontsize=8)
    elif "loss" in train:
        ax.legend(loc="upper right", fontsize=8)
    ax.set_xlabel("step")
    ax.set_title("training")
    ax.grid(alpha=0.3)
    _draw_dev(axes[1], dev, drawn)
    run_name = title or os.path.basename(os.path.dirname(os.path.abspath(metrics_path)))
    fig.suptitle(run_name)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    outputs.save_figure(fig, output, bbox_inches="tight")  # whole, then renamed: a failed write keeps the old one
    n_train = len(train["loss"][0]) if "loss" in train else 0
    n_eval = max((len(s) for s, _ in dev.values()), default=0)
    return {"output": output, "train_steps": n_train, "eval_steps": n_eval, "series": drawn}


def _draw_dev(ax, dev: Mapping[str, tuple[np.ndarray, np.ndarray]], drawn: list[str]) -> None:
    """The dev-metric panel of :func:`plot_training_curves` on ``ax`` (CIDEr-like scales on a right axis); the
    series drawn are appended to ``drawn``."""
    if dev:
        wide_ax = None
        lines = []
        for name in sorted(dev):
            s, v = dev[name]
            marker = "o" if len(s) < 30 else None
            if name in _WIDE_SCALE:
                wide_ax = wide_ax or ax.twinx()
                lines += wide_ax.plot(s, v, color="black", linestyle="--", marker=marker, label=f"{name} (right axis)")
            else:
                lines += ax.plot(s, v, marker=marker, label=name)
            drawn.append(f"dev/{name}")
        ax.set_ylabel("score")
        if wide_ax is not None:
            wide_ax.set_ylabel(" / ".join(n for n in _WIDE_SCALE if n in dev))
        ax.legend(lines, [ln.get_label() for ln in lines], loc="upper center", bbox_to_anchor=(0.5, -0.16),
                  ncol=4, fontsize=8)
    else:
        ax.text(0.5, 0.5, "no dev evaluation logged", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("step")
    ax.set_title("dev metrics")
    ax.grid(alpha=0.3)


def plot_prediction(image: np.ndarray, output: str, *, question: str, answer: str,
                    words: Sequence[Mapping[str, Any]], ocr_tokens: Sequence[Mapping[str, Any]],
                    heat: np.ndarray | None = None, heat_note: str = "", title: str = "") -> str:
    """Draws one prediction: the image with OCR boxes (copied ones highlighted), the decoder's attention
    as a heat map, and the answer with each word's provenance.

    Args:
      image: ``(height, width, 3)`` uint8 pixels.
      output: the PNG path (its folder is created).
      question, answer: normalized text.
      words: per answer word ``{"word", "source": "ocr" | "vocab" | "answer_class", "ocr_index"?}``.
      ocr_tokens: ``{"text", "box": (x0, y0, x1, y1) in [0, 1], "score"}`` in slot order.
      heat: optional ``(h, w)`` non-negative attention map over the whole image (any resolution).
      heat_note: a caption for the heat map (what it averages over).
      title: figure title.

    Returns:
      ``output``.
    """
    from matplotlib import patches  # heavy: only when a picture is drawn
    from matplotlib.figure import Figure

    img = np.asarray(image)
    h, w = img.shape[:2]
    copied = {int(x["ocr_index"]) for x in words if x.get("source") == "ocr" and x.get("ocr_index") is not None}
    aspect = w / max(h, 1)
    fig = Figure(figsize=(4.2 * aspect + 4.6, 4.6), dpi=110)
    gs = fig.add_gridspec(1, 2, width_ratios=[4.2 * aspect, 4.2])
    ax = fig.add_subplot(gs[0, 0])
    ax.imshow(img, extent=(0, w, h, 0))
    if heat is not None and np.size(heat) and float(np.max(heat)) > 0:
        hm = np.asarray(heat, np.float64) / float(np.max(heat))
        im = ax.imshow(hm, extent=(0, w, h, 0), cmap="jet", alpha=0.35, interpolation="nearest", vmin=0, vmax=1)
        cb = fig.colorbar(im, ax=ax, fraction=0.04, pad=0.01)
        cb.set_label("decoder attention (relative)", fontsize=7)
        cb.ax.tick_params(labelsize=6)
    for j, tok in enumerate(ocr_tokens):
        x0, y0, x1, y1 = (float(v) for v in tok["box"])
        is_copied = j in copied
        ax.add_patch(patches.Rectangle((x0 * w, y0 * h), (x1 - x0) * w, (y1 - y0) * h, fill=False,
                                       edgecolor="red" if is_copied else "cyan",
                                       linewidth=2.6 if is_copied else 0.9))
        if is_copied:
            ax.text(x0 * w, y0 * h - 2, f"{j}: {tok['text']}", color="white", fontsize=8, va="bottom",
                    bbox=dict(facecolor="red", alpha=0.85, pad=1.2, edgecolor="none"))
    ax.set_xlim(0, w)
    ax.set_ylim(h, 0)
    ax.set_xticks([])
    ax.set_yticks([])
    legend = [patches.Patch(edgecolor="cyan", fill=False, label="OCR token"),
              patches.Patch(edgecolor="red", fill=False, linewidth=2, label="copied into the answer")]
    ax.legend(handles=legend, loc="lower left", fontsize=7, framealpha=0.8)
    tx = fig.add_subplot(gs[0, 1])
    tx.axis("off")
    lines = [("Q: " + question, "black", "bold"), ("A: " + (answer or "(empty)"), "darkred", "bold"), ("", "black", "normal")]
    for x in words:
        if x.get("source") == "ocr":
            lines.append((f"{x['word']}  <- OCR token {x.get('ocr_index')}", "red", "normal"))
        elif x.get("source") == "answer_class":
            lines.append((f"{x['word']}  <- answer class {x.get('class_id')}", "black", "normal"))
        else:
            lines.append((f"{x['word']}  <- vocabulary", "black", "normal"))
    lines.append(("", "black", "normal"))
    lines.append((f"{len(ocr_tokens)} OCR tokens, {len(copied)} copied", "dimgray", "normal"))
    if heat_note:
        lines.append((heat_note, "dimgray", "small"))
    y = 0.98
    step = min(0.06, 0.95 / max(len(lines), 1))
    for text, color, weight in lines:
        small = weight == "small"
        for part in (textwrap.wrap(text, 62 if small else 46) or [""]):
            tx.text(0.0, y, part, color=color, fontweight="normal" if small else weight, fontsize=7 if small else 9,
                    va="top", transform=tx.transAxes)
            y -= step * (0.75 if small else 1.0)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    outputs.save_figure(fig, output)
    return output


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    p = argparse.ArgumentParser(prog="python -m openvivqa_jax.plot",
                                description="Plot the training loss and dev metrics of a run (metrics.jsonl) as a PNG.")
    p.add_argument("--workdir", required=True, help="run folder holding metrics.jsonl")
    p.add_argument("--output", default=None, help="PNG path (default: <workdir>/training_curves.png)")
    p.add_argument("--metrics", nargs="+", default=None, help="dev metrics to draw (default: all logged)")
    p.add_argument("--title", default=None, help="figure title (default: the workdir's name)")
    return p


def run(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit code (0 success, 2 unusable input)."""
    args = build_parser().parse_args(argv)
    return run_main(lambda: _run(args), sigterm=False, with_class=False, exit_codes={UserError: 2})


#: The path flags (:mod:`openvivqa_jax.paths`), checked before anything is read.
PATH_FLAGS = {"--workdir": paths.INPUT_DIR, "--output": paths.OUTPUT_FILE}


def _run(args: argparse.Namespace) -> int:
    path = os.path.join(os.path.expanduser(args.workdir), "metrics.jsonl")
    paths.check_args(args, PATH_FLAGS, reads=[(f"the run's metrics.jsonl in --workdir {args.workdir}", path)])
    if not os.path.isdir(os.path.expanduser(args.workdir)):
        raise UserError(f"workdir {args.workdir!r} does not exist")
    if not os.path.isfile(path):
        raise MetricsFileError(f"{path}: no metrics.jsonl in the workdir (has the run logged a step yet?)")
    output = args.output or os.path.join(os.path.expanduser(args.workdir), "training_curves.png")
    try:
        info = plot_training_curves(path, output, title=args.title, dev_metrics=args.metrics)
    except OSError as e:  # MetricsFileError covers reading the metrics; this is the picture
        raise UserError(f"cannot write {output}: {e.strerror or e}") from e
    print(f"wrote {info['output']} ({info['train_steps']} training log points, {info['eval_steps']} dev evaluations: "
          f"{', '.join(info['series'])})")
    return 0

if __name__ == "__main__":
    sys.exit(run())
