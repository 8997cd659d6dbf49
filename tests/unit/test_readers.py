"""The ViQuAD readers' parts against numpy and hand computations: the syllable vocabulary, the exact-match features
on a Vietnamese example, the BiLSTM, DrQA's aligned question embedding, QANet's context-query attention, the
question/passage split of the joint sequence, each encoder's shapes, the schedule warning and the final table."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from openvivqa_jax.reading import features as feats
from openvivqa_jax.reading.vocab import WordTokenizer, fold_diacritics, strip_tones, train_word_tokenizer


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


# ------------------------------------------------------------------------------------------- vocabulary


def test_match_forms_by_hand():
    assert strip_tones("hòa") == "hoa" and strip_tones("người") == "ngươi" and strip_tones("việt") == "viêt"
    assert fold_diacritics("đường") == "duong" and fold_diacritics("Việt") == "Viet"


def test_word_tokenizer_offsets_and_file(tmp_path):
    tok = train_word_tokenizer(["hà nội là thủ đô", "thủ đô của việt nam"], str(tmp_path / "words.json"),
                               min_count=2)
    # Seen twice: "thủ", "đô" (ids 4, 5 by count then alphabet); the rest unknown (1).
    assert tok.words[4:] == ["thủ", "đô"] and tok.encode("thủ đô hà") == (4, 5, 1)
    assert tok.encode_with_offsets(" thủ  đô") == ((4, 5), (1, 6), (4, 8))
    assert WordTokenizer.load(str(tmp_path / "words.json")).words == tok.words
    assert tok.char_ids("đô") == (2 + tok.chars.index("đ"), 2 + tok.chars.index("ô")) and tok.char_ids("x") == (1,)


def test_exact_match_features_on_a_vietnamese_example(tmp_path):
    """Computed by hand: the passage's ``Việt`` matches the question's ``viet`` only without diacritics, ``Hóa``
    the question's ``hòa`` without tone marks; punctuation never matches; capitals are flagged."""
    passage = "Hà Nội là thủ đô của Việt Nam, gần sông Hóa."
    question = "thủ đô của viet nam gần sông hòa không ?"
    tok = train_word_tokenizer([question, "hà nội là thủ đô của việt nam , gần sông hóa ."],
                               str(tmp_path / "w.json"))
    rec = {"question": question, "passage": passage, "answer_starts": [0], "answer_ends": [6]}
    w = feats.make_windows(tok, [rec], max_seq_len=40, max_question_len=12, doc_stride=8, train=True)
    p = w.token_features[0][w.passage_mask[0]].tolist()
    words = ["Hà", "Nội", "là", "thủ", "đô", "của", "Việt", "Nam", ",", "gần", "sông", "Hóa", "."]
    want = {"Hà": [0, 0, 0, 1], "Nội": [0, 0, 0, 1], "là": [0, 0, 0, 0], "thủ": [1, 1, 1, 0], "đô": [1, 1, 1, 0],
            "của": [1, 1, 1, 0], "Việt": [0, 0, 1, 1], "Nam": [1, 1, 1, 1], ",": [0, 0, 0, 0],
            "gần": [1, 1, 1, 0], "sông": [1, 1, 1, 0], "Hóa": [0, 1, 1, 1], ".": [0, 0, 0, 0]}
    assert p == [want[x] for x in words]
    q = w.token_features[0][1:1 + len(question.split())].tolist()
    assert q == [[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 0], [0, 0, 1, 0], [1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 0],
                 [0, 1, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    # Labels: the answer "Hà Nội" is the first two passage tokens; character ids follow each position's syllable.
    p0 = int(np.argmax(w.passage_mask[0]))
    assert (w.start_positions[0], w.end_positions[0]) == (p0, p0 + 1)
    b = w.batch(np.array([0]))
    assert b["char_ids"][0, p0, :2].tolist() == list(tok.char_ids("hà")) and b["char_ids"][0, 0].sum() == 0


# ------------------------------------------------------------------------------------------- BiLSTM


def _np_lstm(x, w_in, w_rec, bias, n):
    h_dim = w_rec.shape[0]
    h, c, out = np.zeros(h_dim), np.zeros(h_dim), []
    for t in range(n):
        g = x[t] @ w_in + h @ w_rec + bias
        i, f, u, o = (g[k * h_dim:(k + 1) * h_dim] for k in range(4))
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(u)
        h = _sigmoid(o) * np.tanh(c)
        out.append(h)
    return np.array(out)


def test_bilstm_matches_numpy_lstm_in_both_directions():
    from openvivqa_jax.reading.embed import BiLSTM

    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 7, 5)).astype(np.float32)
    lengths = np.array([7, 4, 1])
    m = BiLSTM(5, 6, rngs=nnx.Rngs(1))
    m.bias[...] = jnp.asarray(rng.normal(size=(2, 24)), jnp.float32)
    got = np.asarray(m(jnp.asarray(x), jnp.asarray(lengths)))
    w_in, w_rec, bias = (np.asarray(v[...], np.float64) for v in (m.w_in, m.w_rec, m.bias))
    for b, n in enumerate(lengths):
        fwd = _np_lstm(x[b].astype(np.float64), w_in[0], w_rec[0], bias[0], n)
        bwd = _np_lstm(x[b, :n][::-1].astype(np.float64), w_in[1], w_rec[1], bias[1], n)[::-1]
        np.testing.assert_allclose(got[b, :n], np.concatenate([fwd, bwd], -1), atol=1e-5)
        assert np.all(got[b, n:] == 0)


# ------------------------------------------------------------------------------------------- attention


def test_aligned_question_embedding_matches_numpy():
    from openvivqa_jax.reading.drqa import aligned_question_embedding

    rng = np.random.default_rng(1)
    pp, pq, eq = rng.normal(size=(2, 4, 3)), rng.normal(size=(2, 5, 3)), rng.normal(size=(2, 5, 6))
    q_mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    got = np.asarray(aligned_question_embedding(*(jnp.asarray(a, jnp.float32) for a in (pp, pq, eq)),
                                                jnp.asarray(q_mask)))
    for b in range(2):
        s = pp[b] @ pq[b][q_mask[b]].T
        a = np.exp(s - s.max(1, keepdims=True))
        a /= a.sum(1, keepdims=True)
        np.testing.assert_allclose(got[b], a @ eq[b][q_mask[b]], rtol=1e-4, atol=1e-5)


def test_context_query_attention_matches_numpy():
    from openvivqa_jax.reading.qanet import context_query_attention

    rng = np.random.default_rng(2)
    c, q = rng.normal(size=(2, 6, 4)), rng.normal(size=(2, 3, 4))
    w_c, w_q, w_cq = rng.normal(size=4), rng.normal(size=4), rng.normal(size=4)
    c_mask = np.array([[1] * 6, [1] * 4 + [0] * 2], bool)
    q_mask = np.array([[1, 1, 1], [1, 1, 0]], bool)
    got = np.asarray(context_query_attention(*(jnp.asarray(a, jnp.float32) for a in (c, q)), jnp.asarray(c_mask),
                                             jnp.asarray(q_mask), *(jnp.asarray(a, jnp.float32) for a in (w_c, w_q, w_cq))))

    def softmax(x, axis):
        e = np.exp(x - x.max(axis, keepdims=True))
        return e / e.sum(axis, keepdims=True)

    for b in range(2):
        cb, qb = c[b][c_mask[b]], q[b][q_mask[b]]
        s = np.array([[w_c @ ci + w_q @ qj + w_cq @ (ci * qj) for qj in qb] for ci in cb])
        s_bar, s_bbar = softmax(s, 1), softmax(s, 0)
        a = s_bar @ qb
        bb = s_bar @ s_bbar.T @ cb
        np.testing.assert_allclose(got[b, :len(cb)], np.concatenate([cb, a, cb * a, cb * bb], -1), rtol=1e-4,
                                   atol=1e-5)


def test_gather_and_scatter_of_the_joint_sequence():
    from openvivqa_jax.reading.embed import gather_passage, gather_question, scatter_passage

    # [BOS] q q [SEP] p p p [EOS] pad / [BOS] q [SEP] p [EOS] pad pad pad
    pm = np.zeros((2, 9), bool)
    pm[0, 4:7], pm[1, 3:4] = True, True
    x = jnp.arange(18, dtype=jnp.float32).reshape(2, 9, 1)
    q, qm = gather_question(x, jnp.asarray(pm), 3)
    assert q[..., 0].tolist() == [[1, 2, 3], [10, 11, 12]] and qm.tolist() == [[1, 1, 0], [1, 0, 0]]
    p, pmask = gather_passage(x, jnp.asarray(pm), 6)
    assert p[0, :3, 0].tolist() == [4, 5, 6] and p[1, :1, 0].tolist() == [12] and pmask.sum(1).tolist() == [3, 1]
    back = np.asarray(scatter_passage(p, jnp.asarray(pm)))[..., 0]
    np.testing.assert_array_equal(back, np.where(pm, np.asarray(x)[..., 0], 0))


# ------------------------------------------------------------------------------------------- encoders


def _model_cfg(encoder: str, **kw):
    m = dict(encoder=encoder, d_model=16, num_heads=2, ffn_dim=16, num_layers=1, dropout=0.1, max_seq_len=24,
             max_question_len=6, dtype="float32", word_dim=8, hidden=5, char_dim=4, char_channels=6, char_kernel=3,
             match_features=True, embed_convs=2, embed_kernel=3, model_convs=1, model_kernel=3)
    m.update(kw)
    return ml_collections.ConfigDict(m)


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    tok = train_word_tokenizer(["hà nội là thủ đô của việt nam .", "thủ đô là gì ?"],
                               str(tmp_path_factory.mktemp("w") / "w.json"))
    recs = [{"question": "thủ đô là gì ?", "passage": "Hà Nội là thủ đô của Việt Nam.", "answer_starts": [0],
             "answer_ends": [6]},
            {"question": "gì ?", "passage": "Thủ đô là Hà Nội.", "answer_starts": [10], "answer_ends": [16]}]
    w = feats.make_windows(tok, recs, max_seq_len=24, max_question_len=6, doc_stride=8, train=True)
    return tok, {k: jnp.asarray(v) for k, v in w.batch(np.arange(len(w))).items()}


@pytest.mark.parametrize("encoder, out_dim, extra", [("drqa", 20, {}), ("qanet", 48, {}), ("transformer", 16, {}),
                                                     ("transformer", 16, {"relative_buckets": 8}),
                                                     ("transformer", 16, {"aligned_question": True})])
def test_encoder_shapes_masks_and_loss(batch, encoder, out_dim, extra):
    """Each encoder gives ``(B, L, out_dim)`` to the shared head; logits are NEG_INF off the passage; the loss
    and its gradient are finite; dropout changes the training output only."""
    from openvivqa_jax.models.layers import NEG_INF
    from openvivqa_jax.reading.model import build_reader, span_loss

    tok, b = batch
    reader = build_reader(_model_cfg(encoder, **extra), tok.vocab_size, num_chars=tok.num_chars)
    if "relative_buckets" in extra:  # the relative bias replaces the position embedding; its gradient below
        assert reader.encoder.pos_embedding is None and reader.encoder.relative.embedding.embedding.shape == (8, 2)
    assert reader.span_head.kernel.shape == (out_dim, 2)
    s, e = reader(b)
    pm = np.asarray(b["passage_mask"])
    assert s.shape == e.shape == pm.shape
    assert np.all(np.asarray(s)[~pm] == NEG_INF) and np.all(np.asarray(e)[pm] > NEG_INF)
    g, p = nnx.split(reader, nnx.Param)

    def loss(p, deterministic):
        s, e = nnx.merge(g, p)(b, deterministic=deterministic, rngs=nnx.Rngs(dropout=0))
        return span_loss(s, e, b["start_positions"], b["end_positions"])[0]

    value, grads = jax.value_and_grad(loss)(p, False)
    assert np.isfinite(float(value)) and all(np.all(np.isfinite(x)) for x in jax.tree.leaves(grads))
    if "relative_buckets" in extra:
        assert np.abs(np.asarray(grads["encoder"]["relative"]["embedding"]["embedding"].value)).sum() > 0
    if "aligned_question" in extra:
        assert np.abs(np.asarray(grads["encoder"]["align"]["kernel"].value)).sum() > 0
    assert float(loss(p, True)) == pytest.approx(float(span_loss(s, e, b["start_positions"],
                                                                 b["end_positions"])[0]), rel=1e-6)


def test_question_alignment_is_drqa_eq2_over_the_question_tokens():
    """At each passage position, the softmax over the question tokens (between BOS and the first EOS) of the
    ReLU-projected dot products weights their embeddings (numpy, from the formula); zero off the passage."""
    from openvivqa_jax.reading.model import question_alignment

    rng = np.random.default_rng(0)
    emb = rng.normal(size=(2, 9, 4)).astype(np.float32)
    w = rng.normal(size=(4, 3)).astype(np.float32)
    pm = np.zeros((2, 9), bool)
    pm[0, 4:8] = True  # [BOS] q q [EOS] p p p p [EOS]
    pm[1, 3:6] = True  # [BOS] q [EOS] p p p [EOS] pad pad
    got = np.asarray(question_alignment(jnp.asarray(emb), jnp.asarray(pm), lambda x: x @ w))
    want = np.zeros_like(emb)
    for b, q in ((0, [1, 2]), (1, [1])):
        h = np.maximum(emb[b] @ w, 0)
        for i in np.flatnonzero(pm[b]):
            a = np.exp(h[i] @ h[q].T)
            want[b, i] = (a / a.sum()) @ emb[b, q]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_drqa_passage_encoding_ignores_padding_and_question_position(batch):
    """The passage's encoding does not change when the padding after it changes (the backward LSTM reads only
    real tokens)."""
    from openvivqa_jax.reading.model import build_reader

    tok, b = batch
    reader = build_reader(_model_cfg("drqa", max_seq_len=30), tok.vocab_size, num_chars=tok.num_chars)
    s, _ = reader(b)
    pad = {k: jnp.concatenate([v, jnp.zeros((v.shape[0], 6) + v.shape[2:], v.dtype)], 1) if v.ndim > 1 else v
           for k, v in b.items()}
    s2, _ = reader(pad)
    pm = np.asarray(b["passage_mask"])
    np.testing.assert_allclose(np.asarray(s)[pm], np.asarray(s2)[:, :24][pm], rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------- run messages


def test_schedule_warning_names_the_peak_and_the_fix():
    from openvivqa_jax.reading.train import warn_schedule

    cfg = ml_collections.ConfigDict({"model": {"d_model": 64}, "train": {
        "schedule": "noam", "lr_scale": 1.0, "warmup_steps": 200, "num_train_steps": 1000, "learning_rate": 1e-3}})
    assert warn_schedule(cfg) is None  # the synthetic quick start: 64^-0.5 * 200^-0.5 = 8.84e-3
    cfg.train.warmup_steps = 50
    msg = warn_schedule(cfg)
    # 64^-0.5 * 50^-0.5 = 1.768e-2; lr_scale 1e-2 / 1.768e-2 = 0.566.
    assert "peaks at a learning rate of 1.77e-02 at step 50" in msg and "lr_scale=0.566" in msg
    cfg.train.schedule = "warmup_constant"
    assert warn_schedule(cfg) is None
    cfg.train.warmup_steps = 2000
    assert "ends in warmup at a learning rate of 5.00e-04" in warn_schedule(cfg)


def test_comparison_table_has_the_run_the_human_row_and_the_paper():
    from openvivqa_jax.reading.report import comparison_table

    res = {"dev": {"overall": {"EM": 0.5, "F1": 0.625}, "human_performance": {"overall": {"EM": 0.8565, "F1": 0.9519}}}}
    lines = comparison_table("this run", res).splitlines()
    assert lines[2].split() == ["this", "run", "50.00", "n/a", "62.50", "n/a"]
    assert lines[3].split()[-4:] == ["85.65", "n/a", "95.19", "n/a"]
    assert any(ln.split()[-4:] == ["35.93", "35.61", "59.33", "58.67"] and ln.startswith("DrQA + FastText")
               for ln in lines)


def test_word_embedding_starts_from_a_fasttext_file_and_can_be_frozen(batch, tmp_path):
    """Rows of syllables in the ``.vec`` file are their vectors (the project's loader); the freeze regex names
    exactly the word embedding."""
    from openvivqa_jax.reading.model import build_reader
    from openvivqa_jax.reading.pretrained import WORD_EMBEDDING, initialize_word_vectors
    from openvivqa_jax.training.state import freeze_params

    tok, _ = batch
    vec = {"hà": np.arange(8) / 10, "nội": -np.arange(8) / 10}
    (tmp_path / "v.vec").write_text("2 8\n" + "".join(f"{w} {' '.join(map(str, v))}\n" for w, v in vec.items()),
                                    encoding="utf-8")
    m = _model_cfg("drqa")
    m.fasttext = ml_collections.ConfigDict({"path": str(tmp_path / "v.vec"), "freeze": True})
    reader = build_reader(m, tok.vocab_size, num_chars=tok.num_chars)
    before = np.asarray(reader.encoder.embed.embedding.embedding[...]).copy()
    assert initialize_word_vectors(reader, m, tok).startswith("word embedding: 2 of")
    after = np.asarray(reader.encoder.embed.embedding.embedding[...])
    for w, v in vec.items():
        np.testing.assert_allclose(after[tok.encode(w)[0]], v, rtol=1e-6)
    other = tok.encode("là")[0]
    assert not np.allclose(after[other], before[other]) and np.allclose(after[other] / before[other],
                                                                        after[other][0] / before[other][0])
    import optax

    params = nnx.state(reader, nnx.Param)
    tx = freeze_params(optax.sgd(1.0), params, WORD_EMBEDDING)
    grads = jax.tree.map(jnp.ones_like, params)
    upd, _ = tx.update(grads, tx.init(params), params)
    flat = {"/".join(map(str, k)): v for k, v in nnx.to_flat_state(upd)}
    frozen = [k for k, v in flat.items() if not np.any(np.asarray(v[...]))]
    assert frozen == ["encoder/embed/embedding/embedding"]


def test_depthwise_convolution_matches_numpy():
    from openvivqa_jax.reading.qanet import depthwise_conv

    rng = np.random.default_rng(3)
    x, w = rng.normal(size=(2, 6, 3)), rng.normal(size=(5, 3))
    got = np.asarray(depthwise_conv(jnp.asarray(x, jnp.float32), jnp.asarray(w, jnp.float32)))
    xp = np.pad(x, ((0, 0), (2, 2), (0, 0)))
    want = np.stack([sum(xp[:, t + j] * w[j] for j in range(5)) for t in range(6)], 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
