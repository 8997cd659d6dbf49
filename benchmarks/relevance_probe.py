"""CMedRel's AUC at telling a question's right answer from a wrong one for the same image, on the synthetic set, and
CLinRel's correlation with CIDEr over a VQA model's predictions; prints JSON.

Usage::

    python benchmarks/relevance_probe.py --relevance_model runs/w2vvpp_vi --data_dir ~/tensorflow_datasets \\
        [--split test] [--predictions runs/mlpag/eval/dev_predictions.json]

Wrong answers (one question's right answer against each of its wrong versions, same image):

* ``colour``: the colour word(s) of a colour / signboard-colour answer replaced by each other colour of the
  generator (``tfds_builders/synthetic_openvivqa/generator.py`` ``COLORS``);
* ``side``: ``bên trái`` and ``bên phải`` (and ``ở giữa``) swapped in a position answer;
* ``shop_name``: the name after ``tên là`` replaced by the names of the shops of 5 other images of the split.

AUC = P(CMedRel(right) > CMedRel(wrong)) over those (right, wrong) pairs, ties counted half (0.5: chance).
With ``--predictions`` (an evaluator ``<split>_predictions.json``), CLinRel and CIDEr of every prediction are
computed by the evaluator (``evaluation.score``, per question) and their Pearson and Kendall correlations printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from openvivqa_jax import paths  # noqa: E402
from openvivqa_jax.cli import run_script  # noqa: E402

#: The path flags (openvivqa_jax.paths), checked before anything is read or built.
PATH_FLAGS = {"--relevance_model": paths.INPUT_DIR, "--data_dir": paths.DATA_DIR, "--predictions": paths.INPUT_FILE}

SIDES = ("bên trái", "bên phải", "ở giữa")


def wrong_answers(kind: str, answer: str, other_names: list[str], colours: list[str]) -> tuple[str, list[str]]:
    """``(probe, wrong answers)`` of one answer; ``probe`` is ``colour``, ``side``, ``shop_name`` or ``""``."""
    if kind in ("colour", "sign_colour"):
        found = [c for c in sorted(colours, key=len, reverse=True) if re.search(rf"\b{re.escape(c)}$", answer)]
        if found:
            c = found[0]
            return "colour", [answer[: -len(c)] + o for o in colours if o != c]
    if kind in ("position", "shop_position"):
        for s in SIDES:
            if s in answer:
                # Object sides are left or right only; shops also have a middle one.
                return "side", [answer.replace(s, o) for o in SIDES
                                if o != s and (o != "ở giữa" or kind != "position")]
    if kind == "name" and " tên là " in answer:
        head, name = answer.rsplit(" tên là ", 1)
        return "shop_name", [f"{head} tên là {n}" for n in other_names if n != name][:5]
    return "", []


def auc(right: np.ndarray, wrong: np.ndarray) -> float:
    """P(right > wrong) + P(right == wrong) / 2 over paired arrays."""
    return float(np.mean((right > wrong) + 0.5 * (right == wrong)))


def main(argv=None) -> dict:
    """Prints (and returns) CMedRel's AUC per kind of wrong answer and CLinRel's correlation with CIDEr."""
    p = argparse.ArgumentParser()
    p.add_argument("--relevance_model", required=True)
    p.add_argument("--data_dir", default=None)
    p.add_argument("--builder_config", default="default_clean_regions")
    p.add_argument("--split", default="test")
    p.add_argument("--predictions", default=None)
    args = p.parse_args(argv)
    paths.check_args(args, PATH_FLAGS)
    import ml_collections

    from openvivqa_jax.data import datasets, pipeline
    from openvivqa_jax.evaluation import relevance as rel
    from tfds_builders.synthetic_openvivqa import generator as gen

    enc = rel.load_models(args.relevance_model)
    (lang, e), = enc.items()
    feats = e.image_features()
    cfg = ml_collections.ConfigDict(dict(builder="synthetic_openvivqa", builder_config=args.builder_config,
                                         data_dir=args.data_dir, manual_dir=None, builder_kwargs={}))
    b = datasets.load_builder(cfg)
    recs = pipeline.read_records(pipeline.load_source(b, args.split), args.split)
    names_by_image: dict[str, list[str]] = {}
    for r in recs:
        if r.kind == "name":
            for a in r.answers:
                if " tên là " in a:
                    names_by_image.setdefault(r.image_id, []).append(a.rsplit(" tên là ", 1)[1])
    images = list(names_by_image)
    rows: dict[str, list] = {}
    for r in recs:
        pos = images.index(r.image_id) if r.image_id in images else 0
        others = [n for im in (images[pos + 1:] + images[:pos])[:5] for n in names_by_image[im][:1]]
        probe, wrong = wrong_answers(r.kind, r.answers[0], others, list(gen.COLORS))
        if probe:
            rows.setdefault(probe, []).append((r, wrong))
    out: dict = {"relevance_model": e.workdir, "language": lang, "split": args.split,
                 "visual": e.meta.get("visual"), "cmedrel_auc": {}}
    for probe, items in rows.items():
        texts, vecs, owner = [], [], []
        for k, (r, wrong) in enumerate(items):
            for t in [r.answers[0], *wrong]:
                texts.append(t)
                vecs.append(feats[r.image_id])
                owner.append(k)
        s = rel.cmedrel(enc, texts, np.stack(vecs), [lang] * len(texts))
        right, bad = [], []
        i = 0
        for r, wrong in items:
            right.extend([s[i]] * len(wrong))
            bad.extend(s[i + 1:i + 1 + len(wrong)])
            i += 1 + len(wrong)
        out["cmedrel_auc"][probe] = {"auc": auc(np.asarray(right), np.asarray(bad)), "questions": len(items),
                                     "pairs": len(right)}
    if args.predictions:
        from scipy import stats

        from openvivqa_jax.evaluation import evaluator

        with open(args.predictions, encoding="utf-8") as f:
            pr = json.load(f)
        res = evaluator.score({r["question_id"]: r["prediction"] for r in pr},
                              {r["question_id"]: r["references"] for r in pr}, None, ["CIDEr", "CLinRel"],
                              per_question=True, relevance=rel.RelevanceInputs(models=enc))
        pq = res["per_question"]
        c = np.asarray([v["CIDEr"] for v in pq.values()])
        lr = np.asarray([v["CLinRel"] for v in pq.values()])
        out["clinrel_vs_cider"] = {"predictions": args.predictions, "questions": len(c),
                                   "pearson": float(stats.pearsonr(lr, c)[0]),
                                   "kendall_tau_b": float(stats.kendalltau(lr, c)[0]),
                                   "mean_CLinRel": float(lr.mean()), "mean_CIDEr": float(c.mean())}
    print(json.dumps(out, ensure_ascii=False, indent=1))
    return out


if __name__ == "__main__":
    sys.exit(run_script(main))
