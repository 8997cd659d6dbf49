"""What ``python -m openvivqa_jax.predict`` reports for the questions a restored run answered
(:meth:`openvivqa_jax.vqa.inference.Inference.answer_photos`): a result as text (the answer and where each of its
words came from) or as JSON, and the Codalab submission file of a batch. Imports no JAX.
"""

from __future__ import annotations

import os

from openvivqa_jax import outputs

__all__ = ["format_result", "json_result", "no_text_note", "write_submission"]


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
    if res.get("plot"):
        lines.append(f"picture: {res['plot']}")
    return "\n".join(lines)


def json_result(res: dict) -> dict:
    """One result as JSON (``predict --json``): without the heat map and the ids; OCR boxes and scores rounded."""
    out = {k: v for k, v in res.items() if k not in ("heat", "heat_note", "ids")}
    out["ocr"] = [{"text": t["text"], "box": [round(float(v), 4) for v in t["box"]], "score": round(float(t.get("score", 1.0)), 4)}
                  for t in res["ocr"]]
    return out


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
