"""Learnability: a tiny MLPAG learns a non-text question kind of the synthetic set above its chance rate.

Chance is computed from the data: the best a model that reads only the question can do on the held-out
questions, i.e. for each held-out question string, the most frequent training answer of that string (the
most frequent answer of the kind when the string never occurs in training).

``test_tiny_region_mlpag_learns_object_colours``: the tiny model (``configs/synthetic/mlpag_regions_tiny.py``:
d_model 32, one decoder layer, the oracle detector's region features, the question grounded in the image by
``model.question_over_image`` and given to the decoder by ``model.question_in_memory``) trained on the colour
questions only (``data.train_kinds``) of 3,000 pictures for 1,500 steps of batch 32 answers the object colour of
held-out pictures far above chance. Measured here: 72.6% (61 of 84 test questions) exact, against 14.3% for the
same run without the two options (the paper's MLPAG memory; docs/evaluation.md, "Non-text questions"). The
kind is learned after a plateau at chance whose length is set by the number of that kind's training examples,
which is why the test trains on one kind: in the mixed default job the object kinds stay at chance (README).

``test_tiny_mlpag_learns_shop_count_above_chance`` (strict expected failure): the tiny pixel-CNN MLPAG trained on
every kind for 400 steps answers ``shop_count`` (``có bao nhiêu cửa hàng ?``, answer ``có <một|hai|ba> cửa
hàng``, the number of signboards, never written in the question) at its chance rate: 10 of 23 held-out
questions, 43.5%, exactly the question-only chance of 43.5% (also after 1,500 steps of batch 16, and with
d_model 64 after 500 steps of batch 32: 21.7%). The default job's model (d_model 128, 2,000 steps) does learn
the kind: 88.2% mean over three seeds (README). Once the small model learns it, pytest reports the unexpected
pass as a failure and the marker has to go.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter, defaultdict

import pytest

from conftest import ROOT, subprocess_env

PY = sys.executable

#: Images of the learnability set (64x48 like configs/tiny.py, no OCR noise). The name must differ from the
#: builder's registered configs (a JSON builder config, see openvivqa_jax.data.pipeline.get_builder).
BUILDER_CONFIG = {"name": "learnability", "num_train_images": 400, "num_validation_images": 10,
                  "num_test_images": 150, "image_size": [64, 48], "ocr_drop_prob": 0.0, "ocr_sub_prob": 0.0,
                  "ocr_box_jitter": 0.0}
TRAIN_STEPS = 400
KIND = "shop_count"


def question_only_chance(train: list[tuple[str, str]], held_out: list[tuple[str, str]]) -> float:
    """Accuracy on ``held_out`` (question, answer) pairs of the best question-only predictor fitted on ``train``:
    the most frequent training answer of the same question string, else the most frequent training answer."""
    by_question: dict[str, Counter] = defaultdict(Counter)
    for q, a in train:
        by_question[q][a] += 1
    overall = Counter(a for _, a in train).most_common(1)[0][0]
    hits = sum(a == (by_question[q].most_common(1)[0][0] if q in by_question else overall) for q, a in held_out)
    return hits / len(held_out)


def test_question_only_chance_rule():
    train = [("q1", "a"), ("q1", "a"), ("q1", "b"), ("q2", "b")]
    held = [("q1", "a"), ("q1", "b"), ("q2", "b"), ("q3", "b"), ("q3", "a")]
    # q1 -> a (right once of twice), q2 -> b (right), q3 unseen -> overall majority: a and b tie 2:2 and
    # Counter.most_common keeps first-insertion order on ties, so "a": right once. 3 of 5.
    assert question_only_chance(train, held) == pytest.approx(3 / 5)


#: The region learnability set: 3,000 pictures at the tiny size with the oracle detector's region features.
REGION_BUILDER_CONFIG = {"name": "learnability_regions", "num_train_images": 3000, "num_validation_images": 10,
                         "num_test_images": 150, "image_size": [64, 48], "region_features": True,
                         "ocr_drop_prob": 0.0, "ocr_sub_prob": 0.0, "ocr_box_jitter": 0.0}


def binomial_tail(n: int, k: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1))


def test_binomial_tail():
    assert binomial_tail(2, 1, 0.5) == pytest.approx(0.75)
    assert binomial_tail(3, 3, 0.1) == pytest.approx(0.001)
    assert binomial_tail(5, 0, 0.3) == pytest.approx(1.0)


@pytest.mark.slow
def test_tiny_region_mlpag_learns_object_colours(tmp_path):
    from openvivqa_jax.data import datasets, pipeline
    from openvivqa_jax.config_files import load_config

    wd, data_dir = tmp_path / "run", tmp_path / "tfds"
    cmd = [PY, "-m", "openvivqa_jax.main", "--config=configs/synthetic/mlpag_regions_tiny.py", f"--workdir={wd}",
           f"--config.data.data_dir={data_dir}", f"--config.data.builder_config={json.dumps(REGION_BUILDER_CONFIG)}",
           "--config.data.train_kinds=('colour',)", "--config.train.batch_size=32",
           "--config.train.num_train_steps=1500", "--config.train.warmup_steps=100",
           "--config.train.eval_every_steps=100000", "--config.train.checkpoint_every_steps=100000",
           "--config.data.eval_split=test", "--config.eval.decoding=greedy", "--config.eval.ocr_ablation=False"]
    res = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "training on" in res.stderr and "questions of synthetic_openvivqa/train" in res.stderr  # the subset is logged
    preds = json.loads((wd / "eval" / "test_predictions.json").read_text(encoding="utf-8"))
    held = [(p["question"], p["references"][0], p["prediction"]) for p in preds if p["kind"] == "colour"]

    cfg = load_config("configs/synthetic/mlpag_regions_tiny.py")
    cfg.data.data_dir, cfg.data.builder_config = str(data_dir), json.dumps(REGION_BUILDER_CONFIG)
    builder = datasets.load_builder(cfg.data, prepare=False)
    train = [(r.question, r.answers[0]) for r in pipeline.read_records(pipeline.load_source(builder, "train"))
             if r.kind == "colour"]
    assert len(train) > 1000 and len(held) >= 60, (len(train), len(held))
    chance = question_only_chance(train, [(q, a) for q, a, _ in held])
    hits = sum(pred == ref for _, ref, pred in held)
    # Twelve colours, about evenly drawn: the question alone gives about one in ten.
    assert 0.03 < chance < 0.25, chance
    # Far above chance: at least 40 points, and a binomial tail under 1e-9 at the chance rate.
    assert hits / len(held) >= chance + 0.4, (hits, len(held), chance)
    assert binomial_tail(len(held), hits, chance) < 1e-9


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="the tiny pixel-CNN MLPAG answers non-text kinds at chance (measured "
                   "shop_count 43.5% exact after 400 steps, chance 43.5%, with and without pooled cell pixels)")
def test_tiny_mlpag_learns_shop_count_above_chance(tmp_path):
    from tfds_builders.synthetic_openvivqa import generator

    wd, data_dir = tmp_path / "run", tmp_path / "tfds"
    cmd = [PY, "-m", "openvivqa_jax.main", "--config=configs/tiny.py", f"--workdir={wd}",
           f"--config.data.data_dir={data_dir}", f"--config.data.builder_config={json.dumps(BUILDER_CONFIG)}",
           f"--config.train.num_train_steps={TRAIN_STEPS}", "--config.train.eval_every_steps=100000",
           "--config.train.checkpoint_every_steps=100000", "--config.data.eval_split=test",
           "--config.eval.decoding=greedy", "--config.eval.ocr_ablation=False"]
    subprocess.run(cmd, cwd=ROOT, env=subprocess_env(), check=True, capture_output=True, text=True)
    preds = json.loads((wd / "eval" / "test_predictions.json").read_text(encoding="utf-8"))
    held = [(p["question"], p["references"][0], p["prediction"]) for p in preds if p["kind"] == KIND]

    gen_cfg = generator.GeneratorConfig(**{k: (tuple(v) if isinstance(v, list) else v)
                                           for k, v in BUILDER_CONFIG.items() if k != "name"})
    train = [(ex["question"], ex["answers"][0]) for _, ex in generator.generate_split("train", gen_cfg)
             if ex["kind"] == KIND]
    chance = question_only_chance(train, [(q, a) for q, a, _ in held])
    accuracy = sum(pred == ref for _, ref, pred in held) / len(held)
    # 1-3 signboards (probabilities 0.3 / 0.4 / 0.3): chance is about the share of two-shop pictures.
    assert len(held) >= 20 and 0.25 < chance < 0.6, (len(held), chance)
    # 20 points above chance: about two binomial standard errors at n = 23, p = 0.4.
    assert accuracy >= chance + 0.2, (accuracy, chance, len(held))
