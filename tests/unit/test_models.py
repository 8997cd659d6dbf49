"""The model zoo: every model builds, runs forward/loss/grad; each key mechanism against numpy.

Checked against values computed here independently (numpy):
FST's LSTM question vector and stacked attention (eq. 5-6); QuMLAG's question-guided attention and its
masking; M4C's prefix-LM mask (no leak of later answer tokens into the prefix or earlier steps), its
pointer scores (eq. 11) and tied previous-output embeddings; the classifier losses and their gradients
(class 0 and LoRRA's OCR classes trained, OCR padding excluded); the answer list's soft scores.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from conftest import ROOT, assert_cached_decoding_matches, random_batch, tiny_model_config
from openvivqa_jax.vqa import decoding
from openvivqa_jax.models import MODEL_REGISTRY, build_model
from openvivqa_jax.models import m4c as m4c_module
from openvivqa_jax.models.base import pointer_bce_loss, pointer_softmax_loss
from openvivqa_jax.models.classifier import soft_bce_loss, soft_cross_entropy_loss
from openvivqa_jax.models.encoders import glimpse_vectors, stacked_fusion
from openvivqa_jax.param_count import config_rows, count_params, format_table
from openvivqa_jax.text.answer_list import AnswerList

V = 40
ALL = sorted(MODEL_REGISTRY)


def _np(x):
    return np.asarray(x, np.float64)


def _model(name, vocab=V, seed=0, **overrides):
    cfg = tiny_model_config(name)
    for k, v in overrides.items():
        cfg.model[k] = v
    return cfg, build_model(cfg.model, vocab, seed=seed)


def _assert_only_added(base, grown, added: set) -> dict:
    """Asserts that model ``grown`` has the parameters of ``base``, equal, plus the top-level entries ``added``
    (an option's modules made last, so that a seed gives the model without them the same parameters); returns
    ``grown``'s parameters."""
    p0, p1 = nnx.to_pure_dict(nnx.state(base, nnx.Param)), nnx.to_pure_dict(nnx.state(grown, nnx.Param))
    assert set(p1) - set(p0) == added and set(p0) <= set(p1)
    for k in p0:
        jax.tree.map(np.testing.assert_array_equal, p0[k], p1[k])
    return p1


# ----------------------------------------------------------------------------- numpy references
def np_layer_norm(x, ln, eps=1e-6):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * _np(ln.scale[...]) + _np(ln.bias[...])


def np_linear(x, lin):
    return x @ _np(lin.kernel[...]) + (_np(lin.bias[...]) if lin.bias is not None else 0.0)


def np_softmax(z, axis=-1):
    z = z - z.max(axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis, keepdims=True)


def np_mha(attn, q_in, kv_in):
    """Unmasked attention of ``q_in`` (q, d) over ``kv_in`` (k, d): the caller passes only valid keys."""
    H, hd = attn.num_heads, attn.head_dim
    q = np_linear(q_in, attn.query).reshape(len(q_in), H, hd)
    k = np_linear(kv_in, attn.key).reshape(len(kv_in), H, hd)
    v = np_linear(kv_in, attn.value).reshape(len(kv_in), H, hd)
    p = np_softmax(np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd))
    return np_linear(np.einsum("hqk,khd->qhd", p, v).reshape(len(q_in), H * hd), attn.out)


def np_cross_block(blk, x, ctx):
    """Pre-LN CrossBlock: ``x`` (q, d) attends to ``ctx`` (k, d), then the FFN, both residual."""
    x = x + np_mha(blk.attn, np_layer_norm(x, blk.norm_q), np_layer_norm(ctx, blk.norm_kv))
    h = np.maximum(np_linear(np_layer_norm(x, blk.norm_ffn), blk.ffn.wi), 0)
    return x + np_linear(h, blk.ffn.wo)


def np_lstm_final(cell, x, length):
    """OptimizedLSTMCell run over ``x[:length]`` (x: (l, in)); gates i, f, g, o. Returns the last h."""
    n = cell.hidden_features
    h, c = np.zeros(n), np.zeros(n)
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    for t in range(length):
        y = x[t] @ _np(cell.dense_i.kernel[...]) + h @ _np(cell.dense_h.kernel[...]) + _np(cell.dense_h.bias[...])
        i, f, g, o = np.split(y, 4)
        c = sig(f) * c + sig(i) * np.tanh(g)
        h = sig(o) * np.tanh(c)
    return h


# ----------------------------------------------------------------------------- every model
def _loss(model, logits, batch):
    if model.is_generator:
        return pointer_softmax_loss(logits, batch["target_vocab"], batch["target_ocr"], batch["target_mask"])[0]
    return model.loss(logits, batch)[0]


# Parameters that legitimately get no gradient: EncoderBlock inherits CrossBlock's ``norm_kv`` but
# normalizes keys with ``norm_q`` (layers.py); vocabulary-only decoders (FST, QuMLAG) feed zero OCR
# features, so ``decoder.ocr_in``'s kernel is unused.
_UNUSED = ("norm_kv", "'decoder']['ocr_in']['kernel']")


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL)
def test_model_forward_loss_grad(name):
    cfg, model = _model(name)
    batch = random_batch(cfg, V, batch=3, seed=1)
    m = cfg.model
    if model.is_generator:
        batch["decoder_in"][:, 2] = V + 1  # a copy step feeds back OCR slot 1
        batch["target_ocr"][:, 1, 1] = True
    graphdef, params = nnx.split(model, nnx.Param)

    @jax.jit
    def loss_and_grad(params, key):
        def f(p):
            mdl = nnx.merge(graphdef, p)
            logits = mdl(batch, deterministic=False, rngs=nnx.Rngs(dropout=key))
            return _loss(mdl, logits, batch), logits
        return jax.value_and_grad(f, has_aux=True)(params)

    (loss, logits), grads = loss_and_grad(params, jax.random.key(0))
    if model.is_generator:
        assert logits.shape == (3, m.max_answer_len, V + m.num_ocr)
    else:
        extra = m.num_ocr if name == "lorra" else 0
        assert logits.shape == (3, m.num_answers + extra)
        assert model.predict(logits, batch).shape == (3,)
    assert logits.dtype == jnp.float32
    assert np.isfinite(float(loss)) and float(loss) > 0
    dead = []
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        g = np.asarray(g)
        assert np.isfinite(g).all(), jax.tree_util.keystr(path)
        if not np.abs(g).max() > 0 and not any(u in jax.tree_util.keystr(path) for u in _UNUSED):
            dead.append(jax.tree_util.keystr(path))
    assert not dead, f"{name}: parameters without gradient: {dead}"


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in ("fst", "qumlag", "m4c") if n in MODEL_REGISTRY])
def test_jitted_beam_search_runs(name):
    cfg, model = _model(name)
    graphdef, params = nnx.split(model, nnx.Param)
    T = cfg.model.max_answer_len
    batch = random_batch(cfg, V, batch=2)
    ids, score = decoding.make_decode_fn(graphdef, max_len=T, beam_size=2)(params, batch)
    assert ids.shape == (2, T) and np.isfinite(np.asarray(score)).all()
    if name != "m4c":  # vocabulary-only decoders never copy
        assert (np.asarray(ids) < V).all()


def test_lstm_question_vector_is_final_hidden_state():
    cfg, model = _model("fst")
    batch = random_batch(cfg, V, batch=3, seed=2)
    lengths = batch["question_mask"].sum(-1)
    assert len(set(lengths.tolist())) > 1
    _, x_q = model.question(jnp.asarray(batch["question"]), jnp.asarray(batch["question_mask"]))
    emb = _np(model.question.embedding.embedding[...])[batch["question"]]
    for b in range(3):
        ref = np_lstm_final(model.question.lstm.cell, emb[b], int(lengths[b]))
        np.testing.assert_allclose(np.asarray(x_q[b]), ref, atol=1e-5)
    # Padding tokens do not change the question vector.
    b2 = dict(batch, question=np.where(batch["question_mask"], batch["question"], 7))
    _, x_q2 = model.question(jnp.asarray(b2["question"]), jnp.asarray(batch["question_mask"]))
    np.testing.assert_array_equal(np.asarray(x_q), np.asarray(x_q2))


# ----------------------------------------------------------------------------- FST eq. 5-6
def test_fst_stacked_attention_matches_eq5_eq6():
    cfg, model = _model("fst", num_glimpses=3)
    att = model.attention
    rng = np.random.default_rng(0)
    d, dq, s = cfg.model.d_model, cfg.model.lstm_dim, 6
    x_i = rng.standard_normal((2, s, d)).astype(np.float32)
    x_q = rng.standard_normal((2, dq)).astype(np.float32)
    mask = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 0, 1, 0, 0]], bool)
    a = np.asarray(att(jnp.asarray(x_i), jnp.asarray(mask), jnp.asarray(x_q)))
    x_f = np.asarray(stacked_fusion(jnp.asarray(a), jnp.asarray(x_i)))
    # eq. 5: a = softmax over the s positions of W_x relu(W_I x_I + W_Q x_Q), one column per glimpse.
    h = np.maximum(_np(x_i) @ _np(att.w_image.kernel[...]) + np_linear(_np(x_q), att.w_question)[:, None], 0)
    logits = np_linear(h, att.w_x)  # (2, s, G)
    ref_a = np.zeros_like(logits)
    for b in range(2):
        ref_a[b][mask[b]] = np_softmax(logits[b][mask[b]], axis=0)
    np.testing.assert_allclose(a, ref_a, atol=1e-5)
    assert a.shape == (2, s, 3)
    np.testing.assert_allclose(a.sum(1), 1.0, atol=1e-5)
    # eq. 6: x_f = sum_d a_d ⊗ x_I (broadcast multiplication of each glimpse over the rows of x_I).
    ref_f = sum(ref_a[:, :, g:g + 1] * _np(x_i) for g in range(3))
    np.testing.assert_allclose(x_f, ref_f, atol=1e-5)
    assert np.all(x_f[1][~mask[1]] == 0)


def test_fst_memory_and_question_dependence():
    cfg, model = _model("fst")
    batch = random_batch(cfg, V, batch=2, seed=3)
    enc = model.encode(batch)
    x_f, a, x_i, _, _ = model.fuse(batch)
    s = x_i.shape[1]
    assert enc["memory"].shape == (2, s + 1, cfg.model.d_model)  # [x_f; W x_Q]
    np.testing.assert_allclose(np.asarray(x_f), np.asarray(a.sum(-1, keepdims=True) * x_i), atol=1e-6)
    # The attention depends on the question (the ReLU of eq. 5; without it x_Q would cancel).
    b2 = dict(batch, question=(batch["question"] + 1) % V)
    assert np.abs(np.asarray(model.fuse(b2)[1]) - np.asarray(a)).max() > 1e-4
    _, plain = _model("fst", append_question=False)
    assert plain.encode(batch)["memory"].shape == (2, s, cfg.model.d_model)  # eq. 7: x_f only


# ----------------------------------------------------------------------------- QuMLAG guided attention
def test_qumlag_question_guided_attention_masking():
    cfg, model = _model("qumlag")
    ga = model.fusion.image_guided[0]
    rng = np.random.default_rng(1)
    d = cfg.model.d_model
    x = rng.standard_normal((2, 4, d)).astype(np.float32)
    ctx = rng.standard_normal((2, 5, d)).astype(np.float32)
    cmask = np.array([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], bool)
    out = np.asarray(ga(jnp.asarray(x), jnp.asarray(ctx), jnp.asarray(cmask)))
    for b in range(2):  # reference: attention over the valid question rows only
        np.testing.assert_allclose(out[b], np_cross_block(ga, _np(x[b]), _np(ctx[b][cmask[b]])), atol=1e-4)
    ctx2 = np.where(cmask[..., None], ctx, 100.0 * rng.standard_normal(ctx.shape)).astype(np.float32)
    out2 = np.asarray(ga(jnp.asarray(x), jnp.asarray(ctx2), jnp.asarray(cmask)))
    np.testing.assert_allclose(out2, out, atol=1e-6)


def test_qumlag_memory_is_image_then_question_with_masks():
    cfg = tiny_model_config("qumlag")
    cfg.model.vision.kind = "region"
    cfg.model.vision.num_regions = 4
    cfg.model.vision.region_dim = 12
    model = build_model(cfg.model, V)
    batch = random_batch(cfg, V, batch=2, seed=4)
    batch["region_mask"][1, 2:] = False
    enc = model.encode(batch)
    np.testing.assert_array_equal(np.asarray(enc["memory_mask"]),
                                  np.concatenate([batch["region_mask"], batch["question_mask"]], 1))
    assert enc["memory"].shape == (2, 4 + cfg.model.max_question_len, cfg.model.d_model)
    # Padding question tokens (and padding regions' features) change no valid memory row.
    b2 = dict(batch, question=np.where(batch["question_mask"], batch["question"], 9),
              region_features=np.where(batch["region_mask"][..., None], batch["region_features"], 50.0))
    enc2 = model.encode(b2)
    valid = np.asarray(enc["memory_mask"])
    np.testing.assert_allclose(np.asarray(enc2["memory"])[valid], np.asarray(enc["memory"])[valid], atol=1e-5)
    assert (np.asarray(model(batch))[..., V:] <= -1e8).all()  # vocabulary only


def test_mlpag_question_in_memory_appends_the_fused_question():
    """``model.question_in_memory``: the decoder's memory is the paper's (eq. 9 sum of OCR tokens and image)
    followed by the fused question tokens, masked by the question mask; the same parameters otherwise, and
    cached decoding still equals the full forward pass."""
    cfg, base = _model("mlpag")
    _, qmem = _model("mlpag", question_in_memory=True)
    assert jax.tree.structure(nnx.state(base, nnx.Param)) == jax.tree.structure(nnx.state(qmem, nnx.Param))
    batch = random_batch(cfg, V, batch=2, seed=5)
    batch["question_mask"][1, 3:] = False
    e0, e1 = base.encode(batch), qmem.encode(batch)
    m = e0["memory"].shape[1]
    np.testing.assert_array_equal(np.asarray(e1["memory"])[:, :m], np.asarray(e0["memory"]))
    np.testing.assert_array_equal(np.asarray(e1["memory_mask"]),
                                  np.concatenate([np.asarray(e0["memory_mask"]), batch["question_mask"]], 1))
    assert e1["memory"].shape == (2, m + cfg.model.max_question_len, cfg.model.d_model)
    assert_cached_decoding_matches(qmem, batch, cfg.model.max_answer_len, enc=e1)


def test_mlpag_question_over_image_grounds_the_question_in_memory():
    """``model.question_over_image``: after the fusion layers the question tokens attend over the image
    (MCAN's guided attention); every other parameter is the model's without it, the OCR and image rows of
    the memory are unchanged, the question rows are the guided-attention block applied to the question rows
    and image rows of the model without it (concat fusion shows the image rows), they change with the image
    (they do not without the option), and cached decoding equals the full forward pass."""
    kw = dict(fusion="concat", question_in_memory=True)
    cfg, qim = _model("mlpag", **kw)
    _, qoi = _model("mlpag", question_over_image=True, **kw)
    _assert_only_added(qim, qoi, {"question_image_attention"})
    batch = random_batch(cfg, V, batch=2, seed=7)
    batch["question_mask"][1, 4:] = False
    e0, e1 = qim.encode(batch), qoi.encode(batch)
    n, q = cfg.model.num_ocr, cfg.model.max_question_len
    mem0, mem1 = np.asarray(e0["memory"]), np.asarray(e1["memory"])
    np.testing.assert_array_equal(mem1[:, :-q], mem0[:, :-q])
    np.testing.assert_array_equal(np.asarray(e1["memory_mask"]), np.asarray(e0["memory_mask"]))
    i_mask = np.asarray(e0["memory_mask"])[:, n:-q]
    want = qoi.question_image_attention(e0["memory"][:, -q:], e0["memory"][:, n:-q], jnp.asarray(i_mask))
    np.testing.assert_allclose(mem1[:, -q:], np.asarray(want), atol=1e-5)
    other = dict(batch, image=np.ascontiguousarray(batch["image"][::-1]))  # the two examples' images swapped
    assert np.abs(np.asarray(qoi.encode(other)["memory"])[:, -q:] - mem1[:, -q:]).max() > 1e-3
    np.testing.assert_array_equal(np.asarray(qim.encode(other)["memory"])[:, -q:], mem0[:, -q:])
    assert_cached_decoding_matches(qoi, batch, cfg.model.max_answer_len, enc=e1)


# ----------------------------------------------------------------------------- M4C
def test_m4c_prefix_lm_mask_matches_definition():
    pm = np.array([[1, 1, 0, 1], [1, 0, 1, 1]], bool)
    L = 3
    got = np.asarray(m4c_module.prefix_lm_mask(jnp.asarray(pm), L))
    P, T = 4, 7
    ref = np.zeros((2, 1, T, T), bool)
    for b in range(2):
        for i in range(T):
            for j in range(T):
                if j < P:
                    ref[b, 0, i, j] = pm[b, j]
                else:
                    ref[b, 0, i, j] = i >= P and j <= i
    np.testing.assert_array_equal(got, ref)


def _m4c_batch(cfg, seed=5):
    batch = random_batch(cfg, V, batch=2, seed=seed)
    batch["ocr_mask"][1, 2] = False
    batch["decoder_in"][0, 1] = V + 0  # a copied OCR token
    return batch


def test_m4c_later_answer_token_changes_nothing_before_it():
    cfg, model = _model("m4c")
    batch = _m4c_batch(cfg)
    enc = model.encode(batch)
    P, L = enc["prefix"].shape[1], cfg.model.max_answer_len
    k = 3
    out = np.asarray(model.mmt(enc, jnp.asarray(batch["decoder_in"])))
    logits = np.asarray(model(batch))
    b2 = dict(batch, decoder_in=batch["decoder_in"].copy())
    b2["decoder_in"][:, k] = np.where(batch["decoder_in"][:, k] == 5, 6, 5)
    b2["decoder_in"][:, k + 1] = V + 1  # and a later copy step
    out2 = np.asarray(model.mmt(enc, jnp.asarray(b2["decoder_in"])))
    logits2 = np.asarray(model(b2))
    # Question, object and OCR outputs, and decoder outputs before position k, are unchanged...
    np.testing.assert_allclose(out2[:, :P + k], out[:, :P + k], atol=1e-6, rtol=0)
    np.testing.assert_allclose(logits2[:, :k], logits[:, :k], atol=1e-5, rtol=0)
    # ...and position k itself (whose input changed) is not.
    assert np.abs(out2[:, P + k] - out[:, P + k]).max() > 1e-3
    assert L > k + 1


def test_m4c_leaky_mask_would_be_caught(monkeypatch):
    # The authors' bug (the encoder sees decoder inputs) changes the prefix outputs: the check above has power.
    cfg, model = _model("m4c")
    batch = _m4c_batch(cfg)
    enc = model.encode(batch)
    P = enc["prefix"].shape[1]
    full = lambda pm, n: jnp.ones((pm.shape[0], 1, pm.shape[1] + n, pm.shape[1] + n), bool)  # noqa: E731
    monkeypatch.setattr(m4c_module, "prefix_lm_mask", full)
    d2 = batch["decoder_in"].copy()
    d2[:, 3] = 7
    a = np.asarray(model.mmt(enc, jnp.asarray(batch["decoder_in"])))[:, :P]
    b = np.asarray(model.mmt(enc, jnp.asarray(d2)))[:, :P]
    assert np.abs(a - b).max() > 1e-4


def test_m4c_pointer_scores_match_eq11():
    cfg, model = _model("m4c")
    batch = _m4c_batch(cfg)
    enc = model.encode(batch)
    x = _np(model.mmt(enc, jnp.asarray(batch["decoder_in"])))
    logits = np.asarray(model(batch))
    P, N, d = enc["prefix"].shape[1], cfg.model.num_ocr, cfg.model.d_model
    h, z_ocr = x[:, P:], x[:, P - N:P]
    # eq. 11 (M4C scale 1/sqrt(d)): (W_h h + b_h)(W_S x_S + b_S)^T, padding slots masked.
    ref = np.einsum("bld,bnd->bln", np_linear(h, model.ptr_query), np_linear(z_ocr, model.ptr_key)) / np.sqrt(d)
    valid = batch["ocr_mask"][:, None, :].repeat(h.shape[1], 1)
    np.testing.assert_allclose(logits[..., V:][valid], ref[valid], atol=1e-4, rtol=1e-4)
    assert (logits[..., V:][~valid] <= -1e8).all()
    np.testing.assert_allclose(logits[..., :V], np_linear(h, model.vocab_head), atol=1e-4, rtol=1e-4)


def test_m4c_previous_outputs_tied_to_classifier_and_ocr_embeddings():
    cfg, model = _model("m4c")
    batch = _m4c_batch(cfg)
    enc = model.encode(batch)
    ids = np.array([[2, 7, V + 1], [V + 0, 5, 3]], np.int32)
    got = np.asarray(model.embed_previous(jnp.asarray(ids), jnp.arange(3), enc["ocr_in"]))
    W = _np(model.vocab_head.kernel[...])  # (d, V): column k is the classifier row of piece k
    ocr_in = _np(enc["ocr_in"])
    pos, typ = _np(model.dec_pos.embedding[...]), _np(model.dec_type.embedding[...])
    for b in range(2):
        for t in range(3):
            i = ids[b, t]
            raw = np_layer_norm(ocr_in[b, i - V], model.prev_ocr_norm) if i >= V else \
                np_layer_norm(W[:, i], model.prev_vocab_norm)
            ref = raw + np_layer_norm(pos[t] + typ[int(i >= V)], model.dec_emb_norm)
            np.testing.assert_allclose(got[b, t], ref, atol=1e-5)


def test_m4c_bce_loss_runs_with_ocr_mask():
    cfg, model = _model("m4c")
    batch = _m4c_batch(cfg)
    batch["target_ocr"][0, 0, 0] = True
    loss, m = pointer_bce_loss(model(batch), batch["target_vocab"], batch["target_ocr"], batch["target_mask"],
                               batch["ocr_mask"])
    assert np.isfinite(float(loss)) and int(m["num_tokens"]) == batch["target_mask"].sum()


# ----------------------------------------------------------------------------- classifiers
def test_answer_list_build_scores_decode(tmp_path):
    answers = ["màu đỏ", "hai", "Màu Đỏ", "ba", "hai", "màu đỏ", "một", "", "ba"]
    al = AnswerList.build(answers, top_k=3)
    # counts: màu đỏ 3, hai 2, ba 2, một 1; the tie hai/ba is broken by the string.
    assert al.answers == ["màu đỏ", "ba", "hai"] and al.counts == [3, 2, 2]
    assert al.index("MÀU ĐỎ") == 0 and al.index("một") is None
    s = al.scores(["màu đỏ", "màu đỏ", "hai", "phở hà nội", "phở"], ["phở", "hai", "màu", "đỏ"], num_ocr=5)
    np.testing.assert_allclose(s, [2 / 3, 0, 1 / 3, 1 / 3, 1 / 3, 0, 0, 0], atol=1e-7)
    assert s.dtype == np.float32 and s.shape == (3 + 5,)
    assert al.scores(["ba"] * 5).tolist() == [0, 1, 0]
    assert al.decode(0, []) == "màu đỏ" and al.decode(4, ["phở", "hai"]) == "hai" and al.decode(7, ["x"]) == ""
    path = tmp_path / "answers.json"
    al.save(str(path))
    back = AnswerList.load(str(path))
    assert back.answers == al.answers and back.counts == al.counts
    path.write_text(json.dumps({"answers": ["a", "A"]}), encoding="utf-8")
    with pytest.raises(ValueError, match="answers.json"):
        AnswerList.load(str(path))
    with pytest.raises(ValueError, match="top_k"):
        AnswerList.build(answers, top_k=0)


def test_classifier_losses_match_numpy_and_train_class_zero():
    rng = np.random.default_rng(2)
    K, N = 4, 3
    logits = rng.standard_normal((3, K + N)).astype(np.float32)
    scores = np.zeros((3, K + N), np.float32)
    scores[0, 0] = 1.0  # class 0 is the only target
    scores[1, [0, K + 1]] = [1 / 3, 2 / 3]  # class 0 and OCR slot 1
    scores[2, K + 2] = 1.0  # a target on a padding OCR slot: excluded
    cmask = np.ones((3, K + N), bool)
    cmask[2, K + 2] = False
    z, sc = _np(logits), _np(scores) * cmask
    # softmax CE over soft targets (SAAA)
    p = np.where(cmask, np.exp(z), 0)
    p /= p.sum(-1, keepdims=True)
    tgt = sc / np.maximum(sc.sum(-1, keepdims=True), 1e-12)
    rows = sc.sum(-1) > 0  # row 2's only target is padding: it does not count
    ref_ce = -(np.where(cmask, tgt * np.log(np.where(cmask, p, 1)), 0)).sum(-1)[rows].mean()
    ce, mce = soft_cross_entropy_loss(jnp.asarray(logits), jnp.asarray(scores), jnp.asarray(cmask))
    assert float(ce) == pytest.approx(ref_ce, rel=1e-5) and int(mce["num_examples"]) == 2
    g = np.asarray(jax.grad(lambda x: soft_cross_entropy_loss(x, jnp.asarray(scores), jnp.asarray(cmask))[0])(
        jnp.asarray(logits)))
    ref_g = np.where(rows[:, None], p - tgt, 0) / rows.sum()
    np.testing.assert_allclose(g, np.where(cmask, ref_g, 0), atol=1e-6)
    assert g[0, 0] < 0 and g[1, K + 1] < 0  # class 0 and the OCR class are pushed up
    # sigmoid BCE (MCAN, LoRRA): summed over valid classes, mean over rows
    sig = 1 / (1 + np.exp(-z))
    ref_bce = np.where(cmask, -(sc * np.log(sig) + (1 - sc) * np.log(1 - sig)), 0).sum(-1).mean()
    bce, _ = soft_bce_loss(jnp.asarray(logits), jnp.asarray(scores), jnp.asarray(cmask))
    assert float(bce) == pytest.approx(ref_bce, rel=1e-5)
    gb = np.asarray(jax.grad(lambda x: soft_bce_loss(x, jnp.asarray(scores), jnp.asarray(cmask))[0])(
        jnp.asarray(logits)))
    np.testing.assert_allclose(gb, np.where(cmask, (sig - sc) / 3, 0), atol=1e-6)
    assert gb[0, 0] < 0 and gb[1, K + 1] < 0 and gb[2, K + 2] == 0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["saaa", "mcan", "lorra"])
def test_classifier_trains_class_zero_and_ocr_classes(name):
    cfg, model = _model(name)
    K, N = cfg.model.num_answers, cfg.model.num_ocr
    batch = random_batch(cfg, V, batch=2, seed=6)
    batch["ocr_mask"][:, N - 1] = False  # the last slot is padding
    C = K + (N if name == "lorra" else 0)
    scores = np.zeros((2, C), np.float32)
    scores[0, 0] = 1.0
    if name == "lorra":
        scores[1, K] = 1.0  # OCR slot 0 is the answer
        scores[1, K + N - 1] = 1.0  # a (bogus) target on the padding slot is ignored
    else:
        scores[1, 0] = 2 / 3
    batch["answer_scores"] = scores
    graphdef, params = nnx.split(model, nnx.Param)
    forward = jax.jit(lambda p: nnx.merge(graphdef, p)(batch))

    @jax.jit
    @jax.grad
    def grad_fn(p):
        mdl = nnx.merge(graphdef, p)
        return mdl.loss(mdl(batch), batch)[0]

    grads = grad_fn(params)
    g_head = np.asarray(grads["head"]["kernel"][...])  # (hidden, K [+ N]): one column per class
    assert np.abs(g_head[:, 0]).max() > 0  # class 0 receives gradient
    if name == "lorra":
        assert np.abs(g_head[:, K]).max() > 0  # OCR class 0 receives gradient
        assert np.abs(g_head[:, K + N - 1]).max() == 0  # the padding slot does not
    # One gradient step on the classifier head raises class 0's logit in row 0, whose only target it is
    # (through the shared layers the many negative classes of BCE can pull every logit down).
    before = np.asarray(forward(params))[0, 0]
    row0 = dict(batch, valid=np.array([True, False]))  # the loss of row 0 alone

    @jax.jit
    @jax.grad
    def grad_row0(p):
        mdl = nnx.merge(graphdef, p)
        return mdl.loss(mdl(row0), row0)[0]

    head_only = jax.tree_util.tree_map_with_path(
        lambda path, g: g if any(getattr(k, "key", None) == "head" for k in path) else jnp.zeros_like(g),
        grad_row0(params))
    after = np.asarray(forward(jax.tree.map(lambda p, g: p - 1e-1 * g, params, head_only)))[0, 0]
    assert after > before


def test_lorra_predict_never_picks_padding_slot_and_decodes_ocr():
    cfg, model = _model("lorra")
    K, N = cfg.model.num_answers, cfg.model.num_ocr
    batch = random_batch(cfg, V, batch=2)
    batch["ocr_mask"][:, 1:] = False
    logits = np.zeros((2, K + N), np.float32)
    logits[:, K + 2] = 50.0  # padding slot
    logits[0, K] = 10.0  # real slot 0
    pred = np.asarray(model.predict(jnp.asarray(logits), batch))
    assert pred[0] == K and pred[1] < K
    al = AnswerList([f"a{i}" for i in range(K)])
    assert al.decode(int(pred[0]), ["quán phở", "x"]) == "quán phở"


def _masked_softmax_rows(logits, mask):
    """Softmax over axis 0 of ``logits`` (n, G) restricted to ``mask`` (n,), zeros elsewhere."""
    out = np.zeros_like(logits)
    out[mask] = np_softmax(logits[mask], axis=0)
    return out


def test_classifier_mechanisms_match_numpy():
    rng = np.random.default_rng(3)
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 1, 0]], bool)
    # SAAA: glimpses g_k = sum_s a[s, k] x_I[s] from the stacked attention, concatenated (their eq. 3).
    a = np.stack([_masked_softmax_rows(rng.standard_normal((5, 2)), m) for m in mask])
    x = rng.standard_normal((2, 5, 6))
    ref = np.concatenate([np.einsum("s,sd->d", a[:, :, g][b], x[b])[None] for b in range(2) for g in range(2)])
    np.testing.assert_allclose(np.asarray(glimpse_vectors(jnp.asarray(a, jnp.float32), jnp.asarray(x, jnp.float32))),
                               ref.reshape(2, 12), atol=1e-5)
    # MCAN AttFlat: alpha = softmax_len(W_2 relu(W_1 x)), x~ = W_m [sum alpha_g x].
    cfg, mcan = _model("mcan", num_glimpses=2)
    red = mcan.question_reduce
    d = cfg.model.d_model
    x = rng.standard_normal((2, 5, d))
    got = np.asarray(red(jnp.asarray(x, jnp.float32), jnp.asarray(mask)))
    for b in range(2):
        alpha = _masked_softmax_rows(np_linear(np.maximum(np_linear(x[b], red.mlp_in), 0), red.mlp_out), mask[b])
        np.testing.assert_allclose(got[b], np_linear((alpha.T @ x[b]).reshape(-1), red.merge), atol=1e-4)
    # LoRRA top-down attention: a = softmax_n(W_t (relu(W_v v) * relu(W_q q))), zero on padding.
    cfg, lorra = _model("lorra")
    att = lorra.context_attention
    q = rng.standard_normal((2, d))
    got = np.asarray(att(jnp.asarray(x, jnp.float32), jnp.asarray(mask), jnp.asarray(q, jnp.float32)))
    for b in range(2):
        h = np.maximum(np_linear(x[b], att.w_feature), 0) * np.maximum(np_linear(q[b], att.w_query), 0)
        np.testing.assert_allclose(got[b], _masked_softmax_rows(np_linear(h, att.w_logit), mask[b]), atol=1e-5)


def test_classifier_loss_rejects_wrong_score_width():
    cfg, model = _model("mcan")
    batch = random_batch(cfg, V)
    batch["answer_scores"] = np.zeros((2, cfg.model.num_answers + 1), np.float32)
    with pytest.raises(ValueError, match="num_answers"):
        model.loss(model(batch), batch)


# ----------------------------------------------------------------------------- configs
@pytest.mark.slow  # 10-30 s on 2 cores: left to the full suite
def test_paper_configs_and_param_table():
    rows = config_rows(f"{ROOT}/configs/openvivqa")
    names = {r["model"] for r in rows}
    assert {"fst", "qumlag", "m4c", "saaa", "mcan", "lorra"} <= names
    by = {r["config"].split("/")[-1]: r for r in rows}
    m4c = by["m4c.py:features"]
    assert m4c["d_model"] == 768 and "text 12 + MMT 4" in m4c["layers"]
    # One more text layer adds exactly one pre-LN block: 4 (d^2 + d) + (2 d f + d + f) + 3 LayerNorms (2 d).
    cfg = tiny_model_config("m4c")
    d, f = cfg.model.d_model, cfg.model.ffn_dim
    n1 = count_params(cfg.model, V)
    cfg.model.num_text_layers += 1
    # One self-attention block: q/k/v/out, the FFN, and two LayerNorms (attention input, FFN input).
    assert count_params(cfg.model, V) - n1 == 4 * (d * d + d) + (2 * d * f + d + f) + 2 * 2 * d
    table = format_table(rows)
    assert table.startswith("| model | config | parameters | d_model | layers |")
    assert len(table.splitlines()) == len(rows) + 2


@pytest.mark.slow  # 10-30 s on 2 cores: left to the full suite
def test_m4c_remat_gives_the_same_loss_and_gradients():
    """``model.remat`` recomputes M4C's text and MMT blocks in the backward pass: with dropout on (the
    recomputation must redraw the same masks) the loss and every gradient equal the stored-activation run."""
    out = {}
    for remat in (False, True):
        cfg, model = _model("m4c", remat=remat, dropout=0.3)
        batch = random_batch(cfg, V, batch=3, seed=2)
        graphdef, params = nnx.split(model, nnx.Param)

        def f(p):
            mdl = nnx.merge(graphdef, p)
            logits = mdl(batch, deterministic=False, rngs=nnx.Rngs(dropout=jax.random.key(7)))
            return _loss(mdl, logits, batch)

        loss, grads = jax.jit(jax.value_and_grad(f))(params)
        jaxpr = str(jax.make_jaxpr(jax.grad(f))(params))
        out[remat] = (float(loss), jax.tree.leaves(grads), "checkpoint" in jaxpr or "remat" in jaxpr)
    assert out[False][2] is False and out[True][2] is True  # remat is really on, and only when asked
    assert out[True][0] == pytest.approx(out[False][0], rel=1e-6)
    for a, b in zip(out[False][1], out[True][1]):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_mlpag_joint_layers_attend_over_question_image_and_ocr_together():
    """``model.joint_layers``: self-attention blocks over the question, image and OCR tokens together after the
    fusion layers. Every other parameter is the model's without them; the memory is the joint blocks applied to
    the concatenated streams of the model without them (concat fusion, the question in memory: the memory is
    those three streams), a question token's output changes with the image (it does not without them: no
    question-over-image block here), and cached decoding equals the full forward pass."""
    kw = dict(fusion="concat", question_in_memory=True)
    cfg, plain = _model("mlpag", **kw)
    _, joint = _model("mlpag", joint_layers=2, **kw)
    assert len(_assert_only_added(plain, joint, {"joint"})["joint"]) == 2
    batch = random_batch(cfg, V, batch=2, seed=3)
    batch["question_mask"][1, 5:] = False
    e0, e1 = plain.encode(batch), joint.encode(batch)
    n, q = cfg.model.num_ocr, cfg.model.max_question_len
    mem0, mask0 = e0["memory"], e0["memory_mask"]
    np.testing.assert_array_equal(np.asarray(e1["memory_mask"]), np.asarray(mask0))
    # memory rows: OCR [0, n), image [n, -q), question [-q:); the joint order is question, image, OCR
    x = jnp.concatenate([mem0[:, -q:], mem0[:, n:-q], mem0[:, :n]], 1)
    m = jnp.concatenate([mask0[:, -q:], mask0[:, n:-q], mask0[:, :n]], 1)
    for block in joint.joint:
        x = block(x, m)
    want = jnp.concatenate([x[:, -n:], x[:, q:-n], x[:, :q]], 1)
    np.testing.assert_allclose(np.asarray(e1["memory"]), np.asarray(want), atol=1e-5)
    other = dict(batch, image=np.ascontiguousarray(batch["image"][::-1]))
    assert np.abs(np.asarray(joint.encode(other)["memory"])[:, -q:] - np.asarray(e1["memory"])[:, -q:]).max() > 1e-3
    np.testing.assert_array_equal(np.asarray(plain.encode(other)["memory"])[:, -q:], np.asarray(mem0)[:, -q:])
    np.testing.assert_allclose(np.asarray(e1["ocr_feats"]), np.asarray(x[:, -n:]), atol=1e-5)
    assert_cached_decoding_matches(joint, batch, cfg.model.max_answer_len, enc=e1)
    with pytest.raises(ValueError, match="model.joint_layers must be >= 0, got -1"):
        _model("mlpag", joint_layers=-1)


def test_mlpag_named_text_token_is_the_mean_of_the_ocr_tokens_the_question_names():
    """``model.named_text_token``: one more memory row, the projected mean of the fused OCR tokens whose pieces
    occur side by side in the question (masked when none does); ``model.ocr_self_attention``: blocks over the
    OCR tokens before the fusion, so a token's features change with its neighbours. Both are only added
    parameters, and cached decoding equals the full forward pass."""
    cfg, plain = _model("mlpag", num_ocr=8)
    _, named = _model("mlpag", num_ocr=8, named_text_token=True)
    _, both = _model("mlpag", num_ocr=8, named_text_token=True, ocr_self_attention=1)
    assert set(_assert_only_added(plain, named, {"named_text_proj", "named_text_norm"}))
    assert len(_assert_only_added(named, both, {"ocr_self_attention"})["ocr_self_attention"]) == 1
    batch = random_batch(cfg, V, batch=2, seed=5)
    n = cfg.model.num_ocr
    batch["ocr_mask"][:] = True
    batch["ocr_piece_mask"][:] = False
    batch["ocr_pieces"][:] = 0
    batch["question_mask"][:] = True
    q = batch["question"]
    # Example 0: tokens 1 and 3 are question pieces 2..3 and 5; token 4 is pieces 2 and 5, not side by side.
    for tok, pieces in ((1, q[0, 2:4]), (3, q[0, 5:6]), (4, np.array([q[0, 2], q[0, 5]]))):
        batch["ocr_pieces"][0, tok, :len(pieces)] = pieces
        batch["ocr_piece_mask"][0, tok, :len(pieces)] = True
    others = [int(v) for v in range(V) if v not in set(q[0].tolist()) | set(q[1].tolist())]
    batch["ocr_pieces"][1, :, 0] = others[:n]  # example 1: no token in its question
    batch["ocr_piece_mask"][:, :, 0] = True
    batch["ocr_pieces"][0, [0, 2] + list(range(5, n)), 0] = others[:n - 3]
    e0, e1 = plain.encode(batch), named.encode(batch)
    np.testing.assert_allclose(np.asarray(e1["memory"][:, :-1]), np.asarray(e0["memory"]), atol=1e-6)
    assert np.asarray(e1["memory_mask"])[:, -1].tolist() == [True, False]
    x = np.asarray(e1["ocr_feats"])[0, [1, 3]].mean(0)
    want = np_layer_norm(np_linear(x, named.named_text_proj), named.named_text_norm)
    np.testing.assert_allclose(np.asarray(e1["memory"])[0, -1], want, atol=1e-5)
    # The OCR self-attention: token 0's fused features change when only token 6's pieces change.
    other = dict(batch, ocr_pieces=batch["ocr_pieces"].copy(), ocr_phoc=batch["ocr_phoc"].copy())
    other["ocr_phoc"][0, 6] = 1.0 - other["ocr_phoc"][0, 6]
    moved = lambda m: np.abs(np.asarray(m.encode(other)["ocr_feats"])[0, 0]  # noqa: E731
                             - np.asarray(m.encode(batch)["ocr_feats"])[0, 0]).max()
    assert moved(both) > 1e-4 and moved(named) < 1e-6
    assert_cached_decoding_matches(both, batch, cfg.model.max_answer_len, enc=both.encode(batch))
    with pytest.raises(ValueError, match="model.ocr_self_attention must be >= 0"):
        _model("mlpag", ocr_self_attention=-1)


def test_mlpag_named_match_longest_run_keeps_only_the_longest_named_stretch():
    """``model.named_match="longest_run"``: the named-text token is the mean of the OCR tokens of the longest
    stretch of the question the OCR tokens write out (here token 1, two question pieces), not of every token
    that occurs in the question (token 3, one piece, is left out); no parameter is added; an unknown rule is
    named."""
    cfg, any_rule = _model("mlpag", num_ocr=8, named_text_token=True)
    _, longest = _model("mlpag", num_ocr=8, named_text_token=True, named_match="longest_run")
    _assert_only_added(any_rule, longest, set())  # the same parameters, equal
    batch = random_batch(cfg, V, batch=1, seed=5)
    batch["ocr_mask"][:] = True
    batch["ocr_piece_mask"][:] = False
    batch["question_mask"][:] = True
    q = batch["question"]
    others = [int(v) for v in range(V) if v not in set(q[0].tolist())]
    batch["ocr_pieces"][0, :, 0] = others[:cfg.model.num_ocr]
    batch["ocr_piece_mask"][0, :, 0] = True
    for tok, pieces in ((1, q[0, 2:4]), (3, q[0, 5:6])):
        batch["ocr_pieces"][0, tok, :] = 0
        batch["ocr_pieces"][0, tok, :len(pieces)] = pieces
        batch["ocr_piece_mask"][0, tok, :] = np.arange(batch["ocr_pieces"].shape[-1]) < len(pieces)
    for model, tokens in ((any_rule, [1, 3]), (longest, [1])):
        enc = model.encode(batch)
        x = np.asarray(enc["ocr_feats"])[0, tokens].mean(0)
        want = np_layer_norm(np_linear(x, model.named_text_proj), model.named_text_norm)
        np.testing.assert_allclose(np.asarray(enc["memory"])[0, -1], want, atol=1e-5)
    with pytest.raises(ValueError, match="model.named_match must be one of"):
        _model("mlpag", named_match="first")


def test_named_region_is_the_smallest_region_holding_the_named_text():
    """Two named OCR tokens span the box (0.1, 0.1)-(0.5, 0.2), area 0.04. Regions: the sign around them
    (area 0.1: the text is 40% of it), the whole picture (4%), one letter inside (it holds a quarter of the
    text), a far region, the text's own strokes (the very box: 100%, not a surface), a padding region holding
    the text at 50%: the sign is picked. Without the sign, the picture. An unnamed example gets zeros, False."""
    from openvivqa_jax.models.mlpag import named_region

    ocr_boxes = np.zeros((3, 3, 4), np.float32)
    ocr_boxes[:, 0] = [0.1, 0.1, 0.3, 0.2]
    ocr_boxes[:, 1] = [0.7, 0.7, 0.8, 0.8]  # not named
    ocr_boxes[:, 2] = [0.35, 0.1, 0.5, 0.2]
    match = np.array([[1, 1, 1], [1, 0, 1], [0, 0, 0]], np.float32)
    mask = np.array([[True, False, True]] + [[True, True, True]] * 2)  # example 0: token 1 is padding
    boxes = np.array([[0.05, 0.05, 0.55, 0.25], [0, 0, 1, 1], [0.1, 0.1, 0.2, 0.2], [0.6, 0.6, 0.9, 0.9],
                      [0.1, 0.1, 0.5, 0.2], [0.08, 0.05, 0.52, 0.23]], np.float32)
    boxes = np.broadcast_to(boxes, (3, 6, 4))
    raw = np.broadcast_to(np.eye(6, dtype=np.float32), (3, 6, 6))
    region_mask = np.array([[True, True, True, True, True, False], [False, True, True, True, True, False],
                            [True] * 6])
    feats, tok_mask = named_region(jnp.asarray(match), jnp.asarray(mask), jnp.asarray(ocr_boxes), jnp.asarray(raw),
                                   jnp.asarray(boxes), jnp.asarray(region_mask))
    assert feats.shape == (3, 1, 6) and np.asarray(tok_mask).tolist() == [[True], [True], [False]]
    np.testing.assert_array_equal(np.asarray(feats)[:, 0], [np.eye(6)[0], np.eye(6)[1], np.zeros(6)])


def test_mlpag_named_region_token_is_the_projected_image_under_the_named_text():
    """``model.named_region_token``: one more memory row after the named-text token, the projection of
    :func:`named_region` over the vision encoder's raw features; only added parameters; cached decoding equals
    the full forward pass."""
    from openvivqa_jax.models.embeddings import question_match
    from openvivqa_jax.models.mlpag import named_region

    cfg, named = _model("mlpag", num_ocr=8, named_text_token=True)
    _, both = _model("mlpag", num_ocr=8, named_text_token=True, named_region_token=True)
    assert set(_assert_only_added(named, both, {"named_region_proj", "named_region_norm"}))
    batch = random_batch(cfg, V, batch=2, seed=5)
    batch["ocr_pieces"][0, 2, :2] = batch["question"][0, 1:3]  # token 2 of example 0 is named
    batch["ocr_piece_mask"][0, 2, :2] = True
    batch["ocr_piece_mask"][0, 2, 2:] = False
    batch["ocr_mask"][0, 2] = True
    e0, e1 = named.encode(batch), both.encode(batch)
    np.testing.assert_allclose(np.asarray(e1["memory"][:, :-1]), np.asarray(e0["memory"]), atol=1e-6)
    match = question_match(batch["ocr_pieces"], batch["ocr_piece_mask"], batch["question"], batch["question_mask"])
    assert bool(match[0, 2])
    vis = both.vision(batch)
    feats, tok_mask = named_region(match, jnp.asarray(batch["ocr_mask"], bool), jnp.asarray(batch["ocr_boxes"]),
                                   vis["raw"], vis["boxes"], vis["mask"])
    want = np_layer_norm(np_linear(np.asarray(feats)[0, 0], both.named_region_proj), both.named_region_norm)
    np.testing.assert_allclose(np.asarray(e1["memory"])[0, -1], want, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(e1["memory_mask"])[:, -1], np.asarray(tok_mask)[:, 0])
    assert_cached_decoding_matches(both, batch, cfg.model.max_answer_len, enc=e1)


def test_mlpag_question_to_decoder_adds_the_question_mean_to_every_decoder_input():
    """``model.question_to_decoder``: the masked mean of the question tokens after the fusion layers, through one
    added projection, is added to every answer-decoder input before its LayerNorm; the memory is unchanged, the
    only new parameters are the projection's, and cached decoding reads it too."""
    cfg, plain = _model("mlpag", num_ocr=8)
    _, with_q = _model("mlpag", num_ocr=8, question_to_decoder=True)
    assert set(_assert_only_added(plain, with_q, {"question_summary"}))
    batch = random_batch(cfg, V, batch=3, seed=7)
    batch["question_mask"][1, 3:] = False  # a shorter question: its padding must not enter the mean
    e0, e1 = plain.encode(batch), with_q.encode(batch)
    np.testing.assert_allclose(np.asarray(e1["memory"]), np.asarray(e0["memory"]), atol=1e-6)
    assert "decoder_bias" not in e0
    # The question tokens after the fusion layers, recomputed by hand from the model's own blocks.
    x_q = with_q.question(batch["question"])
    q_mask = jnp.asarray(batch["question_mask"], bool)
    for sa in with_q.self_attention:
        x_q = sa(x_q, q_mask)
    x_q, m = np.asarray(x_q), np.asarray(batch["question_mask"], bool)
    want = np.stack([np_linear(x_q[b][m[b]].mean(0), with_q.question_summary) for b in range(3)])
    np.testing.assert_allclose(np.asarray(e1["decoder_bias"]), want, atol=1e-5)
    # The decoder's first input (BOS at step 0) is LayerNorm(token + position + summary).
    dec = with_q.decoder
    bos = batch["decoder_in"][:, :1]
    tok = np.asarray(dec.embedding(jnp.asarray(bos)))[:, 0] + np.asarray(dec.pos_embedding(jnp.arange(1)))[0]
    got = np.asarray(dec.embed_inputs(jnp.asarray(bos), jnp.arange(1), e1["ocr_feats"],
                                      input_bias=e1["decoder_bias"]))[:, 0]
    np.testing.assert_allclose(got, np_layer_norm(tok + want, dec.in_norm), atol=1e-5)
    # It changes the answer's logits; padding a question's masked tokens does not.
    assert not np.allclose(np.asarray(with_q(batch)), np.asarray(plain(batch)), atol=1e-3)
    changed = {k: np.array(v) for k, v in batch.items()}
    changed["question"][1, 3:] = (changed["question"][1, 3:] + 1) % V
    np.testing.assert_allclose(np.asarray(with_q(changed))[1], np.asarray(with_q(batch))[1], atol=1e-5)
    assert_cached_decoding_matches(with_q, batch, cfg.model.max_answer_len, enc=e1)


@pytest.mark.slow
def test_mlpag_question_to_decoder_beam_of_one_is_greedy():
    """With the question summary in the decoder's inputs, the jitted beam search (which tiles the per-example
    decoding constants over the beams) with one beam gives the greedy decode's answer, and greedy's first step
    is the argmax of the teacher-forced logits at BOS."""
    cfg, model = _model("mlpag", num_ocr=8, question_to_decoder=True)
    graphdef, params = nnx.split(model, nnx.Param)
    T = cfg.model.max_answer_len
    batch = random_batch(cfg, V, batch=2, seed=3)
    beam, _ = decoding.make_decode_fn(graphdef, max_len=T, beam_size=1)(params, batch)
    greedy, _ = decoding.make_decode_fn(graphdef, max_len=T, method="greedy")(params, batch)
    np.testing.assert_array_equal(np.asarray(beam), np.asarray(greedy))
    first = np.argmax(np.asarray(model(batch))[:, 0], -1)
    np.testing.assert_array_equal(np.asarray(greedy)[:, 0], first)
