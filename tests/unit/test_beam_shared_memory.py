"""Beam search with ``share_memory``: the memory's cross-attention keys/values kept once per example (the K
beams attend as K query rows) give the same hypotheses as the default path, which repeats them per beam."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from conftest import random_batch, tiny_model_config
from openvivqa_jax.vqa import decoding
from openvivqa_jax.models import build_model
from openvivqa_jax.models.layers import MultiHeadAttention


@pytest.mark.parametrize("name", ["mlpag", "qumlag", "fst", "m4c"])
def test_shared_memory_beams_equal_repeated_memory(name):
    cfg = tiny_model_config(name)
    vocab = 40
    model = build_model(cfg.model, vocab, seed=1)
    batch = {k: jnp.asarray(v) for k, v in random_batch(cfg, vocab, batch=3, seed=2).items()}
    T = int(cfg.model.max_answer_len)
    old = decoding.beam_search(model, batch, max_len=T, beam_size=3, alpha=0.6)
    new = decoding.beam_search(model, batch, max_len=T, beam_size=3, alpha=0.6, share_memory=True)
    np.testing.assert_array_equal(np.asarray(new[2]), np.asarray(old[2]))  # all kept hypotheses, in order
    np.testing.assert_allclose(np.asarray(new[3]), np.asarray(old[3]), rtol=0, atol=1e-5)
    assert model.beam_shared_keys == (() if name == "m4c" else ("cross_kv", "memory_mask"))


@pytest.mark.parametrize("via", ["decoding", "config"])
def test_shared_memory_is_not_the_default_and_is_traced_once_per_example(via):
    """The default path repeats the memory per beam; share_memory keeps (batch, H, head_dim, mem_len) keys.
    ``via="config"``: the run's ``eval.beam_share_memory`` reaches the decoder (evaluation and predict build
    it with ``decoding.DecodeSettings.from_config``); the configs' default is off."""

    cfg = tiny_model_config("qumlag")
    assert cfg.eval.beam_share_memory is False
    cfg.eval.beam_size = 3
    cfg.model.max_answer_len = 4
    model = build_model(cfg.model, 40, seed=0)
    graphdef, params = nnx.split(model, nnx.Param)  # as vqa.inference.load_for_inference splits a run's model
    batch = {k: jnp.asarray(v) for k, v in random_batch(cfg, 40, batch=2).items()}
    seen = []
    orig = MultiHeadAttention.attend_heads

    def spy(self, q_in, segments, mask):
        seen.append((q_in.shape[0], segments[0][0].shape[0]))
        return orig(self, q_in, segments, mask)

    def decode_fn(share):
        if via == "decoding":
            return decoding.make_decode_fn(graphdef, max_len=4, beam_size=3, share_memory=share)
        cfg.eval.beam_share_memory = share
        return decoding.make_decode_fn(graphdef, decoding.DecodeSettings.from_config(cfg, True))

    decoding._compiled.cache_clear()  # the decoders are cached: trace them again, under the spy
    MultiHeadAttention.attend_heads = spy
    try:
        for share in (False, True):
            seen.clear()
            jax.eval_shape(decode_fn(share), params, batch)
            cross = seen[1::2]  # per layer: self-attention over the cache, then cross-attention over the memory
            assert cross and all(rows == 6 for rows, _ in cross)
            assert {kv for _, kv in cross} == ({2} if share else {6})
    finally:
        MultiHeadAttention.attend_heads = orig


def test_shared_keys_need_a_batch_that_divides():
    att = MultiHeadAttention(8, 2, 0.0, rngs=nnx.Rngs(0))
    k = jnp.zeros((2, 2, 4, 5))
    with pytest.raises(ValueError, match="query rows over keys/values of batch 2"):
        att.attend_heads(jnp.zeros((6, 1, 8)), [(k, k)], jnp.ones((6, 1, 1, 5), bool))
    out = att.attend_heads(jnp.ones((6, 1, 8)), [(k, k)], jnp.ones((2, 1, 1, 5), bool))
    assert out.shape == (6, 1, 8)
