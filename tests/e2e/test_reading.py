"""The ViQuAD span reader: span decoding, character offsets through Vietnamese normalization, the builder's
train/dev/test layout, spans and one-line errors, and a tiny training run through the main entry point."""

from __future__ import annotations

import json
import os
import re
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import tensorflow_datasets as tfds

from conftest import ROOT, run_main_cli

from openvivqa_jax.reading import features as feats
from openvivqa_jax.reading.spans import best_spans, best_spans_numpy
from openvivqa_jax.text.tokenizer import train_sentencepiece
from tfds_builders import readers
from tfds_builders.viquad import Builder, ViquadConfig, synthetic
from tfds_builders.viquad.viquad_dataset_builder import AnswerSpanError

NFD = lambda s: unicodedata.normalize("NFD", s)  # noqa: E731

# A ViQuAD passage (the paper's Figure 1) with the other spellings normalization changes: an old tone placement
# (Hoà, thuỷ), a price (20.000đ), a line break, a zero-width space and a soft hyphen.
PASSAGE = ("Nước biển có độ mặn không đồng đều trên toàn thế giới mặc dù phần lớn có độ mặn nằm trong khoảng từ "
           "3,1% tới 3,8%. Nước biển nhạt nhất có tại vịnh Phần Lan, một phần của biển Baltic.\nHoà Bình có nhà "
           "máy thuỷ điện lớn; vé tham quan giá 20.000đ.\u200bCÀ\u00adPHÊ SỮA “ngon”.")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from openvivqa_jax.text.normalize import normalize_text

    data = synthetic.make_split("train", 40)
    texts = [normalize_text(a["paragraphs"][0]["context"]) for a in data["data"]] + [normalize_text(PASSAGE)]
    return train_sentencepiece(texts, str(tmp_path_factory.mktemp("spm") / "spm.model"), 400)


# ------------------------------------------------------------------------------------------------ decoding


@pytest.mark.parametrize("max_len", [1, 3, 50])
def test_best_spans_match_brute_force(max_len):
    rng = np.random.default_rng(max_len)
    b, n = 24, 17
    s = rng.normal(size=(b, n)).astype(np.float32)
    e = rng.normal(size=(b, n)).astype(np.float32)
    mask = rng.random((b, n)) < 0.6
    mask[0] = False  # no passage token
    mask[1] = np.arange(n) >= n - 1  # one passage token, the last
    s[2, 3] = e[2, 1] = 100.0  # the best start and best end in the wrong order: not a span
    got = [np.asarray(x) for x in best_spans(s, e, mask, max_len)]
    want = best_spans_numpy(s, e, mask, max_len)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(got[2], want[2], rtol=1e-6)
    assert np.isneginf(got[2][0]) and (got[0][1], got[1][1]) == (n - 1, n - 1)
    assert got[0][2] <= got[1][2] < got[0][2] + max_len


# ------------------------------------------------------------------------------------ character offsets


def test_split_words_by_hand():
    text = "Giá 20.000đ, 3,8% (NFD: " + NFD("hoà") + ")\u200bxe"
    words = [text[s:e] for s, e in feats.split_words(text)]
    assert words == ["Giá", "20.000đ", ",", "3,8", "%", "(", "NFD", ":", NFD("hoà"), ")", "xe"]


@pytest.mark.parametrize("form", ["NFC", "NFD"])
def test_offsets_round_trip_on_vietnamese_passages(tokenizer, form):
    """Every word of the passage (and every phrase of words) maps to pieces and back to exactly its own
    characters of the original text, whatever normalization did to it."""
    text = unicodedata.normalize(form, PASSAGE)
    toks = feats.tokenize_passage(tokenizer, text)
    words = feats.split_words(text)
    assert len(toks) >= len(words)
    for s, e in words:
        first, last = feats.char_span_to_tokens(toks, s, e)
        assert feats.span_text(toks, first, last) == (text[s:e], s, e)
    phrases = ["vịnh Phần Lan", "3,1%", "Hoà Bình", "thuỷ điện", "20.000đ", "CÀ\u00adPHÊ SỮA", "“ngon”",
               "nhà máy thuỷ điện lớn"]
    for p in phrases:
        p = unicodedata.normalize(form, p)
        s = text.index(p)
        first, last = feats.char_span_to_tokens(toks, s, s + len(p))
        assert feats.span_text(toks, first, last)[0] == p
    # Pieces never leave their word, and cover it.
    for s, e in words:
        inside = (toks.char_start >= s) & (toks.char_end <= e)
        assert toks.char_start[inside].min() == s and toks.char_end[inside].max() == e


def test_passage_pieces_are_the_normalized_passage_pieces(tokenizer):
    """Word by word, the pieces are those of the whole normalized passage (no piece crosses a space), so the
    reader reads what the tokenizer was trained on."""
    from openvivqa_jax.text.normalize import normalize_text

    text = NFD(PASSAGE.replace("\u00ad", ""))
    toks = feats.tokenize_passage(tokenizer, text)
    assert toks.ids.tolist() == list(tokenizer.encode(normalize_text(text)))


@pytest.mark.slow  # 5-10 s on 2 cores: left to the full suite
def test_reader_masks_the_question_and_takes_any_encoder():
    """Logits off the passage are NEG_INF; an encoder passed in replaces the built one (the seam for BERT)."""
    import jax.numpy as jnp
    import ml_collections
    from flax import nnx

    from openvivqa_jax.models.layers import NEG_INF
    from openvivqa_jax.reading.model import build_reader, span_loss

    m = ml_collections.ConfigDict(dict(encoder="transformer", d_model=8, num_heads=2, ffn_dim=16, num_layers=1,
                                       dropout=0.0, max_seq_len=10, dtype="float32"))
    batch = {"input_ids": jnp.arange(20).reshape(2, 10) % 7, "segment_ids": (jnp.arange(10) >= 4).astype(jnp.int32)[None].repeat(2, 0),
             "input_mask": jnp.ones((2, 10), bool), "passage_mask": (jnp.arange(10) >= 4)[None].repeat(2, 0)}
    s, e = build_reader(m, 7)(batch)
    assert s.shape == e.shape == (2, 10)
    assert np.all(np.asarray(s)[:, :4] == NEG_INF) and np.all(np.asarray(e)[:, 4:] > NEG_INF)
    loss, metrics = span_loss(s, e, jnp.array([4, 5]), jnp.array([6, 9]))
    assert np.isfinite(float(loss)) and float(loss) > 0

    class Fixed(nnx.Module):
        """Token k -> the unit vector of its position: the head sees exactly what this encoder gives."""

        def __call__(self, input_ids, segment_ids, input_mask, *, deterministic=True, rngs=None):
            return jnp.eye(10, 8)[None].repeat(input_ids.shape[0], 0)

    reader = build_reader(m, 7, encoder=Fixed())
    s, _ = reader(batch)
    kernel = np.asarray(reader.span_head.kernel[...])
    bias = np.asarray(reader.span_head.bias[...])
    np.testing.assert_allclose(np.asarray(s)[0, 4:8], kernel[4:8, 0] + bias[0], rtol=1e-6)
    assert np.all(np.asarray(s)[0, 8:] == bias[0])


def test_windows_and_labels(tokenizer):
    """A long passage is cut into windows every doc_stride pieces; the training labels point at the answer's
    pieces in the one window that holds it (checked against the passage's own text)."""
    text = " ".join([PASSAGE] * 3)
    answer = "vịnh Phần Lan"
    start = text.rindex(answer)
    rec = {"question": "nước biển nhạt nhất ở đâu ?", "passage": text, "answer_starts": [start],
           "answer_ends": [start + len(answer)]}
    n = len(feats.tokenize_passage(tokenizer, text))
    ev = feats.make_windows(tokenizer, [rec], max_seq_len=64, max_question_len=16, doc_stride=20, train=False)
    q = len(tokenizer.encode(rec["question"]))
    room = 64 - q - 3
    assert len(ev) == 1 + int(np.ceil((n - room) / 20))
    tr = feats.make_windows(tokenizer, [rec], max_seq_len=64, max_question_len=16, doc_stride=20, train=True)
    assert len(tr) >= 1
    for r in range(len(tr)):
        sp, ep, off = tr.start_positions[r], tr.end_positions[r], tr.offset[r]
        assert tr.passage_mask[r, sp] and tr.passage_mask[r, ep] and tr.segment_ids[r, sp] == 1
        assert feats.span_text(tr.passages[0], sp - off, ep - off)[0] == answer


# ------------------------------------------------------------------------------------------------ builder


def _write(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


def _release(manual: Path) -> None:
    """The UIT-ViQuAD release's layout: train/dev/test SQuAD v1.1 files; dev/test with four answers each."""
    ctx = "Nước biển nhạt nhất có tại vịnh Phần Lan, một phần của biển Baltic."
    nfd = NFD("Hoà Bình có nhà máy thuỷ điện lớn.")

    def article(title, context, qas):
        return {"version": "1.1", "data": [{"title": title, "paragraphs": [{"context": context, "qas": qas}]}]}

    _write(manual / "train_ViQuAD.json", article("Biển", ctx, [
        {"id": "t1", "question": "Nước biển ở đâu nhạt nhất?", "answers": [{"text": "vịnh Phần Lan", "answer_start": 27}]}]))
    four = [{"text": "vịnh Phần Lan", "answer_start": 27}, {"text": "Phần Lan", "answer_start": 32},
            {"text": "vịnh Phần Lan", "answer_start": 27}, {"text": "biển Baltic", "answer_start": 55}]
    _write(manual / "dev_ViQuAD.json", article("Biển", ctx, [{"id": "d1", "question": "Ở đâu?", "answers": four}]))
    _write(manual / "test_ViQuAD.json", article("Hòa Bình", nfd, [
        {"id": "s1", "question": "Tỉnh nào có nhà máy thủy điện?",
         "answers": [{"text": "Hòa Bình", "answer_start": 0}, {"text": NFD("Hoà Bình"), "answer_start": 0}]}]))


def _build(manual: Path, data_dir: Path, config: ViquadConfig | None = None) -> Builder:
    b = Builder(config=config or "default", data_dir=str(data_dir), file_format="array_record")
    b.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(manual)))
    return b


def _read(builder, split) -> dict:
    src = builder.as_data_source(split)
    dec = lambda v: v.decode() if isinstance(v, bytes) else v  # noqa: E731
    out = {}
    for i in range(len(src)):
        ex = src[i]
        out[dec(ex["question_id"])] = {k: ([dec(x) for x in v] if isinstance(v, (list, np.ndarray)) else dec(v))
                                       for k, v in ex.items() if k != "ocr"}
    return out


def test_builder_reads_the_release_layout(tmp_path):
    _release(tmp_path / "m")
    b = _build(tmp_path / "m", tmp_path / "d")
    assert set(b.info.splits) == {"train", "dev", "test"}
    train, dev, test = (_read(b, s) for s in ("train", "dev", "test"))
    assert train["t1"]["passage"] == "Nước biển nhạt nhất có tại vịnh Phần Lan, một phần của biển Baltic."
    assert (train["t1"]["answer_starts"], train["t1"]["answer_ends"]) == ([27], [40])
    assert dev["d1"]["answer_texts"] == ["vịnh Phần Lan", "Phần Lan", "vịnh Phần Lan", "biển Baltic"]
    assert dev["d1"]["answer_ends"] == [40, 40, 40, 66]
    # NFD passage: an NFC answer at 0 ends after the NFD letters of "Hoà Bình" (10 code points), as does the NFD one.
    assert test["s1"]["passage"] == NFD("Hoà Bình có nhà máy thuỷ điện lớn.")
    assert test["s1"]["answer_starts"] == [0, 0] and test["s1"]["answer_ends"] == [len(NFD("Hoà Bình"))] * 2
    assert test["s1"]["answers"] == ["hòa bình", "hòa bình"]


def _bad(manual: Path, answers: list) -> None:
    _write(manual / "train_ViQuAD.json", {"data": [{"title": "x", "paragraphs": [{
        "context": "Hà Nội là thủ đô.", "qas": [
            {"id": "ok", "question": "Thủ đô?", "answers": [{"text": "Hà Nội", "answer_start": 0}]},
            {"id": "bad", "question": "Thủ đô là gì?", "answers": answers}]}]}]})


@pytest.mark.parametrize("answers, message", [
    ([{"text": "Sài Gòn", "answer_start": 0}], r"question bad: answer 0 'Sài Gòn' \(answer_start 0\): its text is "
                                               r"not in the passage"),
    ([{"text": "Hà Nội", "answer_start": "0"}], r"question bad: answer 0 'Hà Nội': answer_start must be an integer"),
])
def test_builder_span_errors_are_one_line_and_skippable(tmp_path, answers, message):
    _bad(tmp_path / "m", answers)
    with pytest.raises(AnswerSpanError, match=r"train_ViQuAD\.json: " + message) as e:
        _build(tmp_path / "m", tmp_path / "d")
    assert "\n" not in str(e.value) and isinstance(e.value, readers.DatasetInputError)
    b = _build(tmp_path / "m", tmp_path / "d2", ViquadConfig(name="skip", skip_invalid_records=True))
    assert sorted(_read(b, "train")) == ["ok"] and b.skip_counts["train"] == {"invalid_record": 1}


@pytest.mark.parametrize("start, message", [
    (40, r"question bad: answer 0 'thủ đô' does not match its answer_start 40: the passage has '' there; the text "
         r"occurs at 10 \(refused by the builder option strict; without it: answer_start re-anchored"),
    (3, r"question bad: answer 0 'thủ đô' does not match its answer_start 3: the passage has 'Nội là' there; the "
        r"text occurs at 10 \(refused by the builder option strict"),
])
def test_builder_reanchors_an_answer_off_its_start_and_strict_refuses(tmp_path, start, message):
    """An answer_start off its text (or past the passage) is re-anchored to the text's occurrence and counted; the
    strict option refuses it in one line naming the file and the question."""
    _bad(tmp_path / "m", [{"text": "thủ đô", "answer_start": start}])
    b = _build(tmp_path / "m", tmp_path / "d")
    bad = _read(b, "train")["bad"]
    assert (bad["answer_starts"], bad["answer_ends"]) == ([10], [16])  # "Hà Nội là thủ đô.".find("thủ đô") == 10
    assert b.repairs["train"].totals() == {"answer_start_reanchored": 1} and b.skip_counts["train"] == {}
    with pytest.raises(readers.DatasetInputError, match=r"train_ViQuAD\.json: " + message) as e:
        _build(tmp_path / "m", tmp_path / "d2", ViquadConfig(name="strict", strict=True))
    assert "\n" not in str(e.value)


def test_synthetic_set_spans_and_splits():
    """Every generated answer is at its answer_start (checked by slicing), dev/test have four answers, and the
    three splits' towns are disjoint."""
    data = synthetic.synthetic_dataset({"train": 30, "dev": 10, "test": 10})
    towns = {}
    for split, d in data.items():
        towns[split] = {a["title"] for a in d["data"]}
        for a in d["data"]:
            para = a["paragraphs"][0]
            for qa in para["qas"]:
                assert len(qa["answers"]) == (1 if split == "train" else 4)
                for ans in qa["answers"]:
                    s = ans["answer_start"]
                    assert para["context"][s:s + len(ans["text"])] == ans["text"]
    assert not (towns["train"] & towns["dev"]) and not (towns["train"] & towns["test"])
    assert not (towns["dev"] & towns["test"])


# ------------------------------------------------------------------------------------------------ config


def test_reader_config_is_accepted_and_checked():
    from openvivqa_jax.config_check import ConfigError, check_config
    from openvivqa_jax.config_files import load_config
    from openvivqa_jax.reading.config import check_reading_config

    import importlib.util

    spec = importlib.util.spec_from_file_location("reader_cfg", os.path.join(ROOT, "configs/viquad/reader.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for variant in mod.VARIANTS:
        cfg = load_config(os.path.join(ROOT, "configs/viquad/reader.py"), variant)
        check_config(cfg)
        check_reading_config(cfg)
        # Real-data variants read the public files' layout (1.0 dev/test, 2.0 folds as train), `viquad` the release.
        want = "synthetic" if variant not in mod.REAL else ("default" if variant == "viquad" else "v1_eval_v2_train")
        assert cfg.data.builder_config == want, variant
    cfg = load_config(os.path.join(ROOT, "configs/viquad/reader.py"), "viquad")
    cfg.model.max_seq_len = 40
    with pytest.raises(ConfigError, match=r"model\.max_seq_len=40 .* >= model\.max_question_len \+ 4 = 68"):
        check_reading_config(cfg)


# ------------------------------------------------------------------------------------------------ training


_main = run_main_cli


@pytest.mark.slow
def test_tiny_reader_trains_through_main_resumes_and_writes_eval_files(tmp_path):
    tiny = json.dumps({"name": "synthetic_tiny", "synthetic": True,
                       "synthetic_sizes": {"train": 12, "dev": 3, "test": 3}})
    common = ["--config", "configs/viquad/reader.py", "--workdir", tmp_path / "run",
              f"--config.data.data_dir={tmp_path / 'tfds'}", f"--config.data.builder_config={tiny}",
              "--config.tokenizer.vocab_size=300", "--config.model.d_model=16", "--config.model.ffn_dim=32",
              "--config.model.num_layers=1", "--config.model.max_seq_len=96", "--config.train.batch_size=4",
              "--config.train.log_every_steps=2", "--config.train.checkpoint_every_steps=2",
              "--config.train.eval_every_steps=4", "--config.eval.batch_size=8"]
    res = _main(*common, "--config.train.num_train_steps=4")
    assert res.returncode == 0, res.stderr[-3000:]
    run = tmp_path / "run"
    for split in ("dev", "test"):
        metrics = json.loads((run / "eval" / f"{split}_metrics.json").read_text(encoding="utf-8"))
        preds = json.loads((run / "eval" / f"{split}_predictions.json").read_text(encoding="utf-8"))
        spans = json.loads((run / "eval" / f"{split}_spans.json").read_text(encoding="utf-8"))
        assert set(metrics["overall"]) == {"EM", "F1"} and metrics["human_performance"]["overall"]["num_questions"] > 0
        assert metrics["text_mode"] == "official" and metrics["rules"]["F1"]["rule"] == "SQuAD v1.1 evaluate-v1.1.py"
        assert len(preds) == metrics["num_questions"]["overall"] == len(spans)
    # Each prediction is its passage's characters [start, end) (read from the synthetic set itself).
    contexts = {qa["id"]: a["paragraphs"][0]["context"] for a in synthetic.make_split("test", 3)["data"]
                for qa in a["paragraphs"][0]["qas"]}
    for p in preds:
        sp = spans[p["question_id"]]
        assert p["prediction"] == contexts[p["question_id"]][sp["start"]:sp["end"]]
    assert (run / "best").is_dir() and (run / "checkpoints" / "4").is_dir() and list(run.glob("events.out.*"))
    kinds = [json.loads(ln)["kind"] for ln in (run / "metrics.jsonl").read_text().splitlines()]
    assert kinds.count("train") == 2 and "eval" in kinds and "final" in kinds
    # The best checkpoint is the last step, scored on dev by the loop: the final evaluation reuses that score
    # (one dev evaluation in all) and scores test once.
    assert len(re.findall(r"scored dev \(\d+ questions\) with the parameters of step 4 ", res.stderr)) == 1, res.stderr
    assert len(re.findall(r"scored test \(\d+ questions\) with the parameters of step 4 ", res.stderr)) == 1
    records = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    periodic = next(r for r in records if r["kind"] == "eval" and r["step"] == 4)
    final = next(r for r in records if r["kind"] == "final" and "dev/F1" in r)
    assert final["dev/F1"] == periodic["dev/F1"] and final["dev/EM"] == periodic["dev/EM"]
    # The same command with more steps resumes from the last checkpoint.
    res = _main(*common, "--config.train.num_train_steps=6")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Resumed from step 4 " in res.stderr
    steps = [json.loads(ln)["step"] for ln in (run / "metrics.jsonl").read_text().splitlines()
             if '"kind": "train"' in ln]
    assert steps == [2, 4, 6]
    # An answer whose text is not in its passage: one line naming the file and the question, exit status 1.
    _bad(tmp_path / "m", [{"text": "Sài Gòn", "answer_start": 3}])
    res = _main("--config", "configs/viquad/reader.py:viquad", "--workdir", tmp_path / "run2",
                f"--config.data.data_dir={tmp_path / 'tfds2'}", f"--config.data.manual_dir={tmp_path / 'm'}")
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr[-3000:]
    # TFDS's progress bars share stderr (carriage returns); the error is one line, the last.
    errors = re.findall(r"error: .*", res.stderr)
    assert len(errors) == 1 and res.stderr.rstrip().endswith(errors[0]), res.stderr[-3000:]
    assert errors[0].startswith("error: AnswerSpanError: ") and "train_ViQuAD.json: question bad: answer 0" in errors[0]
