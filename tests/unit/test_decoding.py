"""Decoding: cached steps equal full recompute; beam search finds the exhaustive best; beam 1 is
greedy; no recompilation across batches of one shape."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from conftest import all_eqns, assert_cached_decoding_matches, random_batch, tiny_model_config
from openvivqa_jax.vqa import decoding
from openvivqa_jax.models import MODEL_REGISTRY, build_model

GENERATORS = [n for n in ("mlpag", "qumlag", "fst", "m4c") if n in MODEL_REGISTRY]


def _model(name, vocab=40, seed=0):
    cfg = tiny_model_config(name)
    return cfg, build_model(cfg.model, vocab, seed=seed)


@pytest.mark.parametrize("name", GENERATORS)
def test_cached_logits_equal_full_recompute(name):
    cfg, model = _model(name)
    assert_cached_decoding_matches(model, random_batch(cfg, 40, batch=3), cfg.model.max_answer_len)


def _exhaustive_best(model, batch1, vocab_size, num_ocr, T, alpha):
    """Scores every sequence (EOS-terminated, or length T) by teacher-forced full recompute."""
    E = vocab_size + num_ocr
    allowed = [i for i in range(E) if i not in decoding.BANNED_IDS]
    non_eos = [i for i in allowed if i != 3]
    seqs = []
    for k in range(T):
        for prefix in itertools.product(non_eos, repeat=k):
            seqs.append(list(prefix) + [3])
    seqs += [list(p) for p in itertools.product(non_eos, repeat=T)]
    n = len(seqs)
    tiled = {k: np.repeat(v, n, axis=0) for k, v in batch1.items()}
    dec_in = np.zeros((n, T), np.int32)
    for i, s in enumerate(seqs):
        dec_in[i, 0] = 2
        dec_in[i, 1:len(s)] = s[:-1][: T - 1]
    tiled["decoder_in"] = dec_in
    logits = np.asarray(model(tiled), np.float64)
    logits[..., list(decoding.BANNED_IDS)] = -1e9
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - logits.max(-1, keepdims=True)
    scores = []
    for i, s in enumerate(seqs):
        lp = sum(logp[i, t, tok] for t, tok in enumerate(s))
        scores.append(lp / ((5 + len(s)) / 6) ** alpha)
    best = int(np.argmax(scores))
    return seqs[best], scores[best]


@pytest.mark.parametrize("alpha", [0.0, 0.8])
def test_wide_beam_finds_exhaustive_best(alpha):
    vocab, T = 7, 3
    cfg = tiny_model_config("mlpag")
    cfg.model.max_answer_len = T
    cfg.model.num_ocr = 2
    decode = None
    for seed in range(3):
        model = build_model(cfg.model, vocab, seed=seed)
        batch = random_batch(cfg, vocab, batch=1, seed=seed)
        best_seq, best_score = _exhaustive_best(model, batch, vocab, 2, T, alpha)
        graphdef, params = nnx.split(model)
        # Jitted with the weights as arguments: compiled once for the three seeds (the same structure).
        decode = decode or decoding.make_decode_fn(graphdef, max_len=T, beam_size=64, alpha=alpha)
        ids, score = decode(params, batch)
        got = [int(i) for i in np.asarray(ids[0]) if i != 0]
        assert got == best_seq, (seed, got, best_seq)
        assert float(score[0]) == pytest.approx(best_score, abs=1e-4)


@pytest.mark.slow  # 10-30 s on 2 cores: left to the full suite
def test_beam_one_equals_greedy():
    cfg, model = _model("mlpag", vocab=30, seed=1)
    batch = random_batch(cfg, 30, batch=4, seed=3)
    g_ids, g_score = decoding.greedy_search(model, batch, max_len=cfg.model.max_answer_len)
    b_ids, b_score, _, _ = decoding.beam_search(model, batch, max_len=cfg.model.max_answer_len, beam_size=1)
    np.testing.assert_array_equal(np.asarray(g_ids), np.asarray(b_ids))
    np.testing.assert_allclose(np.asarray(g_score), np.asarray(b_score), rtol=1e-5, atol=1e-5)


def test_copied_token_feeds_back_ocr_features():
    # A copy step's next input depends on the OCR token copied: changing that token's features
    # changes the next-step logits, changing another (uncopied) slot's pieces does not matter there.
    cfg, model = _model("mlpag", vocab=30)
    batch = random_batch(cfg, 30, batch=1)
    V = 30
    batch["decoder_in"][0, :3] = [2, V + 1, 5]
    base = np.asarray(model(batch))[0, 1]
    b2 = {k: v.copy() for k, v in batch.items()}
    b2["ocr_phoc"][0, 1] = 1.0 - b2["ocr_phoc"][0, 1]
    assert np.abs(np.asarray(model(b2))[0, 1] - base).max() > 1e-4


def test_no_recompilation_across_batches():
    cfg, model = _model("mlpag", vocab=30)
    graphdef, params = nnx.split(model, nnx.Param)
    fn = decoding.make_decode_fn(graphdef, max_len=cfg.model.max_answer_len, beam_size=2)
    for seed in range(3):
        jax.block_until_ready(fn(params, random_batch(cfg, 30, batch=2, seed=seed)))
    assert fn._cache_size() == 1


def test_bad_arguments():
    cfg, model = _model("mlpag", vocab=30)
    graphdef, _ = nnx.split(model, nnx.Param)
    with pytest.raises(ValueError, match="method"):
        decoding.make_decode_fn(graphdef, max_len=4, method="sample")
    with pytest.raises(ValueError, match="beam_size"):
        decoding.make_decode_fn(graphdef, max_len=4, beam_size=0)
    with pytest.raises(ValueError, match="alpha"):
        decoding.beam_search(model, random_batch(cfg, 30), max_len=4, beam_size=2, alpha=-1.0)


def _dots(jaxpr):
    """Every ``dot_general`` of ``jaxpr`` and of its nested jaxprs, as ``(lhs shape, rhs shape)``."""
    return [(tuple(e.invars[0].aval.shape), tuple(e.invars[1].aval.shape)) for e in all_eqns(jaxpr)
            if e.primitive.name == "dot_general"]


@pytest.mark.parametrize("name", ["mlpag", "m4c"])
def test_decode_step_does_not_reproject_the_ocr_tokens(name):
    """The pointer's OCR projections (MLPAG: the copied tokens' input features ``ocr_in`` and the pointer
    keys ``ptr_key``; M4C: ``ptr_key`` of the MMT's OCR outputs) are per-example constants, computed once in
    ``prepare_decode``: a decoding step multiplies no ``(rows, N, d)`` OCR array by a ``(d, d)`` weight. The
    training forward pass, which computes them once per sequence, does."""
    cfg, model = _model(name)
    batch = {k: jnp.asarray(v) for k, v in random_batch(cfg, 40, batch=3).items()}
    n, d = cfg.model.num_ocr, cfg.model.d_model
    dec = model.prepare_decode(model.encode(batch))
    assert dec["ocr_keys"].shape == (3, n, d)
    cache = model.init_cache(3, cfg.model.max_answer_len)
    step = jax.make_jaxpr(lambda dec, cache: model.decode_step(dec, jnp.full((3,), 45, jnp.int32), jnp.int32(1),
                                                                 cache))(dec, cache)

    def ocr_projections(dots):
        return [(a, b) for a, b in dots if a[-2:] == (n, d) and b == (d, d)]

    assert ocr_projections(_dots(step.jaxpr)) == []
    full = jax.make_jaxpr(lambda b: model(b))(batch)
    assert len(ocr_projections(_dots(full.jaxpr))) >= 1
