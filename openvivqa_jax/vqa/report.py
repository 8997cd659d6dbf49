"""What ``python -m openvivqa_jax.predict`` reports for the questions a restored run answered
(:meth:`openvivqa_jax.vqa.inference.Inference.answer_photos`): a result as text (the answer and where each of its
words came from) or as JSON, and the Codalab submission file of a batch. Imports no JAX.
"""

from __future__ import annotations

import os
import re

from openvivqa_jax import outputs
from openvivqa_jax.text.language import detect_language, training_languages

__all__ = ["format_result", "json_result", "no_text_note", "write_submission", "cut_questions_warning",
           "skipped_summary", "language_warning", "answer_warnings"]


def _fmt_box(b) -> str:
    return "(" + ", ".join(f"{float(v):.3f}" for v in b) + ")"


def format_result(res: dict) -> str:
    """Human-readable lines for one result: question, answer, per-word provenance, OCR tokens."""
    lines = [f"question: {res['question']}", f"answer: {res['answer']}", "provenance:"]
    if not res["words"]:
        lines.append("  (empty answer)")
    for w in res["words"]:
        if w["source"] == "ocr":
            lines.append(f"  {w['word']:<14} copied from OCR token {w['ocr_index']} {w['ocr_text']!r} "
                         f"box {_fmt_box(w['box'])} (confidence {w['score']:.2f})")
        elif w["source"] == "answer_class":
            lines.append(f"  {w['word']:<14} answer class {w['class_id']}")
        else:
            lines.append(f"  {w['word']:<14} generated from the vocabulary"
                         + (" (also an OCR token, not copied)" if w.get("in_ocr") else ""))
    lines.append(f"ocr: {len(res['ocr'])} token{'' if len(res['ocr']) == 1 else 's'}" + (": " + " | ".join(t["text"] for t in res["ocr"]) if res["ocr"] else "")
                 + (f" ({res['ocr_truncated']} more beyond model.num_ocr not used)" if res.get("ocr_truncated") else ""))
    if res.get("question_truncated"):
        read = res["question_pieces"] - res["question_truncated"]
        lines.append(f"question cut: the model read its first {read} of {res['question_pieces']} pieces "
                     "(model.max_question_len); the words after them did not count")
    if res.get("plot"):
        lines.append(f"picture: {res['plot']}")
    return "\n".join(lines)


def json_result(res: dict) -> dict:
    """One result as JSON (``predict --json``): without the heat map and the ids; OCR boxes and scores rounded."""
    out = {k: v for k, v in res.items() if k not in ("heat", "heat_note", "ids")}
    out["ocr"] = [{"text": t["text"], "box": [round(float(v), 4) for v in t["box"]], "score": round(float(t.get("score", 1.0)), 4)}
                  for t in res["ocr"]]
    return out


def cut_questions_warning(results: list[dict], max_len: int, shown: int = 5, single: bool = False) -> str | None:
    """The warning for questions longer than the ``max_len`` tokens the model reads (``model.max_question_len``),
    whose words past that were not read (:meth:`~openvivqa_jax.vqa.inference.Inference.answer_photos`'s
    ``question_truncated``), with the count and the first ``shown`` (``single``: the one question of
    ``--question``); None when no question was cut."""
    cut = [r for r in results if r.get("question_truncated")]
    if not cut:
        return None
    if single:
        return (f"warning: the question is {cut[0]['question_pieces']} pieces long and the model reads the first "
                f"{max_len} (model.max_question_len), so its words past that did not count (question_truncated in "
                "--json)")
    listed = ", ".join(f"{r['question_id']!r} ({r['question_pieces']} pieces)" for r in cut[:shown])
    return (f"warning: {len(cut)} of {len(results)} question(s) are longer than the {max_len} pieces the model reads "
            f"(model.max_question_len) and were cut, so their words past that did not count: question {listed}"
            f"{', ...' if len(cut) > shown else ''}; each is marked with question_truncated (the pieces cut) in "
            "--json and in the text output")


#: What makes one skip reason differ from another of its kind: a quoted id or name, a path, a number.
_SPECIFIC = re.compile(r"'[^']*'|\"[^\"]*\"|(?:[A-Za-z]:)?[^\s'\"(]*[/\\][^\s'\"):]*|\b\d+\b")


def _reason_kind(reason: str) -> str:
    """A skip reason with its ids, names, paths and numbers left out: the reasons of one kind read alike."""
    return _SPECIFIC.sub("…", reason)


def skipped_summary(skipped: dict[str, str], total: int, listed_in: str | None, kinds_shown: int = 8) -> list[str]:
    """The stderr lines for the questions ``predict --skip_bad`` set aside (``{question_id: reason}``): the count of
    ``total``, then one line per kind of reason (:func:`_reason_kind`), the most frequent first, with its count and
    its first question in full; every question and its reason is in ``listed_in`` (``<output stem>.skipped.json``).
    ``[]`` when nothing was skipped."""
    if not skipped:
        return []
    kinds: dict[str, list[str]] = {}
    for qid, why in skipped.items():
        kinds.setdefault(_reason_kind(why), []).append(qid)
    ranked = sorted(kinds.items(), key=lambda kv: -len(kv[1]))
    images = sum(k.startswith("image ") for k in skipped)  # a repeated image id: an entry, not a question
    questions = len(skipped) - images
    also = f" and {images} image entr{'y' if images == 1 else 'ies'}" if images else ""
    lines = [f"skipped {questions} of {total - images} questions whose question or image could not be used{also}, "
             f"by reason (each with its reason: {listed_in}):"]
    for kind, qids in ranked[:kinds_shown]:
        lines.append(f"  {len(qids)} x {kind} (e.g. question {qids[0]!r}: {skipped[qids[0]]})")
    rest = ranked[kinds_shown:]
    if rest:
        lines.append(f"  {sum(len(q) for _, q in rest)} more of {len(rest)} other reasons")
    return lines


def language_warning(results: list[dict], trained: set[str] | None, given: dict[str, str] | None = None,
                     shown: int = 5, single: bool = False) -> str | None:
    """The warning for questions in a language the run was not trained on, with the count and the first
    ``shown``; marks each result with ``language`` (the questions file's ``language`` field from ``given``
    ``{question_id: language}``, else :func:`~openvivqa_jax.text.language.detect_language`; None: not told) and
    those flagged with ``language_not_trained`` (``single``: the one question of ``--question``). None when ``trained`` (the run's training languages,
    :func:`~openvivqa_jax.text.language.training_languages`) is unknown or every question is in one of them."""
    odd = []
    for r in results:
        lang = (given or {}).get(r["question_id"]) or detect_language(r["question"])
        r["language"] = lang
        if trained and lang and lang not in trained:
            r["language_not_trained"] = True
            odd.append(r)
    if not odd:
        return None
    if single:
        return (f"warning: the question looks {odd[0]['language']}, a language the run was not trained on (its "
                f"training questions are in {', '.join(sorted(trained))}): the model reads it as pieces it never "
                "learned to use, so the answer says little")
    listed = ", ".join(f"{r['question_id']!r} ({r['language']})" for r in odd[:shown])
    return (f"warning: {len(odd)} of {len(results)} question(s) are in a language the run was not trained on (its "
            f"training questions are in {', '.join(sorted(trained))}): question {listed}"
            f"{', ...' if len(odd) > shown else ''}; the model reads them as pieces it never learned to use, so its "
            "answers to them say little (each is marked with language_not_trained in --json)")


def answer_warnings(results: list[dict], max_question_len: int, workdir: str, records: list[dict],
                    single: bool = False) -> list[str]:
    """The warning lines of answered questions (marking the results): those cut to ``max_question_len``
    (:func:`cut_questions_warning`) and those in a language the run in ``workdir`` was not trained on
    (:func:`language_warning`, :func:`~openvivqa_jax.text.language.training_languages`; a question's language is
    its record's ``language`` where the questions file has one)."""
    given = {r["question_id"]: r["language"] for r in records if r.get("language")}
    found = [cut_questions_warning(results, max_question_len, single=single),
             language_warning(results, training_languages(workdir), given, single=single)]
    return [w for w in found if w]


def no_text_note(engine: str, items: list) -> str | None:
    """The note for pictures in which the OCR engine ``engine`` read no text (``items``: the answered
    ``PhotoQuestion`` s, ``image`` a PIL image), or None when every picture has tokens: such answers can copy
    nothing, and the usual cause is letters too small for the engine."""
    empty = {it.image_path: it.image.size for it in items if not it.ocr}
    if not empty:
        return None
    path, (w, h) = next(iter(empty.items()))
    pictures = len({it.image_path for it in items})
    return (f"note: OCR ({engine}) read no text in {len(empty)} of {pictures} picture(s) (e.g. "
            f"{os.path.basename(path)}, {w}x{h} px), so those answers copy nothing; OCR engines seldom read "
            f"letters under about 10 px high: a larger photo, or --ocr <tokens.json> with the text's boxes, "
            f"gives the pointer network words to copy")


def write_submission(output: str | None, results: list[dict], skipped: dict[str, str]) -> tuple[str, str | None]:
    """Batch mode: writes the submission ``{question_id: answer}`` to ``output`` (``--output``; None:
    ``submission.json``) and, when questions were skipped, ``<output stem>.skipped.json``; returns both paths (the
    second None when nothing was skipped). Each file is written whole and renamed into place
    (:func:`openvivqa_jax.outputs.write_json`), so a failed write leaves an earlier file as it was.

    Raises:
      openvivqa_jax.outputs.OutputWriteError: a file cannot be written (one line naming it and the reason).
    """
    output = output or "submission.json"
    try:
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    except OSError as e:
        raise outputs.write_error(output, e, "--output") from e
    outputs.write_json(output, {r["question_id"]: r["answer"] for r in results}, what="--output", indent=1)
    skipped_path = None
    if skipped:
        skipped_path = os.path.splitext(output)[0] + ".skipped.json"
        outputs.write_json(skipped_path, skipped, what="the list of skipped questions", indent=1)
    return output, skipped_path
