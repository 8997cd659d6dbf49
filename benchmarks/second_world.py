"""A second world for learnability: a folder of drawn shape pictures and bilingual questions of nine kinds,
laid out as a user's own photos are (``tfds_builders/vqa_folder``), independent of the synthetic OpenViVQA
generator (its own renderer, sizes and templates).

Usage::

    python benchmarks/second_world.py --out ~/second_world --seed 0
    python -m openvivqa_jax.main --config configs/folder/mlpag.py --workdir runs/second_world \\
        --config.data.manual_dir=~/second_world

Writes, in ``--out``::

    train.csv dev.csv test.csv   columns image,question,answer,question_id,language,kind,qa_type
    images/<split>/<n>.png       the pictures (176-304 pixels wide, 0.6-1.33 times as high; PNG)
    ocr.json                     the OCR tokens of every split (docs/datasets.md, "Text in the photos"): each
                                 printed word with its label's box (0-1) and score 1, as a dataset ships its
                                 OCR tokens; ``--no_ocr`` leaves it out (then ``verify_text`` needs an OCR
                                 builder config)
    about/summary.json           questions per split, kind, answer class and language; questions dropped to
                                 balance; per kind, the exact match of the most frequent training answer of
                                 the kind in the question's language (the majority-answer baseline)
    about/scenes_<split>.jsonl   each picture's drawn shapes, word, its label's pixel box and layout (the
                                 ground truth)

Scenes: :mod:`second_world_scene`; questions and their kinds: :mod:`second_world_questions`. Each split's
yes/no kinds are balanced exactly, as are ``relation``'s shape and nothing answers: the surplus of the larger
class is dropped at random (counted in the summary). The ``verify_text`` questions have ``qa_type`` 1 (they need
the text in the picture), the others 0. Picture ``n`` of a split and its questions come from
``numpy.random.default_rng([seed, split number, n])``, so ``--train_images N`` keeps the first pictures of a
larger world. Defaults: 800 / 100 / 200 pictures, about 6,400 / 800 / 1,600 questions (seed 0: 6,429 / 782 /
1,566); built with the OCR the text questions need and trained with the folder config in 19 min on a loaded
2-core machine (docs/results.md, "A second world").

Errors (exit 2, one ``error:`` line): ``--out`` exists and is not empty, or a split size below 1.
"""

from __future__ import annotations

import argparse
import collections
import csv
import dataclasses
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from openvivqa_jax import paths  # noqa: E402
from openvivqa_jax.cli import run_script  # noqa: E402
from openvivqa_jax.errors import UsageError  # noqa: E402
from second_world_questions import KINDS, YES_NO_KINDS, Question, questions  # noqa: E402
from second_world_scene import render, sample_scene  # noqa: E402

__all__ = ["SPLITS", "make_split", "balance", "ocr_tokens", "write_world", "main"]

#: Split name (the CSV file's name) -> its number in the seeds.
SPLITS = {"train": 0, "dev": 1, "test": 2}
#: CSV columns, in order.
COLUMNS = ("image", "question", "answer", "question_id", "language", "kind", "qa_type")


def make_split(out: Path, split: str, n_images: int, seed: int) -> tuple[list[dict], list[dict]]:
    """Draws and saves the pictures of one split under ``out/images/<split>/``.

    Returns:
        ``(rows, scenes)``: one CSV row per question (:data:`COLUMNS`, plus ``label``: the answer's class), and
        one record per picture (``image``, ``width``, ``height``, ``layout``, ``background``, ``word``,
        ``label``: the word's label's pixel box or None, ``shapes``).
    """
    folder = out / "images" / split
    folder.mkdir(parents=True, exist_ok=True)
    rows, scenes = [], []
    for n in range(n_images):
        rng = np.random.default_rng([seed, SPLITS[split], n])
        scene = sample_scene(rng)
        image = f"images/{split}/{n:05d}.png"
        render(scene, rng).save(out / image)
        scenes.append({"image": image, "width": scene.width, "height": scene.height, "layout": scene.layout,
                       "background": scene.background["kind"], "word": scene.word, "label": scene.label,
                       "shapes": [dataclasses.asdict(s) for s in scene.shapes]})
        for k, q in enumerate(questions(scene, rng)):
            rows.append(_row(image, f"{split}-{n:05d}-{k}", q))
    return rows, scenes


def _row(image: str, qid: str, q: Question) -> dict:
    return {"image": image, "question": q.question, "answer": q.answer, "question_id": qid,
            "language": q.language, "kind": q.kind, "qa_type": int(q.kind == "verify_text"), "label": q.label}


def balance(rows: list[dict], rng: np.random.Generator) -> tuple[list[dict], dict[str, int]]:
    """Drops, per kind of :data:`YES_NO_KINDS` and ``relation``, random questions of the more frequent answer
    class until both classes are as frequent (all of the kind's questions when one class has none).

    Returns:
        ``(kept rows in their order, {kind: questions dropped})``.
    """
    drop: set[int] = set()
    dropped = {}
    for kind in (*YES_NO_KINDS, "relation"):
        by_label = collections.defaultdict(list)
        for i, r in enumerate(rows):
            if r["kind"] == kind:
                by_label[r["label"]].append(i)
        if not by_label:
            continue
        classes = 2  # yes and no; a shape and nothing
        n = min(len(v) for v in by_label.values()) if len(by_label) == classes else 0
        for idx in by_label.values():
            surplus = rng.permutation(len(idx))[n:]
            drop.update(idx[j] for j in surplus)
        dropped[kind] = sum(len(v) - n for v in by_label.values())
    return [r for i, r in enumerate(rows) if i not in drop], dropped


def _summary(rows: list[dict]) -> dict:
    by_kind = collections.defaultdict(collections.Counter)
    for r in rows:
        by_kind[r["kind"]][r["label"]] += 1
    return {"questions": len(rows), "images": len({r["image"] for r in rows}),
            "language": dict(collections.Counter(r["language"] for r in rows)),
            "kinds": {k: dict(sorted(by_kind[k].items())) for k in KINDS if k in by_kind}}


def majority_baseline(train: list[dict], rows: list[dict]) -> dict[str, float]:
    """Exact match per kind of answering every question of ``rows`` with the most frequent answer of the training
    questions of its kind and language (the first of equally frequent ones in file order)."""
    top = {}
    for key in {(r["kind"], r["language"]) for r in train}:
        answers = collections.Counter(r["answer"] for r in train if (r["kind"], r["language"]) == key)
        top[key] = answers.most_common(1)[0][0]
    out = {}
    for kind in KINDS:
        mine = [r for r in rows if r["kind"] == kind]
        if mine:
            out[kind] = sum(r["answer"] == top.get((kind, r["language"])) for r in mine) / len(mine)
    return out


def ocr_tokens(scene: dict) -> list[dict]:
    """The OCR tokens of one picture record of :func:`make_split` in ``ocr.json``'s form: its printed word, if
    any, with the label's box as fractions of the picture's width and height (clipped to 0-1) and score 1."""
    if not scene["word"]:
        return []
    x0, y0, x1, y1 = scene["label"]
    w, h = scene["width"], scene["height"]
    box = [min(max(v, 0.0), 1.0) for v in (x0 / w, y0 / h, x1 / w, y1 / h)]
    return [{"text": scene["word"], "box": [round(v, 5) for v in box], "score": 1.0}]


def write_world(out: Path, sizes: dict[str, int], seed: int, ocr: bool = True) -> dict:
    """Writes the whole folder (module doc; ``ocr``: with ``ocr.json``) and returns the summary it saves."""
    summary = {"seed": seed, "images": sizes, "splits": {}}
    (out / "about").mkdir(parents=True, exist_ok=True)
    train, tokens = [], {}
    for split, n_images in sizes.items():
        rows, scenes = make_split(out, split, n_images, seed)
        tokens.update((s["image"], ocr_tokens(s)) for s in scenes)
        rows, dropped = balance(rows, np.random.default_rng([seed, SPLITS[split], 10 ** 9]))
        train = rows if split == "train" else train
        with open(out / f"{split}.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(COLUMNS)
            w.writerows([r[c] for c in COLUMNS] for r in rows)
        with open(out / "about" / f"scenes_{split}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps(s, ensure_ascii=False) + "\n" for s in scenes)
        summary["splits"][split] = {**_summary(rows), "dropped_to_balance": dropped,
                                    "majority_answer_exact_match": majority_baseline(train, rows)}
    if ocr:
        (out / "ocr.json").write_text(json.dumps(tokens, ensure_ascii=False), encoding="utf-8")
    (out / "about" / "summary.json").write_text(json.dumps(summary, ensure_ascii=False, indent=1), encoding="utf-8")
    return summary


#: The path flags (openvivqa_jax.paths), checked before anything is written.
PATH_FLAGS = {"--out": paths.NEW_OUTPUT_DIR}


def main(argv: list[str] | None = None) -> int:
    """The command line (module doc); returns the exit status.

    Raises:
      UsageError: a split of fewer than one picture (exit status 2).
      PathError: ``--out`` is not a new or empty folder that can be written (exit status 2).
    """
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder to write (must be new or empty)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train_images", type=int, default=800)
    p.add_argument("--dev_images", type=int, default=100)
    p.add_argument("--test_images", type=int, default=200)
    p.add_argument("--no_ocr", action="store_true", help="write no ocr.json (the words are then read by an OCR "
                   "builder config, or not at all)")
    a = p.parse_args(argv)
    sizes = {"train": a.train_images, "dev": a.dev_images, "test": a.test_images}
    if min(sizes.values()) < 1:
        raise UsageError(f"every split needs at least one picture, got {sizes}")
    paths.check_args(a, PATH_FLAGS)
    out = Path(a.out).expanduser()
    summary = write_world(out, sizes, a.seed, ocr=not a.no_ocr)
    for split, s in summary["splits"].items():
        print(f"{split}: {s['images']} pictures, {s['questions']} questions "
              f"({', '.join(f'{k} {sum(v.values())}' for k, v in s['kinds'].items())})")
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
