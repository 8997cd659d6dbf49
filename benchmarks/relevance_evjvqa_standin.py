"""The EVJVQA stand-in for CLinRel and CMedRel: one W2VV++ encoder per language (vi, en, ja), then CMedRel's AUC at
telling each colour answer from the same answer with another colour, per language; prints JSON.

The stand-in is EVJVQA's file layout (``tfds_builders/evjvqa``; tests/e2e/test_evjvqa.py's words) with pictures made
here: 160 train and 32 public-test pictures, each mostly one of 8 colours (plus a strip of another colour and
pixel noise), with one colour question per language whose answer names that colour. It checks the multilingual
path end to end (per-language training, ``vi=...,en=...,ja=...`` scoring); it is far easier than real photos.

Usage: ``python benchmarks/relevance_evjvqa_standin.py --out /tmp/evj`` (three trainings of about a minute each
on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))  # the test tiers' folder, where the stand-in's vocabulary is

from test_evjvqa import COLORS, OBJECTS  # noqa: E402

from openvivqa_jax import paths  # noqa: E402
from openvivqa_jax.cli import run_script  # noqa: E402

#: The path flags (openvivqa_jax.paths), checked before anything is written; a rerun reuses what is there.
PATH_FLAGS = {"--out": paths.OUTPUT_DIR}

RGB = {"red": (215, 25, 30), "blue": (25, 70, 210), "green": (30, 150, 50), "yellow": (250, 220, 0),
       "white": (248, 248, 248), "black": (20, 20, 20), "brown": (120, 70, 25), "pink": (255, 125, 195)}
JA_Q = "写真の{o}は何色ですか？"


def write_standin(man: Path) -> None:
    """Writes ``evjvqa_train.json`` / ``evjvqa_public_test.json`` and their pictures under ``man``."""
    rng = random.Random(0)
    objs = list(OBJECTS.items())

    def make(split, folder, n, start_q):
        (man / folder).mkdir(parents=True, exist_ok=True)
        images, anns = [], []
        q = start_q
        cols = list(COLORS)
        for i in range(n):
            c = cols[i % len(cols)]
            o_en, (o_vi, o_ja) = objs[rng.randrange(len(objs))]
            px = np.full((48, 64, 3), RGB[c], np.float32)
            bg = RGB[cols[rng.randrange(len(cols))]]
            px[:, : rng.randrange(8, 24)] = bg  # a strip of another colour
            px += np.random.default_rng(i).normal(0, 12, px.shape)
            Image.fromarray(np.clip(px, 0, 255).astype(np.uint8)).save(man / folder / f"{i:05d}.jpg")
            images.append({"id": i, "filename": f"{i:05d}.jpg"})
            c_vi, c_ja = COLORS[c]
            for lang, qu, a in [("en", f"what color is the {o_en}?", f"the {o_en} is {c}"),
                                ("vi", f"{o_vi} có màu gì?", f"{o_vi} có màu {c_vi}"),
                                ("ja", JA_Q.format(o=o_ja), f"{o_ja}は{c_ja}です")]:
                anns.append({"id": q, "image_id": i, "question": qu, "answer": a, "language": lang})
                q += 1
        (man / f"evjvqa_{split}.json").write_text(
            json.dumps({"images": images, "annotations": anns}, ensure_ascii=False), encoding="utf-8")
    make("train", "train-images", 160, 1000)
    make("public_test", "public-test-images", 32, 90000)


def train(out_dir: Path, lang: str) -> None:
    """Trains the W2VV++ encoder of one language on the stand-in in ``out_dir`` through the main entry point."""
    man = out_dir / "manual"
    cmd = [sys.executable, "-m", "openvivqa_jax.main", "--config", str(ROOT / "configs/relevance/w2vvpp.py"),
           "--workdir", str(out_dir / f"w2vvpp_{lang}"), "--config.data.builder=evjvqa",
           "--config.data.builder_config=default", f"--config.data.manual_dir={man}",
           f"--config.data.data_dir={out_dir / 'tfds'}", "--config.data.train_split=train[:90%]",
           "--config.data.eval_split=train[90%:]", f"--config.data.language={lang}", "--config.visual.source=cnn",
           "--config.visual.pool_grid=(1,1)", "--config.data.image_size=(64,48)",
           "--config.visual.cnn_channels=(16,32)",
           "--config.train.batch_size=16", "--config.train.num_train_steps=400",
           "--config.train.sum_negatives_steps=400", "--config.train.eval_every_steps=100"]
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    subprocess.run(cmd, check=True, env=env, cwd=ROOT, stdout=sys.stderr)  # stdout: the JSON only


def probe(out_dir: Path) -> dict:
    """CMedRel's AUC (right colour against a wrong one) and retrieval recall per language of the trained
    encoders."""
    import ml_collections

    from openvivqa_jax.data import datasets, pipeline
    from openvivqa_jax.evaluation import evaluator
    from openvivqa_jax.evaluation import relevance as rel

    man = out_dir / "manual"
    W = {L: str(out_dir / f"w2vvpp_{L}") for L in ("vi", "en", "ja")}
    enc = rel.load_models(",".join(f"{k}={v}" for k, v in W.items()))
    cfg = ml_collections.ConfigDict(dict(builder="evjvqa", builder_config="default", data_dir=str(out_dir / "tfds"),
                                         manual_dir=str(man), builder_kwargs={}))
    recs = pipeline.read_records(pipeline.load_source(datasets.load_builder(cfg), "test"), "test")
    names = {"en": list(COLORS), "vi": [v[0] for v in COLORS.values()], "ja": [v[1] for v in COLORS.values()]}
    out: dict = {}
    for L in ("vi", "en", "ja"):
        e = enc[L]
        feats = e.image_features()
        rr, rw, lw = [], [], []
        for r in [r for r in recs if r.extra.get("language") == L]:
            a = r.answers[0]
            c = next(c for c in sorted(names[L], key=len, reverse=True) if c in a)
            wrong = [a.replace(c, o) for o in names[L] if o != c and o not in c and c not in o]
            n = 1 + len(wrong)
            s = rel.cmedrel({L: e}, [a, *wrong], np.stack([feats[r.image_id]] * n), [L] * n)
            rr += [s[0]] * len(wrong)
            rw += list(s[1:])
            lw += list(rel.clinrel({L: e}, wrong, [[a]] * len(wrong), [L] * len(wrong)))
        rr, rw = np.array(rr), np.array(rw)
        out[L] = {"questions": len([r for r in recs if r.extra.get("language") == L]), "pairs": len(rr),
                  "CMedRel_auc_wrong_colour": float(np.mean((rr > rw) + 0.5 * (rr == rw))),
                  "CLinRel_wrong_colour_mean": float(np.mean(lw))}
    # the evaluator with all three encoders: right answers as predictions
    preds = {r.question_id: r.answers[0] for r in recs}
    res = evaluator.score(preds, {r.question_id: r.answers for r in recs}, None, ["CLinRel", "CMedRel"],
                          fields={"language": {r.question_id: r.extra["language"] for r in recs}},
                          relevance=rel.RelevanceInputs(models=enc,
                                                        image_ids={r.question_id: r.image_id for r in recs}))
    out["evaluator_right_answers"] = {
        "overall": res["overall"],
        "by_language": {k: {m: v.get(m) for m in ("CLinRel", "CMedRel")}
                        for k, v in res["by_field"]["language"].items()}}
    for L in ("vi", "en", "ja"):
        with open(Path(W[L]) / "eval" / "test_retrieval.json", encoding="utf-8") as f:
            out[L]["test_retrieval"] = json.load(f)
    return out


def main(argv=None) -> None:
    """Builds the three-language stand-in, trains one encoder per language and prints the probe's JSON."""
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    paths.check_args(args, PATH_FLAGS)
    out_dir = Path(args.out)
    if not (out_dir / "manual" / "evjvqa_train.json").exists():
        write_standin(out_dir / "manual")
    for lang in ("vi", "en", "ja"):
        if not (out_dir / f"w2vvpp_{lang}" / "eval" / "test_retrieval.json").exists():
            train(out_dir, lang)
    print(json.dumps(probe(out_dir), ensure_ascii=False, indent=1))


if __name__ == "__main__":
    sys.exit(run_script(main))
