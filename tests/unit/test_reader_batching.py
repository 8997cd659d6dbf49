"""The span reader's batches and its scoring of another SQuAD-form file: the length-bucketed training stream
against the epochs' permutations built here, its resume, the evaluation order, bucketed predictions against
unbucketed ones, and the SQuAD file reader against the project's scorer (repeated ids)."""

from __future__ import annotations

import json

import ml_collections
import numpy as np
import pytest

from openvivqa_jax.reading import features as feats
from openvivqa_jax.reading.batching import WindowStream, bucket_length, eval_batches
from openvivqa_jax.reading.vocab import train_word_tokenizer

# ------------------------------------------------------------------------------------------- the stream


def _stream_positions(n: int, seed: int, count: int) -> np.ndarray:
    """The epochs' permutations joined end to end, built apart from the code under test."""
    out = np.concatenate([np.random.default_rng(seed + e).permutation(n) for e in range(count // n + 2)])
    return out[:count]


def test_unbucketed_stream_reads_the_epochs_in_order():
    s = WindowStream(np.full(10, 7), 4, seed=3, max_len=16)
    got = [s.next() for _ in range(6)]
    want = _stream_positions(10, 3, 24).reshape(6, 4)
    assert [b[1] for b in got] == [16] * 6
    np.testing.assert_array_equal(np.stack([b[0] for b in got]), want)


def test_bucketed_stream_reads_every_window_once_per_epoch_in_batches_of_neighbours():
    rng = np.random.default_rng(0)
    lengths = rng.integers(20, 97, size=103)
    bs, pool = 4, 5
    s = WindowStream(lengths, bs, seed=1, bucket_width=16, max_len=96, pool_batches=pool)
    pools = 6  # 120 stream positions: epoch 0 whole, 17 of epoch 1
    batches = [s.next() for _ in range(pools * pool)]
    ids = np.concatenate([b[0] for b in batches])
    # Each pool holds exactly the pool's stream positions, in another order.
    want = _stream_positions(103, 1, pools * pool * bs)
    for p in range(pools):
        sl = slice(p * pool * bs, (p + 1) * pool * bs)
        assert sorted(ids[sl].tolist()) == sorted(want[sl].tolist())
    # A batch is a run of neighbours in its pool's length order, padded to its bucket.
    for p in range(pools):
        pool_lengths = np.sort(lengths[want[p * pool * bs:(p + 1) * pool * bs]])
        runs = {tuple(pool_lengths[k * bs:(k + 1) * bs]) for k in range(pool)}
        for idx, padded in batches[p * pool:(p + 1) * pool]:
            assert tuple(np.sort(lengths[idx])) in runs
            assert padded == min(96, -(-lengths[idx].max() // 16) * 16) and padded >= lengths[idx].max()


def test_bucketed_stream_resumes_where_it_stopped():
    lengths = np.random.default_rng(1).integers(5, 60, size=37)
    a = WindowStream(lengths, 3, seed=2, bucket_width=8, max_len=64, pool_batches=4)
    for _ in range(9):
        a.next()
    state = json.loads(json.dumps(a.get_state()))  # as the checkpoint stores it
    b = WindowStream(lengths, 3, seed=2, bucket_width=8, max_len=64, pool_batches=4)
    b.set_state(state)
    for _ in range(20):
        (ia, la), (ib, lb) = a.next(), b.next()
        np.testing.assert_array_equal(ia, ib)
        assert la == lb
    assert state == {"batches": 9, "epoch": 0, "position": 27}
    # A checkpoint written before the batch count was kept: epoch and position of a stream read B at a time.
    c = WindowStream(lengths, 3, seed=2)
    c.set_state({"epoch": 1, "position": 8})
    assert c.batches == (37 + 8) // 3


def test_bucket_length_and_evaluation_batches():
    assert bucket_length(np.array([33, 2]), 32, 320) == 64 and bucket_length(np.array([319]), 32, 320) == 320
    assert bucket_length(np.array([3]), 0, 320) == 320
    lengths = np.array([50, 10, 33, 70, 12, 64, 20])
    got = eval_batches(lengths, 3, 16, 80)
    assert [(b[0].tolist(), b[1], b[2]) for b in got] == [([1, 4, 6], 32, 3), ([2, 0, 5], 64, 3),
                                                          ([3, 3, 3], 80, 1)]
    plain = eval_batches(lengths, 3, 0, 80)
    assert [(b[0].tolist(), b[1], b[2]) for b in plain] == [([0, 1, 2], 80, 3), ([3, 4, 5], 80, 3),
                                                            ([6, 6, 6], 80, 1)]


# ------------------------------------------------------------------------------------------- windows


PASSAGES = ["Hà Nội là thủ đô của Việt Nam, thành phố lớn thứ hai sau Thành phố Hồ Chí Minh.",
            "Sông Hồng chảy qua Hà Nội.",
            "Phở là món ăn nổi tiếng của Hà Nội; một bát phở giá 40.000đ ở phố cổ, gần hồ Hoàn Kiếm."]
QUESTIONS = ["thủ đô của việt nam là gì ?", "sông nào chảy qua hà nội ?", "một bát phở giá bao nhiêu ?"]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    from openvivqa_jax.text.normalize import normalize_text

    return train_word_tokenizer([normalize_text(p) for p in PASSAGES] + QUESTIONS,
                                str(tmp_path_factory.mktemp("w") / "w.json"))


def _records():
    return [{"question_id": f"q{i}", "question": q, "passage": p, "answer_texts": []}
            for i, (q, p) in enumerate(zip(QUESTIONS, PASSAGES))]


def test_batch_cuts_to_the_bucket_and_refuses_to_cut_real_tokens(tok):
    w = feats.make_windows(tok, _records(), max_seq_len=48, max_question_len=10, doc_stride=8, train=False)
    lengths = w.lengths()
    assert lengths.tolist() == w.input_mask.sum(1).tolist() and lengths.max() < 48
    b = w.batch(np.array([1, 0]), int(lengths[[0, 1]].max()))
    full = w.batch(np.array([1, 0]))
    for k in ("input_ids", "segment_ids", "input_mask", "passage_mask", "token_features", "char_ids"):
        n = b[k].shape[1]
        np.testing.assert_array_equal(b[k], full[k][:, :n])
        assert not full["input_mask"][:, n:].any()
    with pytest.raises(ValueError, match="cuts real tokens"):
        w.batch(np.array([0]), int(lengths[0]) - 1)


@pytest.mark.parametrize("encoder", ["drqa", "qanet"])
def test_bucketed_predictions_equal_the_padded_ones(tok, encoder):
    """A window's spans and scores do not depend on the padding its batch carries."""
    from flax import nnx

    from openvivqa_jax.reading.evals import predict_split
    from openvivqa_jax.reading.model import build_reader

    m = ml_collections.ConfigDict(dict(
        encoder=encoder, d_model=16, num_heads=2, ffn_dim=16, num_layers=1, dropout=0.0, max_seq_len=64,
        max_question_len=10, doc_stride=8, max_answer_len=5, dtype="float32", word_dim=8, hidden=5, char_dim=4,
        char_channels=0, char_kernel=3, match_features=True, embed_convs=1, embed_kernel=3, model_convs=1,
        model_kernel=3))
    cfg = ml_collections.ConfigDict({"model": m, "train": {"bucket_width": 0}, "eval": {"batch_size": 2}})
    reader = build_reader(m, tok.vocab_size, seed=1)
    g, p = nnx.split(reader, nnx.Param)
    recs = _records()
    plain, plain_spans = predict_split(cfg, g, p, tok, recs)
    cfg.train.bucket_width = 8
    bucketed, bucketed_spans = predict_split(cfg, g, p, tok, recs)
    assert [r["prediction"] for r in bucketed] == [r["prediction"] for r in plain]
    for qid, sp in plain_spans.items():
        assert (bucketed_spans[qid]["start"], bucketed_spans[qid]["end"]) == (sp["start"], sp["end"])
        assert bucketed_spans[qid]["score"] == pytest.approx(sp["score"], rel=1e-4, abs=1e-4)


# ------------------------------------------------------------------------------------------- another file


def _squad(qas_by_paragraph):
    return {"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": c, "qas": qas} for c, qas in qas_by_paragraph]}]}


def test_squad_file_reader_renames_and_drops_repeats_as_the_scorer_does(tmp_path):
    from openvivqa_jax.evaluation import formats
    from openvivqa_jax.reading.predict import read_squad_file

    qa = lambda i, q, a: {"id": i, "question": q, "answers": [{"text": a, "answer_start": 0}]}  # noqa: E731
    data = _squad([(PASSAGES[0], [qa("a", "Thủ đô của Việt Nam là gì?", "Hà Nội"),
                                  qa("a", "Thủ đô của Việt Nam là gì?", "Hà Nội")]),  # exact duplicate
                   (PASSAGES[1], [qa("a", "Sông nào chảy qua Hà Nội?", "Sông Hồng"),  # another question
                                  {"id": "b", "question": "Sông nào?", "answers": [], "is_impossible": True}])])
    path = tmp_path / "other.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    records, counts = read_squad_file(str(path))
    assert [r["question_id"] for r in records] == ["a", "a#2", "b"]
    assert records[0]["question"] == "thủ đô của việt nam là gì ?" and records[1]["passage"] == PASSAGES[1]
    assert [r["answer_texts"] for r in records] == [["Hà Nội"], ["Sông Hồng"], []]
    assert counts == {"questions": 3, "without_answers": 1,
                      "repairs": {"exact_duplicate_dropped": 1, "repeated_id_renamed": 1}}
    ref = formats.load_references(str(path))
    assert set(ref.answers) == {"a", "a#2", "b"}


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["data"][0]["paragraphs"][0].update(context=" "), r"data\[0\]\.paragraphs\[0\]: empty or missing"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0].pop("id"), r"qas\[0\]: a question needs an 'id'"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0].update(question=""), r"\(id 'x'\): empty or missing"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0].update(answers="Hà Nội"), r"'answers' must be a list"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"].append(
        {"id": "x", "question": "thủ đô?", "answers": [{"text": "Việt Nam"}]}), r"same question and other answers"),
    (lambda d: d.pop("data"), r"expected \{\"data\""),
])
def test_squad_file_reader_errors_are_one_line_naming_the_record(tmp_path, edit, message):
    from openvivqa_jax.reading import ReadingError
    from openvivqa_jax.reading.predict import read_squad_file

    data = _squad([(PASSAGES[0], [{"id": "x", "question": "thủ đô?", "answers": [{"text": "Hà Nội"}]}])])
    edit(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(ReadingError, match=message) as e:
        read_squad_file(str(path))
    assert "\n" not in str(e.value) and str(path) in str(e.value)
