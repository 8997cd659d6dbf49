"""The ST-VQA, TextVQA and ViVQA configs train and evaluate on small files in the published formats; constrained
(dictionary) decoding; bad rows through `main` (`tfds build` from the command line: tests/e2e/test_tfds_cli.py).

The end-to-end tests run ``python -m openvivqa_jax.main`` in a subprocess with tiny command-line overrides, as a
user would; datasets without the config's dev split get ``--config.data.eval_split`` overrides.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
from flax import nnx

from conftest import ROOT, load_config, random_batch, subprocess_env, tiny_model_config, write_jpeg, write_json
from openvivqa_jax.vqa import decoding
from openvivqa_jax.data import pipeline
from openvivqa_jax.models import build_model
from openvivqa_jax.text.tokenizer import Tokenizer, train_sentencepiece

PY = sys.executable
EOS = 3


# ============================================================================ files in the published formats


STVQA_WORDS = ["nokia", "exit", "stop", "coca", "cola", "sale", "open", "pizza"]
STVQA_TEST_DICT = ["pizza", "open", "sale"]
STVQA_TEST_OCR = ["pizza", "zzz"]


def make_stvqa(m: Path) -> Path:
    """ST-VQA task 1: 10 train questions, 3 test questions (no answers) with 3-word dictionaries, ocr.json."""
    train, test, ocr = [], [], {}
    for i in range(10):
        fp = f"coco-text/COCO_train2014_{i:012d}.jpg"
        write_jpeg(m / fp, color=(20 * i, 50, 90))
        w = STVQA_WORDS[i % len(STVQA_WORDS)]
        train.append({"file_path": fp, "question": f"What is written on sign {i}?", "answers": [w.upper(), w],
                      "question_id": i + 1, "dictionary": [w, "hello", "world"], "set_name": "train"})
        ocr[fp] = [{"text": w, "box": [0.1, 0.1, 0.4, 0.3], "score": 0.9},
                   {"text": "xyz", "box": [0.5, 0.5, 0.9, 0.9], "score": 0.8}]
    for i in range(3):
        fp = f"vizwiz/v_{i}.jpg"
        write_jpeg(m / "test_images" / fp, color=(5, 200, 20 * i))
        test.append({"file_path": fp, "question": "What brand?", "question_id": 100 + i,
                     "dictionary": STVQA_TEST_DICT})
        ocr[fp] = [{"text": t, "box": [0.1 + 0.4 * j, 0.1, 0.4 + 0.4 * j, 0.3], "score": 0.9}
                   for j, t in enumerate(STVQA_TEST_OCR)]
    write_json(m / "train_task_1.json", {"dataset_name": "ST-VQA", "data": train})
    write_json(m / "test_task_1.json", {"dataset_name": "ST-VQA", "data": test})
    write_json(m / "ocr.json", ocr)
    return m


def make_textvqa(m: Path) -> Path:
    """TextVQA 0.5.1: 8 train, 3 val, 2 test questions (10 answers each, none for test) and Rosetta OCR files."""
    def rosetta(words, k):
        return [{"word": w, "bounding_box": {"top_left_x": 0.1 * j, "top_left_y": 0.05 * k, "width": 0.1,
                                             "height": 0.1, "rotation": 0}} for j, w in enumerate(words)]

    for split, n in (("train", 8), ("val", 3), ("test", 2)):
        folder = "test_images" if split == "test" else "train_images"
        data, ocr = [], []
        for i in range(n):
            image_id = f"{split}{i:04d}"
            write_jpeg(m / folder / f"{image_id}.jpg", color=(30 * i, 90, 10))
            words = [STVQA_WORDS[(i + k) % len(STVQA_WORDS)] for k in range(3)]
            rec = {"question_id": len(data) + {"train": 0, "val": 100, "test": 200}[split], "image_id": image_id,
                   "question": f"What does the {i}th sign say?", "image_classes": ["Sign"], "set_name": split}
            if split != "test":
                rec["answers"] = [words[0]] * 7 + [words[1]] * 2 + ["unanswerable"]
            data.append(rec)
            ocr.append({"image_id": image_id, "ocr_tokens": words, "ocr_info": rosetta(words, i)})
        write_json(m / f"TextVQA_0.5.1_{split}.json", {"dataset_name": "textvqa", "dataset_split": split, "data": data})
        write_json(m / f"TextVQA_Rosetta_OCR_v0.2_{split}.json", {"dataset_name": "textvqa", "data": ocr})
    return m


VIVQA_QA = [("màu của chiếc bình là gì", "màu xanh lá"), ("màu của con mèo là gì", "màu xám"),
            ("có bao nhiêu con chó", "hai"), ("con mèo ở đâu", "trên giường"),
            ("màu của áo thun là gì", "màu trắng"), ("cái gì ở trên bàn", "cái bình")]


def make_vivqa(m: Path, n_train: int = 10, bad_row: str | None = None) -> Path:
    """ViVQA CSVs ``,question,answer,img_id,type`` (``n_train`` train rows + ``bad_row`` as row 3, 4 test rows)
    and COCO-named JPEGs (even ids train2014, odd ids val2014)."""
    def rows(n, start):
        out = []
        for i in range(n):
            q, a = VIVQA_QA[(start + i) % len(VIVQA_QA)]
            out.append(f"{i},{q},{a},{start + i + 1},{(start + i) % 4}")
        return out

    train = rows(n_train, 0)
    if bad_row is not None:
        train.insert(3, bad_row)
    for name, lines in (("train.csv", train), ("test.csv", rows(4, 100))):
        (m / name).parent.mkdir(parents=True, exist_ok=True)
        (m / name).write_text(",question,answer,img_id,type\n" + "".join(x + "\n" for x in lines), encoding="utf-8")
        for line in lines:
            try:
                img_id = int(line.split(",")[3])
            except (ValueError, IndexError):
                continue
            folder, prefix = ("train2014", "COCO_train2014") if img_id % 2 == 0 else ("val2014", "COCO_val2014")
            write_jpeg(m / folder / f"{prefix}_{img_id:012d}.jpg", color=(img_id * 7 % 255, 80, 160))
    return m


def make_viquad(m: Path) -> Path:
    """SQuAD v1.1 JSON: train (2 questions, one with two answers) and dev (1 question)."""
    write_json(m / "train_ViQuAD.json", {"version": "1.1", "data": [{"title": "Hà Nội", "paragraphs": [{
        "context": "Hà Nội là thủ đô của Việt Nam. Thành phố nằm bên sông Hồng.",
        "qas": [{"id": "uit_1", "question": "Thủ đô của Việt Nam là gì?",
                 "answers": [{"text": "Hà Nội", "answer_start": 0}]},
                {"id": "uit_2", "question": "Thành phố nằm bên sông nào?",
                 "answers": [{"text": "sông Hồng", "answer_start": 49}, {"text": "Hồng", "answer_start": 54}]}]}]}]})
    write_json(m / "dev_ViQuAD.json", {"version": "1.1", "data": [{"title": "Sông", "paragraphs": [{
        "context": "Sông Hồng chảy qua Hà Nội.",
        "qas": [{"id": "uit_9", "question": "Sông nào?", "answers": [{"text": "Sông Hồng", "answer_start": 0}]}]}]}]})
    return m


# ==================================================================================================== recipes


def _config(path: str):
    """``get_config(variant)`` for ``path[:variant]``."""
    from openvivqa_jax.config_files import load_config

    path, _, variant = path.partition(":")
    return load_config(os.path.join(ROOT, path), *([variant] if variant else []))


@pytest.mark.parametrize("path", ["configs/stvqa/m4c.py:task1", "configs/stvqa/m4c.py:task2",
                                  "configs/stvqa/m4c.py:task3", "configs/textvqa/m4c.py"])
def test_m4c_recipe(path):
    from openvivqa_jax.training.state import make_schedule

    c = _config(path)
    t = c.train
    assert (c.model.name, t.optimizer, t.learning_rate, t.schedule, t.warmup_steps) == ("m4c", "adam", 1e-4, "m4c", 1000)
    assert (tuple(t.decay_steps), t.decay_factor, t.num_train_steps) == ((14_000, 19_000), 0.1, 24_000)
    assert (t.batch_size, t.grad_clip_norm, c.model.max_answer_len, t.loss) == (128, 0.25, 12, "bce")
    # The schedule itself, by hand: linear warmup 2e-5 -> 1e-4 over 1,000 steps, then x0.1 at 14k and 19k.
    sched = make_schedule(t, c.model.d_model)
    for step, lr in [(0, 2e-5), (500, 6e-5), (1000, 1e-4), (13_999, 1e-4), (14_000, 1e-5), (18_999, 1e-5),
                     (19_000, 1e-6), (23_999, 1e-6)]:
        assert float(sched(step)) == pytest.approx(lr, rel=1e-5), step
    if "stvqa" in path:
        assert (t.best_metric, c.eval.metrics[0], c.data.builder) == ("ANLS", "ANLS", "st_vqa")
        assert c.data.decode_dictionary == {"task1": "per_image", "task2": "global", "task3": "none"}[path[-5:]]
        assert c.data.builder_config == path[-5:]
    else:
        assert (t.best_metric, c.eval.metrics[0], c.data.builder) == ("VQA-accuracy", "VQA-accuracy", "textvqa")
        assert (c.data.train_split, c.data.eval_split, c.data.test_split) == ("train", "val", "test")
    assert {"BLEU-4", "ROUGE-L", "CIDEr"} <= set(c.eval.metrics)


@pytest.mark.parametrize("path,kind", [("configs/vivqa/mlpag.py", True), ("configs/vivqa/saaa.py", False)])
def test_vivqa_configs(path, kind):
    from openvivqa_jax.models import model_class

    c = _config(path)
    assert model_class(c.model.name).is_generator is kind
    assert (c.data.builder, c.train.best_metric, c.eval.metrics[0]) == ("vivqa", "EM", "EM")
    assert (c.data.train_split, c.data.eval_split, c.data.test_split) == ("train[:90%]", "train[90%:]", "test")


def test_best_metric_must_be_computed(tmp_path):
    from openvivqa_jax.vqa.experiment import create_experiment

    c = load_config("configs/tiny.py")
    c.train.best_metric = "ANLS"
    with pytest.raises(ValueError, match=r"train.best_metric 'ANLS' is not among the computed eval.metrics"):
        create_experiment(c, str(tmp_path))


# ========================================================================================= constrained decoding


def _allowed(batch_size: int, E: int, ids_per_row) -> np.ndarray:
    a = np.zeros((batch_size, E), bool)
    for r, ids in enumerate(ids_per_row):
        a[r, list(ids)] = True
    return a


@pytest.mark.slow  # 10-30 s on 2 cores: left to the full suite
def test_constrained_search_emits_only_allowed_ids_without_recompiling():
    V = 30
    cfg = tiny_model_config("mlpag")
    N, T = cfg.model.num_ocr, cfg.model.max_answer_len
    model = build_model(cfg.model, V, seed=0)
    graphdef, params = nnx.split(model, nnx.Param)
    beam = decoding.make_decode_fn(graphdef, max_len=T, beam_size=3)
    greedy = decoding.make_decode_fn(graphdef, max_len=T, method="greedy")
    rng = np.random.default_rng(0)
    for seed in range(3):
        batch = random_batch(cfg, V, batch=3, seed=seed)
        rows = [set(rng.choice(np.arange(4, V + N), size=2, replace=False).tolist()) | {EOS} for _ in range(3)]
        batch["allowed_vocab"] = _allowed(3, V + N, rows)
        for fn in (beam, greedy):
            ids = np.asarray(fn(params, batch)[0])
            for r in range(3):
                assert set(ids[r].tolist()) - {0} <= rows[r], (seed, r, ids[r], rows[r])
    assert beam._cache_size() == 1 and greedy._cache_size() == 1
    # An all-true mask changes nothing.
    batch = random_batch(cfg, V, batch=3, seed=7)
    free = np.asarray(beam(params, batch)[0])
    batch["allowed_vocab"] = np.ones((3, V + N), bool)
    np.testing.assert_array_equal(np.asarray(beam(params, batch)[0]), free)


@pytest.mark.slow
def test_constrained_wide_beam_is_the_exhaustive_best_over_allowed_sequences():
    """With beam width >= the search space, constrained beam search returns the best sequence built from allowed
    ids, each step's log-probability renormalized over the allowed ids (scored here by full recompute)."""
    import itertools

    V, N, T = 7, 2, 3
    cfg = tiny_model_config("mlpag")
    cfg.model.max_answer_len, cfg.model.num_ocr = T, N
    allowed_ids = [EOS, 4, 6, V + 1]  # two pieces and OCR slot 1
    for seed in range(1):
        model = build_model(cfg.model, V, seed=seed)
        batch = random_batch(cfg, V, batch=1, seed=seed)
        non_eos = [i for i in allowed_ids if i != EOS]
        seqs = [list(p) + [EOS] for k in range(T) for p in itertools.product(non_eos, repeat=k)]
        seqs += [list(p) for p in itertools.product(non_eos, repeat=T)]
        tiled = {k: np.repeat(v, len(seqs), axis=0) for k, v in batch.items()}
        dec_in = np.zeros((len(seqs), T), np.int32)
        for i, s in enumerate(seqs):
            dec_in[i, 0] = 2
            dec_in[i, 1:len(s)] = s[:-1][: T - 1]
        tiled["decoder_in"] = dec_in
        logits = np.asarray(model(tiled), np.float64)[..., allowed_ids]
        logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
            - logits.max(-1, keepdims=True)
        col = {tok: j for j, tok in enumerate(allowed_ids)}
        scores = [sum(logp[i, t, col[tok]] for t, tok in enumerate(s)) for i, s in enumerate(seqs)]
        best = int(np.argmax(scores))
        batch["allowed_vocab"] = _allowed(1, V + N, [allowed_ids])
        ids, score, _, _ = decoding.beam_search(model, batch, max_len=T, beam_size=64)
        assert [int(i) for i in np.asarray(ids[0]) if i != 0] == seqs[best]
        assert float(score[0]) == pytest.approx(scores[best], abs=1e-4)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("spm") / "spm.model")
    sents = ["what is written on the sign ?", "nokia exit stop coca cola sale open pizza", "hello world"] * 20
    train_sentencepiece(sents, path, 300)
    return Tokenizer(path)


def _record(dictionary, ocr_texts):
    return pipeline.Record(index=0, question_id="q1", image_id="i1", question="what brand ?", answers=["pizza"],
                           qa_type=1, ocr_texts=list(ocr_texts), ocr_boxes=np.zeros((len(ocr_texts), 4), np.float32),
                           extra={} if dictionary is None else {"dictionary": [w.encode() for w in dictionary]})


def _pre(tokenizer, mode, **data):
    cfg = tiny_model_config("m4c")
    cfg.model.num_ocr = 4
    cfg.model.vision.kind = "region"
    cfg.model.vision.num_regions, cfg.model.vision.region_dim = 2, 8
    with cfg.unlocked():
        cfg.data.decode_dictionary = mode
        for k, v in data.items():
            cfg.data[k] = v
    return pipeline.Preprocessor(cfg, tokenizer)


def test_preprocessor_allowed_vocab(tokenizer, tmp_path):
    sp = spm.SentencePieceProcessor(model_file=tokenizer.model_path)  # the pieces, independently of the pipeline
    V = sp.get_piece_size()
    pre = _pre(tokenizer, "per_image")
    rec = _record(["pizza", "open", "coca - cola"], ["pizza", "zzz", "coca", "open sale"])
    f = pre.features(rec, "pizza", for_decoding=True)
    a = f["allowed_vocab"]
    assert a.shape == (V + 4,) and a.dtype == bool
    expected = {EOS} | {p for w in ["pizza", "open", "coca - cola"] for p in sp.encode(w)}
    assert set(np.flatnonzero(a[:V]).tolist()) == expected
    # OCR slots: an entry ("pizza") or made of entry words ("coca"); not "zzz", not "open sale" ("sale" is no word).
    assert a[V:].tolist() == [True, False, True, False]
    assert "allowed_vocab" not in pre.features(rec, "pizza")  # training batches do not carry it
    # No dictionary: unconstrained, and counted.
    free = pre.features(_record(None, ["pizza"]), None, for_decoding=True)["allowed_vocab"]
    assert free.all() and pre.counter.counts["decode_dictionary_missing"] == 1
    # 'global' from a file (normalized, one entry a line) overrides the examples' dictionaries.
    (tmp_path / "global.txt").write_text("OPEN\n\nzzz\n", encoding="utf-8")
    g = _pre(tokenizer, "global", global_dictionary_file=str(tmp_path / "global.txt"))
    a = g.features(rec, None, for_decoding=True)["allowed_vocab"]
    assert set(np.flatnonzero(a[:V]).tolist()) == {EOS} | set(sp.encode("open")) | set(sp.encode("zzz"))
    assert a[V:].tolist() == [False, True, False, False]


def test_dictionary_errors(tokenizer, tmp_path):
    with pytest.raises(ValueError, match="decode_dictionary must be 'none', 'per_image' or 'global'"):
        _pre(tokenizer, "task1")
    bad = tmp_path / "dict.json"
    bad.write_text('["open", 3]', encoding="utf-8")
    with pytest.raises(pipeline.DatasetError, match=r"dict\.json: entry 1 is a number"):
        _pre(tokenizer, "global", global_dictionary_file=str(bad))
    cfg = tiny_model_config("saaa")
    with cfg.unlocked():
        cfg.data.decode_dictionary = "per_image"
    from openvivqa_jax.text.answer_list import AnswerList
    with pytest.raises(ValueError, match="model 'saaa' is a classifier"):
        pipeline.Preprocessor(cfg, tokenizer, answer_list=AnswerList.build(["a"], 1))


# ================================================================================================ main, end to end


TINY = ["--config.model.d_model=32", "--config.model.num_heads=2", "--config.model.ffn_dim=64",
        "--config.model.vision.cnn_channels=(8, 16)", "--config.data.image_size=(32, 24)",
        "--config.tokenizer.vocab_size=300", "--config.train.batch_size=2", "--config.train.num_train_steps=2",
        "--config.train.eval_every_steps=2", "--config.train.checkpoint_every_steps=2",
        "--config.train.log_every_steps=1", "--config.eval.batch_size=2", "--config.eval.beam_size=2"]
TINY_M4C = ["--config.model.num_text_layers=1", "--config.model.num_mmt_layers=1", "--config.model.num_ocr=4"]
TINY_MLPAG = ["--config.model.num_fusion_layers=1", "--config.model.num_decoder_layers=1", "--config.model.num_ocr=4"]
TINY_SAAA = ["--config.model.word_dim=16", "--config.model.lstm_dim=24", "--config.model.attention_dim=16",
             "--config.model.classifier_dim=24", "--config.model.num_ocr=4"]


def run_main(config: str, workdir: Path, manual_dir: Path, data_dir: Path, *overrides: str):
    cmd = [PY, "-m", "openvivqa_jax.main", f"--config={config}", f"--workdir={workdir}",
           f"--config.data.manual_dir={manual_dir}", f"--config.data.data_dir={data_dir}", *TINY, *overrides]
    return subprocess.run(cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=900)


def _read(workdir: Path, role: str):
    """The metrics and predictions files of ``role`` (``dev``: data.eval_split; ``test``: data.test_split)."""
    metrics = json.loads((workdir / "eval" / f"{role}_metrics.json").read_text(encoding="utf-8"))
    preds = json.loads((workdir / "eval" / f"{role}_predictions.json").read_text(encoding="utf-8"))
    return metrics, preds


def _trained(workdir: Path) -> list[dict]:
    recs = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    train = [r for r in recs if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2] and all(np.isfinite(r["loss"]) for r in train)
    # The speed of each interval: training steps per second and the share of it spent waiting for batches.
    assert all(r["steps_per_sec"] > 0 and 0.0 <= r["input_wait"] <= 1.0 for r in train)
    # The process's CPU minutes, which only grow.
    assert 0 < train[0]["cpu_minutes"] <= train[1]["cpu_minutes"]
    return recs


def _train(tmp_path: Path, manual: Path, config: str, *overrides: str):
    """Runs ``config`` through ``main`` on the files in ``manual`` (workdir ``tmp_path/run``), checks that it
    succeeded and trained (``_trained``). Returns the workdir, the finished process and the metrics records."""
    wd = tmp_path / "run"
    res = run_main(config, wd, manual, tmp_path / "tfds", *overrides)
    assert res.returncode == 0, res.stderr[-4000:]
    return wd, res, _trained(wd)


@pytest.mark.slow
def test_stvqa_task1_m4c_trains_and_decodes_within_the_dictionaries(tmp_path):
    wd, _, _ = _train(tmp_path, make_stvqa(tmp_path / "stvqa"), "configs/stvqa/m4c.py:task1", *TINY_M4C)
    # Dev = the held-out tail of train (train[90%:] of 10 questions: one, in TFDS's stored order), scored with ANLS.
    dev, dev_preds = _read(wd, "dev")
    assert len(dev_preds) == 1
    word = STVQA_WORDS[(int(dev_preds[0]["question_id"]) - 1) % len(STVQA_WORDS)]
    assert dev_preds[0]["references"] == [word, word]
    assert set(dev["metrics"]) == {"ANLS", "BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "ROUGE-L", "CIDEr"}
    assert 0.0 <= dev["overall"]["ANLS"] <= 1.0
    assert dev["num_questions"]["text_qa"] == 1
    # Test: decoded (no references, so no scores), every prediction made of allowed pieces / OCR slots.
    test, preds = _read(wd, "test")
    assert sorted(p["question_id"] for p in preds) == ["100", "101", "102"]
    assert test["num_questions"]["overall"] == 0 and test["overall"]["ANLS"] is None
    allowed_chars = set("".join(STVQA_TEST_DICT)) | set(STVQA_TEST_OCR[0]) | {" "}
    for p in preds:
        assert set(p["prediction"]) <= allowed_chars, p


@pytest.mark.slow
def test_textvqa_m4c_trains_and_scores_vqa_accuracy(tmp_path):
    wd, _, recs = _train(tmp_path, make_textvqa(tmp_path / "textvqa"), "configs/textvqa/m4c.py", *TINY_M4C)
    val, preds = _read(wd, "dev")
    assert sorted(p["question_id"] for p in preds) == ["100", "101", "102"]
    assert all(len(p["references"]) == 10 for p in preds)
    assert {"VQA-accuracy", "ANLS", "CIDEr"} <= set(val["metrics"])
    # The official rule by hand (mean over the 10 leave-one-out subsets of 9 answers of min(matches / 3, 1)):
    # words[0] (7 of 10 answers) -> 1; words[1] (2 of 10) -> (2 * 1/3 + 8 * 2/3) / 10 = 0.6;
    # "unanswerable" (1 of 10) -> 9 * (1/3) / 10 = 0.3; anything else 0.
    by_id = {p["question_id"]: p["prediction"] for p in preds}
    acc = []
    for i in range(3):
        table = {STVQA_WORDS[i % 8]: 1.0, STVQA_WORDS[(i + 1) % 8]: 0.6, "unanswerable": 0.3}
        acc.append(table.get(by_id[str(100 + i)], 0.0))
    expected = np.mean(acc)
    assert val["overall"]["VQA-accuracy"] == pytest.approx(expected, abs=1e-9)
    assert any(r["kind"] == "eval" and "dev/VQA-accuracy" in r for r in recs)
    _, test_preds = _read(wd, "test")
    assert sorted(p["question_id"] for p in test_preds) == ["200", "201"]


@pytest.mark.slow
def test_vivqa_mlpag_trains_and_scores_exact_match(tmp_path):
    wd, _, _ = _train(tmp_path, make_vivqa(tmp_path / "vivqa"), "configs/vivqa/mlpag.py", *TINY_MLPAG)
    dev, dev_preds = _read(wd, "dev")
    assert len(dev_preds) == 1  # one of 10 rows, in TFDS's stored order
    answer = VIVQA_QA[int(dev_preds[0]["question_id"]) % len(VIVQA_QA)][1]
    assert dev_preds[0]["references"] == [answer]
    assert dev["overall"]["EM"] == (1.0 if dev_preds[0]["prediction"] == answer else 0.0)
    test, preds = _read(wd, "test")
    assert len(preds) == 4 and {"EM", "F1", "CIDEr"} <= set(test["metrics"])
    em = np.mean([p["prediction"] == p["references"][0] for p in preds])
    assert test["overall"]["EM"] == pytest.approx(em)


@pytest.mark.slow
def test_vivqa_saaa_skips_a_bad_row_counted_through_a_json_builder_config(tmp_path):
    manual = make_vivqa(tmp_path / "vivqa", bad_row="3,màu gì,màu đỏ,abc,2")
    skip = '{"name": "skip_bad_rows", "ocr_engine": "none", "skip_invalid_records": true}'
    wd, res, _ = _train(tmp_path, manual, "configs/vivqa/saaa.py", *TINY_SAAA,
                        f"--config.data.builder_config={skip}", "--config.data.eval_split=train")
    # The skip is named (file, line, row) and counted in the build log, not dropped silently.
    assert "vivqa/train: skipped (invalid_record)" in res.stderr
    assert "train.csv: line 5 (row 3): img_id 'abc' is not an integer COCO id" in res.stderr
    assert "kept 10 examples, skipped {'invalid_record': 1}" in res.stderr
    train, preds = _read(wd, "dev")  # data.eval_split=train
    assert len(preds) == 10 and "EM" in train["metrics"]
    answers = json.loads((wd / "answers.json").read_text(encoding="utf-8"))
    assert answers  # the classifier's answer list, from the train split


@pytest.mark.slow
def test_bad_row_stops_main_with_file_and_row(tmp_path):
    manual = make_vivqa(tmp_path / "vivqa", bad_row="3,màu gì,màu đỏ,abc,2")
    res = run_main("configs/vivqa/mlpag.py", tmp_path / "run", manual, tmp_path / "tfds", *TINY_MLPAG)
    assert res.returncode != 0
    assert f"{manual / 'train.csv'}: line 5 (row 3): img_id 'abc' is not an integer COCO id" in res.stderr
    assert "DatasetInputError" in res.stderr


# ============================================================================== ViQuAD: evaluation only


def test_viquad_is_scored_by_the_evaluate_command_line(tmp_path, capsys):
    """ViQuAD has no training config (no extractive reader here); its predictions are scored from the SQuAD
    v1.1 file: EM/F1 and the human-performance protocol. Values by hand:
    uit_1 "Hà Nội" = "hà nội": EM 1, F1 1; uit_2 "sông" vs {"sông hồng", "hồng"}: EM 0, F1 max(2/3, 0) = 2/3.
    Human (uit_2 only, two answers): "sông hồng" vs "hồng" and back, each EM 0, F1 2 * (1/2 * 1) / (3/2) = 2/3."""
    from openvivqa_jax import evaluate

    manual = make_viquad(tmp_path / "viquad")
    preds = tmp_path / "preds.json"
    preds.write_text(json.dumps({"uit_1": "Hà Nội", "uit_2": "sông"}, ensure_ascii=False), encoding="utf-8")
    code = evaluate.run(["--predictions", str(preds), "--references", str(manual / "train_ViQuAD.json"),
                         "--metrics", "EM,F1"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["overall"]["EM"] == pytest.approx(0.5)
    assert out["overall"]["F1"] == pytest.approx((1 + 2 / 3) / 2)
    hp = out["human_performance"]["overall"]
    assert (hp["EM"], hp["F1"], hp["num_questions"]) == (0.0, pytest.approx(2 / 3), 1)
