"""``python -m openvivqa_jax.predict``: OCR, answer, provenance of each answer word, pictures, batch mode,
and one-line errors for bad input.

The end-to-end tests share one model trained at module scope (see :func:`trained`)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest
from PIL import Image

from conftest import ROOT, SHARED, build_once, subprocess_env

PY = sys.executable
EXAMPLES = os.path.join(SHARED, "data", "openvivqa_examples")


def _predict(*args, timeout=300):
    return subprocess.run([PY, "-m", "openvivqa_jax.predict", *map(str, args)], cwd=ROOT, env=subprocess_env(),
                          capture_output=True, text=True, timeout=timeout)


# --------------------------------------------------------------------------------------------- bad input
def _png_header_only(path, width, height):
    """A PNG whose header declares ``width x height`` RGB pixels, with almost no pixel data (never decoded)."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                     + chunk(b"IEND", b""))


def _fake_workdir(tmp_path, with_checkpoint_dir=False):
    wd = tmp_path / "wd"
    wd.mkdir()
    (wd / "config.json").write_text('{"model": {"name": "mlpag", "vision": {"kind": "cnn"}}}')
    (wd / "spm.model").write_bytes(b"x")
    if with_checkpoint_dir:
        (wd / "best").mkdir()  # an empty best/ (e.g. a run killed before its first evaluation)
    return wd


@pytest.fixture
def good_image(tmp_path):
    p = tmp_path / "ok.png"
    Image.new("RGB", (64, 48), (200, 30, 30)).save(p)
    return p


def _assert_one_line_error(res, *needles):
    assert res.returncode == 2, (res.returncode, res.stdout[-500:], res.stderr[-2000:])
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr[-3000:]
    assert lines[0].startswith("error: ") and "Traceback" not in res.stderr
    for n in needles:
        assert str(n) in lines[0], (n, lines[0])


def test_non_image_file(tmp_path):
    p = tmp_path / "notes.jpg"
    p.write_text("this is not a picture\n")
    _assert_one_line_error(_predict("--workdir", tmp_path, "--image", p, "--question", "tên gì ?", timeout=60),
                           p, "not a recognised image")


def test_zero_byte_file(tmp_path):
    p = tmp_path / "empty.jpg"
    p.write_bytes(b"")
    _assert_one_line_error(_predict("--workdir", tmp_path, "--image", p, "--question", "tên gì ?", timeout=60),
                           p, "empty file (0 bytes)")


def test_huge_image_refused_from_header(tmp_path):
    p = tmp_path / "huge.png"
    _png_header_only(p, 20000, 20000)
    old, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
    try:
        with Image.open(p) as im:  # the header really declares 20000 x 20000
            assert im.size == (20000, 20000)
    finally:
        Image.MAX_IMAGE_PIXELS = old
    res = _predict("--workdir", tmp_path, "--image", p, "--question", "tên gì ?", timeout=60)
    _assert_one_line_error(res, p, "20000x20000", "400 megapixels", "over the limit")


def test_truncated_image(tmp_path, good_image):
    p = tmp_path / "cut.png"
    p.write_bytes(good_image.read_bytes()[:60])
    _assert_one_line_error(_predict("--workdir", tmp_path, "--image", p, "--question", "tên gì ?", timeout=60),
                           p, "image")


@pytest.mark.parametrize("question", ["", "   \n  "])
def test_empty_question(tmp_path, good_image, question):
    res = _predict("--workdir", tmp_path, "--image", good_image, "--question", question, timeout=60)
    _assert_one_line_error(res, "question is empty")


def test_workdir_without_checkpoint(tmp_path, good_image):
    wd = _fake_workdir(tmp_path, with_checkpoint_dir=True)
    res = _predict("--workdir", wd, "--image", good_image, "--question", "tên gì ?", timeout=60)
    _assert_one_line_error(res, wd, "no checkpoint")


def test_workdir_missing_or_not_a_run(tmp_path, good_image):
    res = _predict("--workdir", tmp_path / "nope", "--image", good_image, "--question", "tên gì ?", timeout=60)
    _assert_one_line_error(res, tmp_path / "nope", "not found")
    res = _predict("--workdir", tmp_path, "--image", good_image, "--question", "tên gì ?", timeout=60)
    _assert_one_line_error(res, tmp_path, "no config.json")


def test_missing_image_and_bad_questions_file(tmp_path):
    _assert_one_line_error(_predict("--workdir", tmp_path, "--image", tmp_path / "x.jpg", "--question", "a ?",
                                    timeout=60), tmp_path / "x.jpg", "file not found")
    q = tmp_path / "q.json"
    q.write_text(json.dumps({"images": {"1": "a.jpg"}, "annotations": {"7": {"image_id": 2, "question": "gì ?"}}}))
    _assert_one_line_error(_predict("--workdir", tmp_path, "--questions", q, "--image_dir", tmp_path, timeout=60),
                           q, "question '7'", "image '2'")


# --------------------------------------------------------------------------------------------- units
def test_read_questions_file_both_layouts(tmp_path):
    from openvivqa_jax.evaluation.questions import read_questions_file

    p = tmp_path / "public.json"
    p.write_text(json.dumps({"images": {"3": "a.jpg"},
                             "annotations": {"11": {"image_id": 3, "question": "Cửa hàng\nnày tên gì?", "answer": "x"}}},
                            ensure_ascii=False))
    assert read_questions_file(str(p), "/imgs") == [
        {"question_id": "11", "image_id": "3", "question": "cửa hàng này tên gì ?", "image_path": "/imgs/a.jpg"}]
    p.write_text(json.dumps({"images": [{"id": 3, "filename": "a.jpg"}],
                             "annotations": [{"id": 11, "image_id": 3, "question": "gì?", "answers": ["x"]}]}))
    assert read_questions_file(str(p), "d")[0]["image_path"] == os.path.join("d", "a.jpg")


def test_batch_images_found_next_to_the_file_or_in_images(tmp_path):
    from openvivqa_jax.evaluation.questions import image_folders, read_questions_file

    p = tmp_path / "test_data.json"
    p.write_text(json.dumps({"images": {"1": "a.jpg", "2": "b.jpg", "3": "c.jpg", "4": "d.jpg"}, "annotations": {
        str(i): {"image_id": i, "question": "gì?"} for i in (1, 2, 3, 4)}}))
    for rel in ("a.jpg", "images/b.jpg", "test_data/c.jpg", "images/a.jpg"):  # a.jpg twice: the first wins
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_bytes(b"x")
    dirs = image_folders(str(p), None)
    assert dirs == [str(tmp_path), str(tmp_path / "images"), str(tmp_path / "test_data")]
    paths = {r["question_id"]: r["image_path"] for r in read_questions_file(str(p), dirs)}
    assert paths == {"1": str(tmp_path / "a.jpg"), "2": str(tmp_path / "images" / "b.jpg"),
                     "3": str(tmp_path / "test_data" / "c.jpg"), "4": str(tmp_path / "d.jpg")}  # 4: not found
    assert image_folders(str(p), "/elsewhere") == ["/elsewhere"]


def test_merge_ocr_passes_dedups_and_orders():
    from openvivqa_jax.predict import merge_ocr_passes

    a = [{"text": "phở", "box": (0.1, 0.1, 0.3, 0.2), "score": 0.7},
         {"text": "đt", "box": (0.1, 0.5, 0.2, 0.6), "score": 0.9}]
    b = [{"text": "phố", "box": (0.11, 0.1, 0.31, 0.21), "score": 0.95},  # same word, read better
         {"text": "hùng", "box": (0.4, 0.12, 0.6, 0.19), "score": 0.8}]   # same line, to the right
    out = merge_ocr_passes([a, b])
    assert [t["text"] for t in out] == ["phố", "hùng", "đt"]


def test_word_provenance_matches_decode(tmp_path):
    """Words from vocabulary runs and copied OCR tokens, joined, are exactly AnswerVocab.decode's answer."""
    from openvivqa_jax.text.answer_vocab import word_provenance
    from openvivqa_jax.text.answer_vocab import AnswerVocab
    from openvivqa_jax.text.tokenizer import train_sentencepiece

    sents = ["cửa hàng này tên là an", "cửa hàng bên trái tên là bình", "giá 25,000 đồng"] * 30
    tok = train_sentencepiece(sents, str(tmp_path / "spm.model"), 300)
    vocab = AnswerVocab(tok, num_ocr=4, max_len=16)
    ocr = [{"text": "phở", "box": (0.1, 0.1, 0.3, 0.2), "score": 0.9},
           {"text": "thiện uyên", "box": (0.2, 0.3, 0.7, 0.4), "score": 0.8}]
    V = tok.vocab_size
    ids = list(tok.encode("cửa hàng này tên là")) + [V + 1] + list(tok.encode("giá")) + [V + 3, tok.eos_id, 0]
    words = word_provenance(ids, vocab, tok, ocr)
    assert " ".join(w["word"] for w in words) == vocab.decode(ids, [t["text"] for t in ocr])
    assert [w["word"] for w in words] == ["cửa", "hàng", "này", "tên", "là", "thiện", "uyên", "giá"]
    assert [w["source"] for w in words] == ["vocab"] * 5 + ["ocr", "ocr", "vocab"]
    assert words[5]["ocr_index"] == 1 and words[5]["box"] == [0.2, 0.3, 0.7, 0.4]
    # Each generated word carries its own pieces, which decode to it; together they are the run's pieces.
    run = list(tok.encode("cửa hàng này tên là"))
    assert sum((w["piece_ids"] for w in words[:5]), []) == run
    for w in words[:5]:
        assert tok.decode(w["piece_ids"]).strip() == w["word"]
    assert words[0]["piece_ids"] == list(tok.encode("cửa")) and words[7]["piece_ids"] == list(tok.encode("giá"))


@pytest.mark.slow  # 10-30 s on 2 cores: left to the full suite
def test_decoder_attention_path_leaves_logits_unchanged():
    """The optional cross-attention return path gives the same logits; each row is a distribution over the
    unmasked memory (masked slots get zero weight)."""
    from flax import nnx

    from conftest import random_batch, tiny_model_config
    from openvivqa_jax.models import build_model

    cfg = tiny_model_config()
    model = build_model(cfg.model, 40)
    batch = random_batch(cfg, 40)
    batch["ocr_mask"][0, 2:] = False
    enc = model.encode(batch)
    enc["memory_mask"] = enc["memory_mask"].at[1, -1].set(False)
    plain = model.decoder(batch["decoder_in"], enc["memory"], enc["memory_mask"], enc["ocr_feats"], enc["ocr_mask"])
    logits, weights = model.decoder(batch["decoder_in"], enc["memory"], enc["memory_mask"], enc["ocr_feats"],
                                    enc["ocr_mask"], return_attention=True)
    # The plain path runs jax.nn.dot_product_attention, the weights path the explicit einsum softmax (the
    # weights are its intermediate): the same maths, float32 rounding apart (1e-5, as tests/unit/test_attention.py).
    np.testing.assert_allclose(np.asarray(plain), np.asarray(logits), rtol=1e-5, atol=1e-5)
    assert len(weights) == cfg.model.num_decoder_layers
    w = np.asarray(weights[0])
    assert w.shape == (2, cfg.model.num_heads, cfg.model.max_answer_len, enc["memory"].shape[1])
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-5)
    assert np.all(w[1, :, :, -1] == 0)
    S = model.vision(batch)["feats"].shape[1]
    assert model.decoder_memory_layout(S, cfg.model.num_ocr) == (0, S)  # eq. 9 sum fusion: cells first
    assert nnx is not None


# --------------------------------------------------------------------------------------------- end to end
TRAIN_STEPS = 1500


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A small MLPAG trained with ``softmax_prefer_copy`` on a 300-image synthetic set (module scope).

    Why this model: on the 40-image tiny set the pointer learns "copy the one unfamiliar word", which any
    unseen word (including Tesseract's misreads of passers-by) satisfies, and two-word names come out
    half-copied. 300 training images, d_model 64 and 2 decoder layers trained for TRAIN_STEPS steps with
    ``softmax_prefer_copy`` (the copy slot is the only target of a copyable word, so names are always
    produced by the pointer network) learn to copy within about a minute of CPU.
    """
    return build_once(tmp_path_factory, "predict_trained", _train_predict_model) / "run"


def _train_predict_model(root):
    """Builds the :func:`trained` fixture's data set and workdir under ``root``."""
    wd, data_dir = root / "run", root / "tfds"
    builder_config = json.dumps({"name": "predict_test", "num_train_images": 300, "num_validation_images": 10,
                                 "num_test_images": 10})
    cmd = [PY, "-m", "openvivqa_jax.main", "--config=configs/tiny.py", f"--workdir={wd}",
           f"--config.data.data_dir={data_dir}", f"--config.data.builder_config={builder_config}",
           "--config.train.loss=softmax_prefer_copy", f"--config.train.num_train_steps={TRAIN_STEPS}",
           f"--config.train.eval_every_steps={TRAIN_STEPS}", f"--config.train.checkpoint_every_steps={TRAIN_STEPS}",
           "--config.train.log_every_steps=250", "--config.train.batch_size=16", "--config.model.d_model=64",
           "--config.model.num_heads=4", "--config.model.ffn_dim=128", "--config.model.num_decoder_layers=2",
           "--config.tokenizer.vocab_size=500", "--config.eval.ocr_ablation=False"]
    res = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]


def _train_name_counts(n_images: int = 300):
    """Shop names of the fixture's training split, with counts (the builder renders image i of split s from
    ``image_rng(seed=0, s, i)``; re-rendering gives the same scenes)."""
    import collections

    from tfds_builders.synthetic_openvivqa import generator as g

    cnt = collections.Counter()
    for i in range(n_images):
        _, info = g.render_scene(g.image_rng(0, "train", i), (256, 192), split="train")
        cnt.update(s["name"] for s in info["signboards"])
    return cnt


def _iou(a, b):
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


@pytest.mark.slow
def test_copies_shop_name_from_tesseract_ocr(tmp_path, trained):
    """A newly rendered signboard photo (a seed no training image used), read by Tesseract: the shop name is
    copied into the answer and reported as copied, each word with the box of the OCR token it came from.

    Choice (see the ``trained`` fixture): the name is the one most frequent in the training split. Copying
    names never seen in training (the test split's) is what the main job measures over hundreds of questions;
    a model trained for a test's minute copies unseen names only sometimes, so asserting it on one photo
    would be flaky. Training with ``softmax_prefer_copy`` makes the pointer network the *only* way a
    copyable name is produced, so a train-split name in the answer still proves the copy path end to end:
    Tesseract -> OCR tokens -> pointer -> provenance. The reported boxes are checked against the renderer's
    ground-truth word boxes (independent of Tesseract and of the model).
    """
    from openvivqa_jax.predict import run_ocr_passes
    from tfds_builders.synthetic_openvivqa import generator as g

    name = _train_name_counts().most_common(1)[0][0]
    for seed in range(10_000, 10_040):  # the first fresh render whose OCR reads every word of the name
        img, info = g.render_scene(seed, (256, 192), shop_names=[name], split="train")
        if all(w in [t["text"] for t in run_ocr_passes(img)] for w in name.split()):
            break
    else:
        pytest.fail(f"tesseract did not read {name!r} on 40 renders")
    photo, picture = tmp_path / "shop.jpg", tmp_path / "shop_pred.png"
    img.save(photo, quality=92)
    res = _predict("--workdir", trained, "--image", photo, "--question", "cửa hàng này tên là gì?", "--json",
                   "--plot", picture)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert name in out["answer"], (name, out["answer"])
    gt = dict(zip(info["ocr"]["text"], info["ocr"]["box"].tolist()))
    copied = [w for w in out["words"] if w["source"] == "ocr"]
    for word in name.split():
        hits = [w for w in copied if w["word"] == word]
        assert hits, (word, out["words"])
        w = hits[0]
        assert out["ocr"][w["ocr_index"]]["text"] == w["ocr_text"] and w["box"] == out["ocr"][w["ocr_index"]]["box"]
        assert _iou(w["box"], gt[word]) > 0.5, (word, w["box"], gt[word])
    vocab_words = [w["word"] for w in out["words"] if w["source"] == "vocab"]
    assert vocab_words[:2] == ["cửa", "hàng"]  # the template comes from the vocabulary
    with Image.open(picture) as im:
        assert im.format == "PNG" and im.size[0] > 400


@pytest.mark.slow
def test_real_openvivqa_examples_batch(tmp_path, trained):
    """Batch mode over the public-release JSON of the real samples: every question gets an answer with its
    provenance printed, a picture, and the submission file {question_id: answer}."""
    qfile = os.path.join(EXAMPLES, "examples_data.json")
    if not os.path.exists(qfile):
        pytest.skip(f"real sample not found at {EXAMPLES}")
    with open(qfile, encoding="utf-8") as f:
        raw = json.load(f)
    sub, pics = tmp_path / "submission.json", tmp_path / "pics"
    # No --image_dir: the release layout (JSON next to images/) is found as it is published.
    res = _predict("--workdir", trained, "--questions", qfile, "--output", sub, "--plot_dir", pics,
                   "--batch_size", 4)
    assert res.returncode == 0, res.stderr[-3000:]
    answers = json.loads(sub.read_text(encoding="utf-8"))
    assert sorted(answers) == sorted(raw["annotations"])  # every question, ids as in the file
    assert all(isinstance(a, str) for a in answers.values())
    blocks = res.stdout.split("\n\n")
    for qid in raw["annotations"]:
        block = next(b for b in blocks if b.startswith(f"[{qid}] "))
        assert f"answer: {answers[qid]}" in block and "provenance:" in block and "ocr: " in block
        assert raw["images"][str(raw["annotations"][qid]["image_id"])] in block
        with Image.open(pics / f"{qid}.png") as im:
            assert im.format == "PNG"
    assert f"wrote {sub}: {len(answers)} answers" in res.stdout


@pytest.mark.slow
def _save_untrained_run(wd, cfg) -> None:
    """Writes ``cfg`` and a step-1 checkpoint of a freshly initialized model into the run folder ``wd`` (which
    already holds its ``spm.model``), as training would."""
    import orbax.checkpoint as ocp

    from openvivqa_jax.vqa import experiment, train

    (wd / "config.json").write_text(cfg.to_json_best_effort(indent=2))
    _, state = experiment.create_experiment(cfg, str(wd))
    latest, _ = train.checkpoint_managers(str(wd), cfg.train)
    latest.save(1, args=ocp.args.Composite(state=ocp.args.StandardSave(state), data_iter=ocp.args.JsonSave({})))
    latest.wait_until_finished()


def test_classifier_workdir(tmp_path, good_image):
    """A classifier (LoRRA: K answer classes + N OCR classes) predicts through the same CLI; provenance is
    'answer class' or 'OCR token' (with the box given in the OCR file)."""
    from conftest import tiny_model_config
    from openvivqa_jax.text.answer_list import AnswerList
    from openvivqa_jax.text.tokenizer import train_sentencepiece

    wd = tmp_path / "lorra"
    wd.mkdir()
    cfg = tiny_model_config("lorra")
    cfg.mesh.shape = (1, 1)
    answers = ["có hai chiếc xe", "màu đỏ", "bên trái"]
    AnswerList(answers).save(str(wd / "answers.json"))
    cfg.model.num_answers = len(answers)
    sents = answers + ["cửa hàng này tên là gì ?", "phở hùng", "xe màu gì ?"] * 20
    train_sentencepiece(sents, str(wd / "spm.model"), 300)
    _save_untrained_run(wd, cfg)
    ocr = [{"text": "phở", "box": [0.1, 0.1, 0.3, 0.2], "score": 0.9},
           {"text": "hùng", "box": [0.4, 0.1, 0.6, 0.2], "score": 0.8}]
    ocr_file = tmp_path / "ocr.json"
    ocr_file.write_text(json.dumps(ocr, ensure_ascii=False), encoding="utf-8")
    res = _predict("--workdir", wd, "--image", good_image, "--question", "cửa hàng này tên là gì?", "--ocr", ocr_file,
                   "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert [t["text"] for t in out["ocr"]] == ["phở", "hùng"]
    sources = {w["source"] for w in out["words"]}
    if sources == {"answer_class"}:
        assert out["answer"] == answers[out["words"][0]["class_id"]]
    else:
        assert sources == {"ocr"}, out["words"]
        j = out["words"][0]["ocr_index"]
        assert out["answer"] == ocr[j]["text"] and out["words"][0]["box"] == ocr[j]["box"]


# --------------------------------------------------------------------------------------------- --skip_bad
def _batch_with_one_bad_image(tmp_path):
    """A questions file (public-release layout) of 3 questions on 3 images; image ``b.jpg`` is not an image."""
    for name, colour in (("a.png", (200, 30, 30)), ("c.png", (30, 30, 200))):
        Image.new("RGB", (64, 48), colour).save(tmp_path / name)
    (tmp_path / "b.jpg").write_text("not an image")
    q = tmp_path / "questions.json"
    q.write_text(json.dumps({"images": {"1": "a.png", "2": "b.jpg", "3": "c.png"},
                             "annotations": {"10": {"image_id": 1, "question": "cửa hàng này tên gì ?"},
                                             "20": {"image_id": 2, "question": "biển hiệu màu gì ?"},
                                             "30": {"image_id": 3, "question": "có mấy chiếc xe máy ?"}}},
                            ensure_ascii=False), encoding="utf-8")
    return q


def test_batch_bad_image_stops_and_names_skip_bad(tmp_path):
    """Without --skip_bad one bad image stops the batch with one line naming the question and the option."""
    q = _batch_with_one_bad_image(tmp_path)
    res = _predict("--workdir", _fake_workdir(tmp_path), "--questions", q, "--output", tmp_path / "sub.json",
                   timeout=60)
    _assert_one_line_error(res, "question '20'", "b.jpg", "--skip_bad")
    assert not (tmp_path / "sub.json").exists()


def test_skip_bad_with_no_usable_image(tmp_path):
    (tmp_path / "b.jpg").write_text("not an image")
    q = tmp_path / "questions.json"
    q.write_text(json.dumps({"images": {"2": "b.jpg"}, "annotations": {"20": {"image_id": 2, "question": "gì ?"}}}))
    res = _predict("--workdir", _fake_workdir(tmp_path), "--questions", q, "--skip_bad", timeout=60)
    _assert_one_line_error(res, "no question has a usable image", "1 skipped", "b.jpg")


@pytest.mark.slow
def test_a_picture_without_readable_text_gets_a_note(tmp_path, trained):
    """The default OCR engine reads nothing on a plain picture: the answer is still given, and stderr says why
    nothing can be copied and what to do; with ``--ocr none`` (asked for no OCR) there is no note."""
    from PIL import Image

    photo = tmp_path / "plain.png"
    Image.new("RGB", (120, 90), (200, 180, 60)).save(photo)
    res = _predict("--workdir", trained, "--image", photo, "--question", "cửa hàng này tên là gì?")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "ocr: 0 tokens" in res.stdout
    notes = [ln for ln in res.stderr.splitlines() if ln.startswith("note: OCR")]
    assert len(notes) == 1 and "no text in 1 of 1 picture(s) (e.g. plain.png, 120x90 px)" in notes[0], res.stderr
    assert "--ocr <tokens.json>" in notes[0]
    res = _predict("--workdir", trained, "--image", photo, "--question", "cửa hàng này tên là gì?", "--ocr", "none")
    assert res.returncode == 0 and "note: OCR" not in res.stderr, res.stderr[-3000:]


@pytest.mark.slow
def test_skip_bad_writes_every_good_answer_and_lists_the_bad(tmp_path, trained):
    q = _batch_with_one_bad_image(tmp_path)
    sub = tmp_path / "out" / "sub.json"
    res = _predict("--workdir", trained, "--questions", q, "--output", sub, "--skip_bad", "--ocr", "none")
    assert res.returncode == 0, res.stderr[-3000:]
    answers = json.loads(sub.read_text(encoding="utf-8"))
    assert sorted(answers) == ["10", "30"] and all(isinstance(a, str) and a for a in answers.values())
    skipped = json.loads((tmp_path / "out" / "sub.skipped.json").read_text(encoding="utf-8"))
    assert list(skipped) == ["20"] and "b.jpg" in skipped["20"]
    err = [ln for ln in res.stderr.splitlines() if ln.strip() and not ln.startswith(("I", "W"))]
    assert err[0].startswith("skipped 1 of 3 questions whose question or image could not be used, by reason") and \
        "sub.skipped.json" in err[0]
    assert err[1].startswith("  1 x image …: ") and "(e.g. question '20': " in err[1] and "b.jpg" in err[1]
    assert "wrote " in res.stdout and ": 2 answers" in res.stdout


def test_proposals_workdir_answers_a_photo_from_its_segments(tmp_path):
    """A run whose vision input is the class-free region proposals (vision kind ``proposals``) answers a photo:
    the regions predict feeds the model are the picture's segments (two shapes on a background), computed from
    the photo as in training."""
    from conftest import tiny_model_config
    from openvivqa_jax.data.proposals import padded_proposals
    from openvivqa_jax.text.tokenizer import train_sentencepiece
    from openvivqa_jax.vqa import inference

    wd = tmp_path / "proposals"
    wd.mkdir()
    cfg = tiny_model_config("mlpag")
    cfg.mesh.shape = (1, 1)
    cfg.model.vision.kind = "proposals"
    cfg.model.vision.num_regions = 6
    sents = ["có hai chiếc xe", "màu đỏ", "bên trái", "chiếc xe màu gì ?", "cái ô bên nào ?"] * 20
    train_sentencepiece(sents, str(wd / "spm.model"), 300)
    _save_untrained_run(wd, cfg)
    pic = np.zeros((48, 64, 3), np.uint8)
    pic[:] = (200, 200, 200)
    pic[6:16, 4:24] = (220, 30, 30)
    pic[30:38, 40:46] = (20, 40, 210)
    path = tmp_path / "shapes.png"
    Image.fromarray(pic).save(path)

    run = inference.load_for_inference(str(wd))
    data = path.read_bytes()
    feats = run.photo_features(0, "q", "chiếc xe màu gì ?", data, str(path), [])
    w, h = cfg.data.image_size
    want = padded_proposals(data, "x", width=w, height=h, max_pixels=10 ** 8, num_regions=6,
                            min_size=int(cfg.model.vision.proposal_min_size), scale=400.0)
    np.testing.assert_array_equal(feats["region_features"], want[0])
    np.testing.assert_array_equal(feats["region_mask"], want[2])
    assert want[2].sum() == 3 and "image" not in feats  # background, red and blue

    res = _predict("--workdir", wd, "--image", path, "--question", "chiếc xe màu gì ?", "--ocr", "none", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["question"] == "chiếc xe màu gì ?" and isinstance(out["answer"], str)
