"""Model-ready records (openvivqa_jax.data.model_ready) against the per-example path: every field of every
question and answer, the training stream and its resume, evaluation batches, worker counts; corrupt,
half-written and stale caches; bad input."""

from __future__ import annotations

import io
import json
import logging
import os

import numpy as np
import pytest
from PIL import Image

from conftest import load_config


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The tiny synthetic set, its tokenizer and the tiny config's preprocessor."""
    from openvivqa_jax.vqa import assets
    from openvivqa_jax.data import datasets, pipeline

    cfg = load_config("configs/tiny.py")
    cfg.data.data_dir = str(tmp_path_factory.mktemp("tfds"))
    workdir = str(tmp_path_factory.mktemp("work"))
    builder = datasets.load_builder(cfg.data)
    src = pipeline.load_source(builder, "train")
    tok = assets.load_tokenizer(cfg, workdir, pipeline.read_records(src, "train"))
    pre = pipeline.Preprocessor(cfg, tok, allow_copy=True)
    return cfg, builder, src, pre, tmp_path_factory.mktemp("mr")


def _open(setup, root, split="train", **kw):
    from openvivqa_jax.data import model_ready, pipeline

    cfg, builder, _, pre, _ = setup
    return model_ready.open_split(pipeline.load_source(builder, split), pre, str(root), split, builder,
                                  source_name=split, **kw)


def assert_same_fields(a: dict, b: dict, where=""):
    assert sorted(a) == sorted(b), where
    for k in a:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        assert x.dtype == y.dtype and x.shape == y.shape, (where, k, x.dtype, y.dtype, x.shape, y.shape)
        np.testing.assert_array_equal(x, y, err_msg=f"{where} {k}")


def test_every_field_equals_the_per_example_path(setup):
    from openvivqa_jax.data import pipeline

    cfg, builder, src, pre, root = setup
    mr = _open(setup, root / "a", num_workers=2)
    assert len(mr) == len(src)
    # The synthetic set has several questions per image: each image is stored once.
    assert mr.manifest["num_images"] < len(src)
    for i in range(len(src)):
        rec = pipeline.decode_record(src[i], i, "train")
        for j, ans in enumerate(rec.answers):
            assert_same_fields(mr.gather(np.array([i]), np.array([j])),
                  {k: np.asarray(v)[None] for k, v in pre.features(rec, ans).items()}, f"question {i} answer {j}")


def test_pretrained_ocr_vectors_are_stored_once_per_ocr_set_and_equal_the_per_example_path(setup, tmp_path):
    """With fastText vectors for the OCR tokens (``ocr_fasttext``), the records carry them too: equal, for every
    question, to what the per-example path computes from the same ``.vec`` file."""
    from openvivqa_jax.data import model_ready, pipeline

    cfg, builder, src, _, _ = setup
    words = sorted({t for i in range(len(src)) for t in pipeline.decode_record(src[i], i, "train").ocr_texts})
    assert words, "the tiny set has OCR tokens"
    rng = np.random.default_rng(0)
    vec = tmp_path / "ocr.vec"
    kept = words[::2]  # every other word has a vector; the others get the stated zero fallback
    vec.write_text(f"{len(kept)} 4\n" + "".join(f"{w} " + " ".join(f"{x:.4f}" for x in rng.normal(size=4)) + "\n"
                                             for w in kept), encoding="utf-8")
    cfg = cfg.copy_and_resolve_references()
    with cfg.unlocked():
        cfg.model.ocr_extra_features = {"ocr_fasttext": 4}
        cfg.model.fasttext.path = str(vec)
    _, _, _, pre, _ = setup
    pre2 = pipeline.Preprocessor(cfg, pre.tok, allow_copy=True)
    mr = model_ready.open_split(src, pre2, str(tmp_path / "mr"), "train", builder, source_name="train")
    assert "ocr_fasttext" in mr.manifest["files"]
    nonzero = 0
    for i in range(len(src)):
        rec = pipeline.decode_record(src[i], i, "train")
        ref = {k: np.asarray(v)[None] for k, v in pre2.features(rec, rec.answers[0]).items()}
        assert_same_fields(mr.gather(np.array([i]), np.array([0])), ref, f"question {i}")
        nonzero += int(np.any(ref["ocr_fasttext"] != 0))
    assert nonzero > 0  # the vectors reached the batches


def test_same_records_for_any_number_of_workers(setup):
    _, _, _, _, root = setup
    a, b = _open(setup, root / "w1", num_workers=1), _open(setup, root / "w3", num_workers=3)
    assert sorted(a.manifest["files"]) == sorted(b.manifest["files"])
    for name in a.manifest["files"]:
        with open(os.path.join(a.path, name), "rb") as f, open(os.path.join(b.path, name), "rb") as g:
            assert f.read() == g.read(), name


def test_training_stream_and_resume_equal_the_per_example_iterator(setup):
    from openvivqa_jax.data import model_ready, pipeline

    _, _, src, pre, root = setup
    mr = _open(setup, root / "a")
    ref = pipeline.train_iterator(src, pre, batch_size=8, seed=3, num_threads=1)
    it = model_ready.train_iterator(mr, batch_size=8, seed=3, num_threads=1)
    steps = len(src) // 8 + 2  # past one epoch: a new permutation and new answer draws
    state = None
    for s in range(steps):
        if s == 3:
            state = it.get_state()
        assert_same_fields(next(it), next(ref), f"batch {s}")
    resumed = model_ready.train_iterator(mr, batch_size=8, seed=3, num_threads=1)
    resumed.set_state(state)
    ref = pipeline.train_iterator(src, pre, batch_size=8, seed=3, num_threads=1)
    for s in range(3):
        next(ref)
    for s in range(3, 6):
        assert_same_fields(next(resumed), next(ref), f"resumed batch {s}")
    # The iterator state is the per-example iterator's: a run resumes across the switch too.
    ref.set_state(it.get_state())
    assert_same_fields(next(it), next(ref), "after the state hand-over")


def test_a_stream_of_some_fields_equals_those_fields_of_the_full_stream(setup):
    """The region counter's stream gathers only its fields: the same values as the full batches' (same shuffle and
    indices); the OCR tokens or answers cannot be gathered alone."""
    from openvivqa_jax.data import model_ready

    mr = _open(setup, setup[4] / "a")
    fields = ("image", "question", "question_mask")
    some = model_ready.train_iterator(mr, batch_size=4, seed=5, num_threads=1, indices=[1, 3, 5, 7, 9, 11],
                                      fields=fields)
    full = model_ready.train_iterator(mr, batch_size=4, seed=5, num_threads=1, indices=[1, 3, 5, 7, 9, 11])
    for s in range(4):  # past one epoch of the six questions
        a, b = next(some), next(full)
        assert sorted(a) == sorted(fields)
        assert_same_fields(a, {k: b[k] for k in fields}, f"batch {s}")
        assert set(b["index"]) <= {1, 3, 5, 7, 9, 11}
    with pytest.raises(KeyError, match="cannot gather \\['ocr_phoc'\\] alone"):
        mr.gather(np.array([0, 1]), np.array([0, 0]), ("question", "ocr_phoc"))


def test_eval_batches_equal_the_per_example_path(setup):
    from openvivqa_jax.data import model_ready, pipeline

    _, builder, _, pre, root = setup
    src = pipeline.load_source(builder, "test")
    mr = _open(setup, root / "a", split="test")
    got = list(model_ready.eval_batches(mr, batch_size=7))
    want = list(pipeline.eval_batches(src, pre, batch_size=7))
    assert len(got) == len(want) == -(-len(src) // 7)
    assert not got[-1]["valid"].all() or len(src) % 7 == 0
    for b, (x, y) in enumerate(zip(got, want)):
        assert_same_fields(x, y, f"eval batch {b}")


@pytest.mark.slow  # 5-10 s on 2 cores: left to the full suite
def test_corrupt_half_written_and_stale_caches_are_rebuilt(setup, caplog, absl_info):
    from openvivqa_jax.vqa import assets
    from openvivqa_jax.data import model_ready, pipeline

    cfg, builder, src, pre, root = setup
    caplog.set_level(logging.INFO)
    good = _open(setup, root / "c")
    path = good.path
    reference = {k: np.array(v) for k, v in good.arrays.items()}

    def reopened(expect_why: str):
        caplog.clear()
        mr = _open(setup, root / "c")
        text = caplog.text
        assert "building them" in text and expect_why in text, text
        for k, v in reference.items():
            np.testing.assert_array_equal(np.asarray(mr.arrays[k]), v, err_msg=k)
        return mr

    caplog.clear()
    _open(setup, root / "c")
    assert "reusing" in caplog.text and "building" not in caplog.text
    # Killed while writing: the build folder is a temporary name, the final one has no manifest.
    os.remove(os.path.join(path, "manifest.json"))
    reopened("missing (an interrupted build)")
    # A flipped byte in the pixels: same size, caught by the checksum.
    with open(os.path.join(path, "image"), "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    reopened("fails its crc32 check")
    # A truncated field file.
    with open(os.path.join(path, "target_ocr"), "r+b") as f:
        f.truncate(10)
    reopened("has 10 bytes")
    # A manifest cut mid-write.
    with open(os.path.join(path, "manifest.json"), "r+b") as f:
        f.truncate(50)
    reopened("unreadable")
    # Made by another version of the layout, or holding another key: rebuilt, saying so.
    manifest = json.loads(open(os.path.join(path, "manifest.json"), encoding="utf-8").read())
    with open(os.path.join(path, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump({**manifest, "format": model_ready.FORMAT - 1}, f)
    reopened(f"format {model_ready.FORMAT - 1} is not {model_ready.FORMAT} (made by another version)")
    manifest = json.loads(open(os.path.join(path, "manifest.json"), encoding="utf-8").read())
    manifest["fingerprint"]["settings"]["q_len"] += 1
    with open(os.path.join(path, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f)
    reopened("its manifest holds another key: its settings differs (q_len)")
    # Another tokenizer or other shapes: another entry of the cache, beside this one, built with the reason.
    other = cfg.copy_and_resolve_references()
    other.tokenizer.vocab_size = 300
    tok2 = assets.load_tokenizer(other, str(root / "tok2"), pipeline.read_records(src, "train"))
    caplog.clear()
    mr = model_ready.open_split(src, pipeline.Preprocessor(cfg, tok2, allow_copy=True), str(root / "c"), "train",
                                builder, source_name="train")
    assert mr.path != path and os.path.dirname(mr.path) == os.path.dirname(path)
    assert f"the newest other entry of this split, {path}, was made from other tokenizer, settings (vocab)" \
        in caplog.text, caplog.text
    other = cfg.copy_and_resolve_references()
    other.data.image_size = (32, 24)
    caplog.clear()
    # The newest other entry again, by a clear second: file times tick coarsely, and the entry just built may
    # share this one's tick.
    newest = max(os.path.getmtime(os.path.join(os.path.dirname(path), d, "manifest.json"))
                 for d in os.listdir(os.path.dirname(path))
                 if os.path.isfile(os.path.join(os.path.dirname(path), d, "manifest.json")))
    os.utime(os.path.join(path, "manifest.json"), (newest + 1, newest + 1))
    mr = model_ready.open_split(src, pipeline.Preprocessor(other, pre.tok, allow_copy=True), str(root / "c"),
                                "train", builder, source_name="train")
    assert f"{path}, was made from other settings (image_h, image_w, vocab)" not in caplog.text
    assert f"{path}, was made from other settings (image_h, image_w)" in caplog.text, caplog.text
    assert mr.arrays["image"].shape[1:] == (24, 32, 3)
    assert os.path.isdir(path)  # the first entry is kept: runs of the first settings still use it
    assert not [p for _, dirs, _ in os.walk(root) for p in dirs if ".tmp-" in p or ".old-" in p]


def _jpeg(w=40, h=30, colour=(200, 30, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), colour).save(buf, "JPEG")
    return buf.getvalue()


def _example(qid, image, question="quán này tên gì", answers=("phở".encode(),)):
    return {"question_id": qid, "image_id": qid[:1], "question": question, "answers": list(answers), "qa_type": 1,
            "image": image, "ocr": {"text": [b"PHO", b""], "box": np.array([[0.1, 0.1, 0.3, 0.2]] * 2, np.float32)}}


def test_bad_input_keeps_one_line_errors_and_counted_skips(setup, tmp_path):
    from openvivqa_jax.data import model_ready, pipeline

    _, _, _, pre, _ = setup
    ok = [_example("a1", _jpeg()), _example("a2", _jpeg())]
    m = model_ready.build(ok, pre, str(tmp_path / "ok"), {}, source_name="list/train", num_workers=1)
    assert m["num_images"] == 1  # two questions on one image
    assert m["counts"]["ocr_tokens_empty_after_normalization"] == 2  # one per question, counted, not dropped silently
    with pytest.raises(pipeline.DatasetError) as e:
        model_ready.build(ok + [_example("b1", b"not a jpeg")], pre, str(tmp_path / "bad"), {},
                          source_name="list/train", num_workers=1)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("question 'b1':"), msg
    assert not os.path.exists(tmp_path / "bad") and not os.listdir(tmp_path).count("bad")
    with pytest.raises(pipeline.DatasetError, match="question 'c1' .* empty after normalization"):
        model_ready.build([_example("c1", _jpeg(), question="  ")], pre, str(tmp_path / "empty"), {},
                          source_name="list/train", num_workers=1)
    # A training question without an answer: the per-example path's error when it is drawn.
    mr = model_ready.ModelReady(*_built(model_ready.build, [_example("d1", _jpeg(), answers=())] * 1, pre,
                                        tmp_path / "noans"))
    it = model_ready.train_iterator(mr, batch_size=1, seed=0, source_name="list/train", num_threads=0)
    with pytest.raises(pipeline.DatasetError, match="list/train: question 'd1' has no answer in a training split"):
        next(it)


def _built(build, source, pre, path):
    m = build(source, pre, str(path), {}, source_name="list/train", num_workers=1)
    return str(path), m


def test_region_features_equal_the_per_example_path(tmp_path_factory):
    """The region-feature path (float16 in the dataset, float32 in the batches), rows shared per image."""
    from openvivqa_jax.vqa import assets
    from openvivqa_jax.data import datasets, model_ready, pipeline

    cfg = load_config("configs/synthetic/mlpag_regions.py")
    cfg.data.builder_config = "tiny_regions"
    cfg.tokenizer.vocab_size = 400
    cfg.data.data_dir = str(tmp_path_factory.mktemp("tfds_regions"))
    builder = datasets.load_builder(cfg.data)
    src = pipeline.load_source(builder, "train")
    tok = assets.load_tokenizer(cfg, str(tmp_path_factory.mktemp("w")), pipeline.read_records(src, "train"))
    pre = pipeline.Preprocessor(cfg, tok, allow_copy=True)
    mr = model_ready.open_split(src, pre, str(tmp_path_factory.mktemp("mr")), "train", builder)
    assert mr.manifest["files"]["region_features"]["dtype"] == "<f4"
    assert mr.manifest["num_images"] < len(src)
    for i in range(len(src)):
        rec = pipeline.decode_record(src[i], i, "train")
        assert rec.objects is not None
        assert_same_fields(mr.gather(np.array([i]), np.array([0])),
              {k: np.asarray(v)[None] for k, v in pre.features(rec, rec.answers[0]).items()}, f"question {i}")
    ref = pipeline.train_iterator(src, pre, batch_size=8, seed=1, num_threads=1)
    it = model_ready.train_iterator(mr, batch_size=8, seed=1, num_threads=1)
    for s in range(3):
        assert_same_fields(next(it), next(ref), f"batch {s}")


@pytest.mark.slow
def test_main_job_with_model_ready_records_matches_and_reuses_them(tmp_path):
    """The train loop on model-ready records: the same losses and test scores as the per-example path, and
    ``--mode evaluate`` in the same workdir reuses the records instead of building them again."""
    import json
    import subprocess
    import sys

    from conftest import ROOT, subprocess_env

    def run(workdir, *extra):
        cmd = [sys.executable, "-m", "openvivqa_jax.main", "--config=configs/tiny.py", f"--workdir={workdir}",
               f"--config.data.data_dir={tmp_path / 'tfds'}", "--config.train.num_train_steps=10",
               "--config.eval.ocr_ablation=False", *extra]
        res = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        return res.stderr

    def results(workdir):
        losses = [json.loads(line).get("loss") for line in open(workdir / "metrics.jsonl", encoding="utf-8")
                  if json.loads(line)["kind"] == "train"]
        return losses, json.loads((workdir / "eval" / "test_metrics.json").read_text())["overall"]

    log = run(tmp_path / "mr", "--config.data.model_ready=True")
    assert "Model-ready records of synthetic_openvivqa/train at" in log
    assert "building them (none for these inputs yet)" in log
    # The log's first INFO line names the backend (this machine's CPU, one device: subprocess_env's XLA_FLAGS).
    first_info = next(line for line in log.splitlines() if line.startswith("I"))
    assert first_info.endswith("] backend cpu: 1 device (cpu), 1 process"), first_info
    # The records are in the cache next to the dataset; the workdir refers to them and holds no copy.
    ref = json.loads((tmp_path / "mr" / "model_ready.json").read_text(encoding="utf-8"))
    assert sorted(ref) == ["test", "train", "validation"]
    for split, entry in ref.items():
        assert entry["path"].startswith(str(tmp_path / "tfds" / "model_ready" / "synthetic_openvivqa" / "tiny"))
        manifest = json.loads(open(os.path.join(entry["path"], "manifest.json"), encoding="utf-8").read())
        from openvivqa_jax.data.model_ready_cache import key_digest

        assert entry["key"] == key_digest(manifest["fingerprint"]) and entry["built_by_this_run"] is True
    assert not (tmp_path / "mr" / "model_ready").exists()
    run(tmp_path / "plain")
    assert results(tmp_path / "mr") == results(tmp_path / "plain")
    log = run(tmp_path / "mr", "--config.data.model_ready=True", "--mode=evaluate")
    assert "building them" not in log and "Model-ready records of synthetic_openvivqa/test: reusing" in log
    # Another seed in another workdir: the same tokenizer (trained from the same split), the same entries.
    log = run(tmp_path / "seed1", "--config.data.model_ready=True", "--config.seed=1",
              "--config.train.num_train_steps=1", "--config.evals.test.enabled=False")
    assert "building them" not in log and "Model-ready records of synthetic_openvivqa/train: reusing" in log
    assert (tmp_path / "seed1" / "spm.model").read_bytes() == (tmp_path / "mr" / "spm.model").read_bytes()
    ref1 = json.loads((tmp_path / "seed1" / "model_ready.json").read_text(encoding="utf-8"))
    assert ref1["train"]["path"] == ref["train"]["path"] and ref1["train"]["built_by_this_run"] is False


def test_class_free_proposals_equal_the_per_example_path(tmp_path_factory):
    """Vision kind proposals: each picture segmented once by the workers, at its row; every field (with the OCR
    tokens' own pixels, ``ocr_pixels``) equals ``Preprocessor.features``, for one worker and for two."""
    from openvivqa_jax.vqa import assets
    from openvivqa_jax.data import datasets, model_ready, pipeline

    cfg = load_config("configs/tiny.py")
    cfg.model.vision.kind = "proposals"
    cfg.model.vision.num_regions = 16
    cfg.model.ocr_extra_features = {"ocr_pixels": 48}  # the tokens' own pixels: decoded once more for the text rows
    cfg.data.data_dir = str(tmp_path_factory.mktemp("tfds_proposals"))
    builder = datasets.load_builder(cfg.data)
    src = pipeline.load_source(builder, "train")
    tok = assets.load_tokenizer(cfg, str(tmp_path_factory.mktemp("w")), pipeline.read_records(src, "train"))
    pre = pipeline.Preprocessor(cfg, tok, allow_copy=True)
    mrs = [model_ready.open_split(src, pre, str(tmp_path_factory.mktemp(f"mr{w}")), "train", builder,
                                  num_workers=w) for w in (1, 2)]
    m = mrs[0].manifest
    assert m["files"]["region_features"]["shape"][1:] == [16, pre.region_dim] and "image" not in m["files"]
    assert m["num_images"] < len(src)
    # Segments past the 16 largest are counted, once per picture (the tiny set's pictures have more).
    assert m["counts"]["proposal_segments_beyond_num_regions"] > 0
    for i in range(len(src)):
        rec = pipeline.decode_record(src[i], i, "train")
        want = {k: np.asarray(v)[None] for k, v in pre.features(rec, rec.answers[0]).items()}
        assert "image" not in want and want["region_mask"].any()
        assert want["ocr_pixels"].shape == (1, cfg.model.num_ocr, 48)
        on = want["ocr_mask"][0]
        assert (want["ocr_pixels"][0, on] > 0).all() and not want["ocr_pixels"][0, ~on].any()
        for mr in mrs:
            assert_same_fields(mr.gather(np.array([i]), np.array([0])), want, f"question {i}")


def test_count_targets_are_stored_and_equal_the_per_example_path(setup, tmp_path):
    """With the glimpses' count loss on, each question carries ``count_target``: the count its first reference
    answer gives a counting question (``có ba ...`` -> 3), 0 for every other question; the records equal the
    per-example path and the rule is checked here on the decoded text, word by word."""
    from openvivqa_jax.data import model_ready, pipeline

    cfg, builder, src, pre, _ = setup
    cfg = cfg.copy_and_resolve_references()
    with cfg.unlocked():
        cfg.model.visual_glimpses.num = 1
        cfg.model.visual_glimpses.count_loss = 1.0
    pre2 = pipeline.Preprocessor(cfg, pre.tok, allow_copy=True)
    mr = model_ready.open_split(src, pre2, str(tmp_path / "mr"), "train", builder, source_name="train")
    words = {"một": 1, "hai": 2, "ba": 3, "bốn": 4, "năm": 5, "sáu": 6}
    counted = 0
    for i in range(len(src)):
        rec = pipeline.decode_record(src[i], i, "train")
        got = mr.gather(np.array([i]), np.array([0]))
        assert_same_fields(got, {k: np.asarray(v)[None] for k, v in pre2.features(rec, rec.answers[0]).items()},
                           f"question {i}")
        toks = rec.answers[0].split()
        want = words[toks[1]] if rec.question.startswith(("có bao nhiêu", "có mấy", "trong ảnh có")) else 0
        assert int(got["count_target"][0]) == want, (rec.question, rec.answers[0])
        counted += want > 0
    assert counted > 0  # the tiny set has counting questions


def test_a_long_build_logs_its_progress(setup, caplog, absl_info, monkeypatch):
    """A build logs progress lines (questions read of the split, time left), so a long segmentation does not
    look like a hang; here every question logs one (the interval set to 0)."""
    from openvivqa_jax.data import model_ready

    _, _, src, _, root = setup
    monkeypatch.setattr(model_ready, "PROGRESS_EVERY_S", 0.0)
    caplog.set_level(logging.INFO)
    _open(setup, root / "progress")
    lines = [r.getMessage() for r in caplog.records if "questions (" in r.getMessage()]
    n = len(src)
    assert len(lines) == n, lines[:3]
    assert lines[0].startswith(f"Model-ready records of train: 1/{n} questions (") and "s left" in lines[0]
    assert lines[-1].startswith(f"Model-ready records of train: {n}/{n} questions (100%)"), lines[-1]


def _open_in_a_process(data_dir: str, workdir: str, root: str, log_path: str, go: str) -> None:
    """A separate process opening the tiny set's train records in ``root`` as soon as the file ``go`` exists
    (``<log_path>.ready`` says it is waiting for it), its INFO log lines written to ``log_path``."""
    import time

    from absl import logging as absl_logging

    from openvivqa_jax.data import datasets, model_ready, pipeline
    from openvivqa_jax.vqa import assets

    cfg = load_config("configs/tiny.py")
    cfg.data.data_dir = data_dir
    builder = datasets.load_builder(cfg.data)
    src = pipeline.load_source(builder, "train")
    pre = pipeline.Preprocessor(cfg, assets.load_tokenizer(cfg, workdir), allow_copy=True)
    handler = logging.FileHandler(log_path)
    logging.getLogger("absl").addHandler(handler)
    absl_logging.set_verbosity(absl_logging.INFO)
    open(log_path + ".ready", "w").close()
    while not os.path.exists(go):
        time.sleep(0.01)
    model_ready.open_split(src, pre, root, "train", builder, source_name="train", num_workers=1)
    handler.flush()


@pytest.mark.slow  # two processes that import JAX and build the tiny records: 20-40 s on 2 cores
def test_two_processes_opening_one_entry_at_once_build_it_once(setup, tmp_path):
    """Two runs that need the same entry at the same moment: one builds it, the other waits on the entry's lock
    and reuses it; the entry equals one built alone, and no temporary folder is left."""
    import multiprocessing
    import time

    cfg, builder, src, pre, _ = setup
    workdir = os.path.dirname(pre.tok.model_path)
    root, go = tmp_path / "shared", tmp_path / "go"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_open_in_a_process, args=(cfg.data.data_dir, workdir, str(root),
                                                          str(tmp_path / f"log{i}"), str(go))) for i in range(2)]
    for p in procs:
        p.start()
    while not all((tmp_path / f"log{i}.ready").exists() for i in range(2)):  # both loaded: start them together
        assert all(p.is_alive() for p in procs)
        time.sleep(0.05)
    go.touch()
    for p in procs:
        p.join(300)
        assert p.exitcode == 0
    logs = [(tmp_path / f"log{i}").read_text() for i in range(2)]
    # One built it; the other found it built once it held the lock (saying it waited when that took over 5 s).
    built = [log for log in logs if ": building them (none for these inputs yet)" in log]
    other = [log for log in logs if log not in built]
    assert len(built) == len(other) == 1, logs
    assert ": reusing " in other[0] and "building them (" not in other[0], logs
    alone = _open(setup, tmp_path / "alone")
    shared = _open(setup, root)
    assert not shared.built_now
    for k, v in alone.arrays.items():
        np.testing.assert_array_equal(np.asarray(shared.arrays[k]), np.asarray(v), err_msg=k)
    assert not [d for _, dirs, _ in os.walk(root) for d in dirs if ".tmp-" in d or ".old-" in d]
