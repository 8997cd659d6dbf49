"""M4C's per-block remat (``model.remat_blocks``: 'all', 'none', 'mmt', 'text' or block indices; else ``model.remat``)."""

import jax
import numpy as np
import pytest
from flax import nnx

from conftest import random_batch, tiny_model_config
from openvivqa_jax.models import build_model
from openvivqa_jax.models import layers
from openvivqa_jax.models.base import pointer_softmax_loss
from openvivqa_jax.models.m4c import remat_plan


def test_remat_plan_values():
    assert remat_plan(True, 3, 2) == ((True,) * 3, (True,) * 2) == remat_plan("all", 3, 2)
    assert remat_plan(False, 3, 2) == ((False,) * 3, (False,) * 2) == remat_plan("none", 3, 2)
    assert remat_plan("mmt", 3, 2) == ((False, False, False), (True, True))
    assert remat_plan("text", 3, 2) == ((True, True, True), (False, False))
    assert remat_plan([1, 4], 3, 2) == ((False, True, False), (False, True)) == remat_plan("1,4", 3, 2)
    with pytest.raises(ValueError, match=r"must lie in \[0, 5\)"):
        remat_plan([5], 3, 2)
    with pytest.raises(ValueError, match="'mmt'"):
        remat_plan("some", 3, 2)
    with pytest.raises(ValueError, match="block indices such as"):
        remat_plan([True], 3, 2)


@pytest.mark.slow  # 10-30 s on 2 cores: left to the full suite
def test_m4c_remat_list_reaches_the_chosen_blocks_and_keeps_loss_and_gradients():
    """remat on text block 0 and MMT block 1 only: call_block sees remat exactly there, and the loss and
    gradients (dropout on) equal the run without remat."""
    calls = []
    orig = layers.call_block

    def spy(block, *args, remat=False, **kw):
        calls.append(remat)
        return orig(block, *args, remat=remat, **kw)

    out = {}
    for spec in ("none", "0,2"):
        cfg = tiny_model_config("m4c")
        cfg.model.dropout = 0.3
        cfg.model.remat_blocks = spec
        n_text, n_mmt = cfg.model.num_text_layers, cfg.model.num_mmt_layers
        model = build_model(cfg.model, 40, seed=0)
        batch = random_batch(cfg, 40, batch=2, seed=1)
        graphdef, params = nnx.split(model, nnx.Param)

        def f(p):
            mdl = nnx.merge(graphdef, p)
            logits = mdl(batch, deterministic=False, rngs=nnx.Rngs(dropout=jax.random.key(3)))
            return pointer_softmax_loss(logits, batch["target_vocab"], batch["target_ocr"], batch["target_mask"])[0]

        import openvivqa_jax.models.m4c as m4c_mod

        m4c_mod.call_block = spy
        try:
            calls.clear()
            out[str(spec)] = jax.jit(jax.value_and_grad(f))(params)  # call_block is seen while tracing
        finally:
            m4c_mod.call_block = orig
        if spec != "none":
            assert (n_text, n_mmt) == (1, 2)  # the tiny config's sizes, so [0, 2] = text 0 and MMT 1
            assert calls == [True, False, True]
    (l0, g0), (l1, g1) = out["none"], out["0,2"]
    assert float(l1) == pytest.approx(float(l0), rel=1e-6)
    for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-6)
