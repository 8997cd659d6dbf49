"""The table a reading run prints at its end: its dev and test EM/F1 beside the human performance it measured and
the rows of the ViQuAD paper's Table 5 (Nguyen et al., COLING 2020; trained on the 18,579 questions of the 1.0
train split). Imports no JAX.
"""

from __future__ import annotations

__all__ = ["PAPER_TABLE5", "comparison_table"]

#: ViQuAD Table 5: ``(row, dev EM, test EM, dev F1, test F1)``.
PAPER_TABLE5 = (
    ("DrQA + Word2vec", 39.04, 38.10, 60.31, 60.38),
    ("DrQA + FastText", 35.93, 35.61, 59.33, 58.67),
    ("DrQA + ELMO", 43.98, 40.91, 65.09, 63.44),
    ("DrQA + BERT", 35.71, 34.84, 58.00, 57.73),
    ("QANet + Word2vec", 45.19, 40.89, 67.73, 64.60),
    ("QANet + FastText", 39.66, 46.05, 63.82, 68.06),
    ("QANet + ELMO", 46.10, 42.21, 67.62, 65.76),
    ("QANet + BERT", 43.13, 41.93, 66.54, 65.45),
    ("mBERT", 62.20, 59.28, 80.77, 80.00),
    ("XLM-R Base", 63.87, 63.00, 81.90, 81.95),
    ("XLM-R Large", 69.18, 68.98, 87.14, 87.02),
    ("Human performance", 85.65, 85.59, 95.19, 94.69),
)


def _cell(v) -> str:
    return f"{'n/a':>8}" if v is None else f"{v:8.2f}"


def comparison_table(name: str, results: dict, dev: str = "dev", test: str = "test") -> str:
    """The run's row, the human row it measured, and :data:`PAPER_TABLE5`, as text.

    Args:
      name: the run's row label (e.g. ``this run (drqa, step 6000)``).
      results: ``{split: metrics}`` of :func:`openvivqa_jax.evaluation.evaluate_split` (``overall`` EM/F1 as
        fractions, ``human_performance``).
      dev, test: the splits' names in ``results``.

    Returns:
      Lines ``row | EM dev | EM test | F1 dev | F1 test`` in percent, ``n/a`` where a split was not scored.
    """
    def pct(split: str, key: str, human: bool = False):
        m = results.get(split)
        if not m:
            return None
        src = (m.get("human_performance") or {}).get("overall") if human else m.get("overall")
        v = (src or {}).get(key)
        return None if v is None else 100.0 * float(v)

    width = max(len(name), 30)
    head = f"{'':<{width}} {'EM dev':>8} {'EM test':>8} {'F1 dev':>8} {'F1 test':>8}"
    lines = [head, "-" * len(head)]
    lines.append(f"{name:<{width}} " + " ".join(_cell(pct(s, k)) for k in ("EM", "F1") for s in (dev, test)))
    lines.append(f"{'human (measured here)':<{width}} "
                 + " ".join(_cell(pct(s, k, human=True)) for k in ("EM", "F1") for s in (dev, test)))
    lines.append("-- ViQuAD paper, Table 5 (trained on 18,579 questions) --")
    for row, em_d, em_t, f1_d, f1_t in PAPER_TABLE5:
        lines.append(f"{row:<{width}} " + " ".join(_cell(v) for v in (em_d, em_t, f1_d, f1_t)))
    return "\n".join(lines)
