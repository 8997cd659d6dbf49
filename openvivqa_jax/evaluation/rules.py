"""Which rule each metric of :func:`.evaluator.score` used, recorded in every metrics file (``rules``) and printed
under its table, so that an official number is never confused with a Vietnamese-normalized one.

A rule is ``{"official": bool, "rule": str}``: ``official`` is True when the value is the one the metric's official
script gives (docs/evaluation.md has the table of metrics x text modes x official scripts, with the measured
parity), and ``rule`` says in a few words how the strings were compared.

=============================  ===================================================================================
text mode                      rules
=============================  ===================================================================================
``official``                   BLEU-1..4, ROUGE-L, CIDEr, METEOR: pycocoevalcap 1.2; ANLS: the ST-VQA RRC script;
                               VQA-accuracy: EvalAI's TextVQA / ST-VQA rule (MMF's evaluators); EM, F1: SQuAD
                               v1.1's ``evaluate-v1.1.py``
``openvivqa``                  every metric on the Vietnamese-normalized text (not official)
``pycocoevalcap``              BLEU-1..4, ROUGE-L, CIDEr, METEOR official; the others on its PTB tokens
any                            EVJVQA-F1, EVJVQA-BLEU: the EVJVQA challenge's scorer (``evaluate_metrics.py``)
=============================  ===================================================================================

METEOR-vi, WMDRel, CLinRel and CMedRel are the project's own metrics: no official script exists for them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["CAPTION_METRICS", "metric_rules", "format_rules"]

#: The metrics of the MS-COCO caption toolkit (pycocoevalcap), official on its PTB tokens.
CAPTION_METRICS = ("BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "ROUGE-L", "CIDEr", "METEOR")

_EVJVQA = "EVJVQA challenge scorer evaluate_metrics.py (Japanese from the reference's characters, token sets, " \
          "ASCII punctuation deleted)"
_COCO = "pycocoevalcap 1.2 (PTB tokenizer, punctuation tokens removed)"
_VIETNAMESE = "Vietnamese-normalized text (NFC, one tone-mark convention, prices, spaced punctuation)"
_OFFICIAL = {
    "ANLS": "ST-VQA RRC script (answers lowercased and stripped, tau 0.5)",
    "VQA-accuracy": "EvalAI TextVQA/ST-VQA rule as MMF applies it (official answer processing, leave-one-out over "
                    "the answers; under 3 answers exact match)",
    "EM": "SQuAD v1.1 evaluate-v1.1.py",
    "F1": "SQuAD v1.1 evaluate-v1.1.py",
}
_OWN = {
    "METEOR-vi": "the project's Meteor 1.5 without -norm (no official script)",
    "WMDRel": "the project's word mover's relevance (no official script)",
    "CLinRel": "the project's W2VV++ relevance, its own normalization of the answers (no official script)",
    "CMedRel": "the project's W2VV++ relevance, its own normalization of the answers (no official script)",
}


def _rule(official: bool, rule: str) -> dict[str, Any]:
    return {"official": official, "rule": rule}


def _vietnamese_rule(name: str, answer_rules: str) -> dict[str, Any]:
    """A metric's rule in the ``openvivqa`` text mode."""
    if name == "VQA-accuracy" and answer_rules == "english":
        return _rule(False, "official English answer processing, leave-one-out only with 10 or more answers, "
                            "exact match below (not the official number for fewer than 10)")
    if name in ("EM", "F1"):
        return _rule(False, "SQuAD-style on Vietnamese-normalized text: Unicode punctuation deleted, no article "
                            "removal, empty/empty F1 1, Chinese/Japanese/Thai cut per character")
    if name in _OWN:
        return _rule(False, f"{_OWN[name]} on {_VIETNAMESE}")
    return _rule(False, _VIETNAMESE)


def metric_rules(names: Sequence[str], text_mode: str, answer_rules: str,
                 ptb_unavailable: str | None = None) -> dict[str, dict[str, Any]]:
    """The rule of each metric in ``names`` (module doc).

    Args:
      names: the scored metric names.
      text_mode: ``openvivqa``, ``pycocoevalcap`` or ``official``.
      answer_rules: ``vietnamese`` or ``english`` (VQA-accuracy outside the official mode).
      ptb_unavailable: in the official mode, why pycocoevalcap's tokenizer could not run (the caption metrics then
        fell back to the Vietnamese-normalized text); None when it ran.

    Returns:
      ``{metric: {"official": bool, "rule": str}}`` in the order of ``names``.
    """
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        if name in ("EVJVQA-F1", "EVJVQA-BLEU"):
            out[name] = _rule(True, _EVJVQA)
        elif name in ("CLinRel", "CMedRel"):
            out[name] = _rule(False, _OWN[name])
        elif text_mode == "official" and name in _OFFICIAL:
            out[name] = _rule(True, _OFFICIAL[name])
        elif text_mode == "openvivqa" or (text_mode == "official" and ptb_unavailable):
            out[name] = _vietnamese_rule(name, answer_rules)
            if ptb_unavailable and name in CAPTION_METRICS:
                out[name]["rule"] += f" because pycocoevalcap's tokenizer is unavailable ({ptb_unavailable})"
        elif name in CAPTION_METRICS:
            out[name] = _rule(True, _COCO)
        elif name in _OWN:
            out[name] = _rule(False, f"{_OWN[name]} on pycocoevalcap's PTB tokens")
        elif name == "VQA-accuracy" and answer_rules == "english":
            out[name] = _vietnamese_rule(name, answer_rules)
        else:
            out[name] = _rule(False, "pycocoevalcap's PTB tokens (no official script reads them)")
    return out


def format_rules(rules: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Table lines naming each rule once with its metrics: ``rule (official): EM, F1: SQuAD v1.1 ...``."""
    by_rule: dict[tuple[bool, str], list[str]] = {}
    for name, r in rules.items():
        by_rule.setdefault((bool(r["official"]), str(r["rule"])), []).append(name)
    return [f"rule ({'official' if official else 'not official'}): {', '.join(ms)}: {text}"
            for (official, text), ms in by_rule.items()]
