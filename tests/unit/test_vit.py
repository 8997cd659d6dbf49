"""ViT backbone and its big_vision ``.npz`` loader, the VisionEncoder kind 'vit', and freezing the backbone.

The reference forward pass is written here in plain numpy from the ViT definition (patchify, pre-LN blocks
with multi-head attention and a tanh-GELU MLP, final LayerNorm), reading the weights by their big_vision
names from the checkpoint file the test writes; the module under test must reproduce it.
"""

from __future__ import annotations

import numpy as np
import pytest

from openvivqa_jax.training import sharding

from conftest import tiny_model_config

WIDTH, HEADS, MLP, DEPTH, PATCH = 16, 2, 24, 2, 8


def _bv_checkpoint(rng, grid: int, cls: bool = False, depth: int = DEPTH, width: int = WIDTH,
                   prefix: str = "") -> dict[str, np.ndarray]:
    """Random weights under big_vision's flattened names and shapes (DenseGeneral per-head layout)."""
    hd = width // HEADS
    r = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)  # noqa: E731
    f = {"embedding/kernel": r(PATCH, PATCH, 3, width), "embedding/bias": r(width),
         "pos_embedding": r(1, grid * grid, width),
         "Transformer/encoder_norm/scale": 1 + r(width), "Transformer/encoder_norm/bias": r(width),
         "head/kernel": r(width, 5), "head/bias": r(5)}
    if cls:
        f["cls"] = r(1, 1, width)
    for i in range(depth):
        b = f"Transformer/encoderblock_{i}/"
        for ln in ("LayerNorm_0", "LayerNorm_1"):
            f[b + ln + "/scale"] = 1 + r(width)
            f[b + ln + "/bias"] = r(width)
        a = b + "MultiHeadDotProductAttention_0/"
        for n in ("query", "key", "value"):
            f[a + n + "/kernel"] = r(width, HEADS, hd)
            f[a + n + "/bias"] = r(HEADS, hd)
        f[a + "out/kernel"] = r(HEADS, hd, width)
        f[a + "out/bias"] = r(width)
        f[b + "MlpBlock_0/Dense_0/kernel"] = r(width, MLP)
        f[b + "MlpBlock_0/Dense_0/bias"] = r(MLP)
        f[b + "MlpBlock_0/Dense_1/kernel"] = r(MLP, width)
        f[b + "MlpBlock_0/Dense_1/bias"] = r(width)
    return {prefix + k: v for k, v in f.items()}


def _ln(x, s, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-6) * s + b


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def _reference_vit(f: dict, images: np.ndarray, cls: bool) -> np.ndarray:
    """Plain-numpy ViT forward (float64) from big_vision-named weights -> (batch, gh, gw, width)."""
    x = images.astype(np.float64) * 2 - 1
    b, H, W, _ = x.shape
    gh, gw = H // PATCH, W // PATCH
    patches = x.reshape(b, gh, PATCH, gw, PATCH, 3).transpose(0, 1, 3, 2, 4, 5).reshape(b, gh * gw, -1)
    x = patches @ f["embedding/kernel"].reshape(-1, WIDTH) + f["embedding/bias"]
    x = x + f["pos_embedding"]
    if cls:
        x = np.concatenate([np.broadcast_to(f["cls"], (b, 1, WIDTH)), x], 1)
    hd = WIDTH // HEADS
    for i in range(DEPTH):
        p = f"Transformer/encoderblock_{i}/"
        a = p + "MultiHeadDotProductAttention_0/"
        y = _ln(x, f[p + "LayerNorm_0/scale"], f[p + "LayerNorm_0/bias"])
        q, k, v = (np.einsum("btd,dhk->bthk", y, f[a + n + "/kernel"]) + f[a + n + "/bias"]
                   for n in ("query", "key", "value"))
        logits = np.einsum("bqhk,bshk->bhqs", q, k) / np.sqrt(hd)
        pr = np.exp(logits - logits.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        ctx = np.einsum("bhqs,bshk->bqhk", pr, v)
        x = x + np.einsum("bqhk,hkd->bqd", ctx, f[a + "out/kernel"]) + f[a + "out/bias"]
        y = _ln(x, f[p + "LayerNorm_1/scale"], f[p + "LayerNorm_1/bias"])
        y = _gelu_tanh(y @ f[p + "MlpBlock_0/Dense_0/kernel"] + f[p + "MlpBlock_0/Dense_0/bias"])
        x = x + y @ f[p + "MlpBlock_0/Dense_1/kernel"] + f[p + "MlpBlock_0/Dense_1/bias"]
    x = _ln(x, f["Transformer/encoder_norm/scale"], f["Transformer/encoder_norm/bias"])
    if cls:
        x = x[:, 1:]
    return x.reshape(b, gh, gw, WIDTH)


def _vit(grid=(4, 4), cls=False, depth=DEPTH, seed=1):
    from flax import nnx

    from openvivqa_jax.models.vit import ViT

    return ViT(patch_size=(PATCH, PATCH), width=WIDTH, depth=depth, heads=HEADS, mlp_dim=MLP, posemb_grid=grid,
               cls_token=cls, rngs=nnx.Rngs(params=seed))


@pytest.mark.parametrize("cls,prefix", [(False, ""), (True, "params/"), (False, "params/img/")])
def test_loaded_vit_matches_numpy_reference(tmp_path, cls, prefix):
    from openvivqa_jax.models.vit import load_big_vision_npz

    rng = np.random.default_rng(0)
    flat = _bv_checkpoint(rng, grid=4, cls=cls, prefix=prefix)
    path = tmp_path / "vit.npz"
    np.savez(path, **flat)
    vit = _vit(cls=cls)
    info = load_big_vision_npz(vit, path)
    assert info["prefix"] == prefix and not info["posemb_resampled"]
    assert info["ignored"] == ["head/bias", "head/kernel"]  # the classifier head is not part of a backbone
    images = rng.random((2, 32, 32, 3)).astype(np.float32)
    got = np.asarray(vit(images))
    want = _reference_vit({k[len(prefix):]: v for k, v in flat.items()}, images, cls)
    assert got.shape == (2, 4, 4, WIDTH)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


def test_position_embedding_resampled_like_scipy_zoom(tmp_path):
    """A 2x2 checkpoint grid into a 3x5 module grid: big_vision resamples with scipy.ndimage.zoom(order=1)."""
    import scipy.ndimage

    from openvivqa_jax.models.vit import load_big_vision_npz

    rng = np.random.default_rng(1)
    flat = _bv_checkpoint(rng, grid=2)
    np.savez(tmp_path / "vit.npz", **flat)
    vit = _vit(grid=(3, 5))
    assert load_big_vision_npz(vit, tmp_path / "vit.npz")["posemb_resampled"]
    old = flat["pos_embedding"].reshape(2, 2, WIDTH).astype(np.float64)
    want = scipy.ndimage.zoom(old, (3 / 2, 5 / 2, 1), order=1)
    assert want.shape == (3, 5, WIDTH)
    np.testing.assert_allclose(np.asarray(vit.pos_embedding[...]).reshape(3, 5, WIDTH), want, atol=1e-5)
    # At call time, a 24x40 image (3x5 patches) uses the stored grid as is; a 16x16 image (2x2 patches)
    # resamples it back to 2x2, which at the corners of a corner-aligned grid gives the original rows.
    out = vit(rng.random((1, 16, 16, 3)).astype(np.float32))
    assert out.shape == (1, 2, 2, WIDTH)


def test_old_format_cls_in_position_embedding(tmp_path):
    """Old checkpoints store 1 + g*g position rows with the cls entry first (big_vision fix_old_checkpoints):
    the loader splits it off and adds it to the cls token."""
    from openvivqa_jax.models.vit import load_big_vision_npz

    rng = np.random.default_rng(2)
    flat = _bv_checkpoint(rng, grid=4, cls=True)
    pe_cls = rng.standard_normal((1, 1, WIDTH)).astype(np.float32)
    flat["Transformer/posembed_input/pos_embedding"] = np.concatenate([pe_cls, flat.pop("pos_embedding")], 1)
    np.savez(tmp_path / "old.npz", **flat)
    vit = _vit(cls=True)
    load_big_vision_npz(vit, tmp_path / "old.npz")
    np.testing.assert_allclose(np.asarray(vit.cls[...]), flat["cls"] + pe_cls, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(vit.pos_embedding[...]),
                               flat["Transformer/posembed_input/pos_embedding"][:, 1:], rtol=1e-6)


def test_loader_errors_name_file_and_key(tmp_path):
    from openvivqa_jax.models.vit import CheckpointError, load_big_vision_npz

    rng = np.random.default_rng(3)
    flat = _bv_checkpoint(rng, grid=4)
    missing = dict(flat)
    del missing["Transformer/encoderblock_1/MlpBlock_0/Dense_1/kernel"]
    np.savez(tmp_path / "missing.npz", **missing)
    with pytest.raises(CheckpointError, match=r"missing\.npz.*encoderblock_1/MlpBlock_0/Dense_1/kernel.*missing"):
        load_big_vision_npz(_vit(), tmp_path / "missing.npz")
    bad = dict(flat)
    bad["Transformer/encoderblock_0/MlpBlock_0/Dense_0/kernel"] = np.zeros((MLP, WIDTH), np.float32)  # transposed
    np.savez(tmp_path / "shape.npz", **bad)
    with pytest.raises(CheckpointError, match=r"shape\.npz.*Dense_0/kernel.*\(24, 16\).*\(16, 24\)"):
        load_big_vision_npz(_vit(), tmp_path / "shape.npz")
    np.savez(tmp_path / "deep.npz", **_bv_checkpoint(rng, grid=4, depth=3))
    with pytest.raises(CheckpointError, match="more encoder blocks"):
        load_big_vision_npz(_vit(), tmp_path / "deep.npz")
    np.savez(tmp_path / "nocls.npz", **flat)
    with pytest.raises(CheckpointError, match="no 'cls'"):
        load_big_vision_npz(_vit(cls=True), tmp_path / "nocls.npz")
    (tmp_path / "text.npz").write_text("not a zip archive")
    with pytest.raises(CheckpointError, match=r"text\.npz: not a readable \.npz"):
        load_big_vision_npz(_vit(), tmp_path / "text.npz")
    with pytest.raises(CheckpointError, match="not found"):
        load_big_vision_npz(_vit(), tmp_path / "absent.npz")


def test_variant_settings():
    from openvivqa_jax.models.vit import vit_settings

    s = vit_settings({"vit_variant": "Ti/16"})
    assert (s["width"], s["depth"], s["mlp_dim"], s["heads"], s["patch_size"]) == (192, 12, 768, 3, (16, 16))
    s = vit_settings({"vit_variant": "B/32", "depth": 2, "posemb_grid": (6, 8)})
    assert (s["width"], s["depth"], s["heads"], s["patch_size"], s["posemb_grid"]) == (768, 2, 12, (32, 32), (6, 8))
    with pytest.raises(ValueError, match="unknown size 'X'"):
        vit_settings({"vit_variant": "X/16"})
    with pytest.raises(ValueError, match="needs"):
        vit_settings({"width": 8})


def test_vision_encoder_kind_vit_loads_checkpoint(tmp_path):
    import ml_collections
    from flax import nnx

    from openvivqa_jax.models.embeddings import VisionEncoder

    rng = np.random.default_rng(4)
    flat = _bv_checkpoint(rng, grid=4, prefix="params/")
    np.savez(tmp_path / "vit.npz", **flat)
    vcfg = ml_collections.ConfigDict(dict(kind="vit", patch_size=PATCH, width=WIDTH, depth=DEPTH, heads=HEADS,
                                          mlp_dim=MLP, posemb_grid=(4, 4), checkpoint=str(tmp_path / "vit.npz"),
                                          freeze=True))
    enc = VisionEncoder(kind="vit", d_model=12, vision_cfg=vcfg, dropout=0.0, rngs=nnx.Rngs(params=0))
    images = (rng.random((2, 24, 32, 3)) * 255).astype(np.uint8)  # 3 x 4 patches
    out = enc({"image": images})
    assert out["feats"].shape == (2, 12, 12) and out["raw"].shape == (2, 12, WIDTH)
    np.testing.assert_allclose(np.asarray(out["boxes"][0, 5]), [0.25, 1 / 3, 0.5, 2 / 3], rtol=1e-6)
    # The raw features are the loaded ViT's grid (resampled posemb for the 3x4 grid), row-major.
    want = np.asarray(enc.backbone(images.astype(np.float32) / 255.0)).reshape(2, 12, WIDTH)
    np.testing.assert_allclose(np.asarray(out["raw"]), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(enc.backbone.embedding.kernel[...]), flat["params/embedding/kernel"])
    with pytest.raises(ValueError, match="needs vision_cfg"):
        VisionEncoder(kind="vit", d_model=12, rngs=nnx.Rngs(params=0))


def test_freeze_mask_keeps_backbone_fixed():
    """model.vision.freeze: optax updates of vision/backbone are zero (also under AdamW weight decay), all
    others move; a frozen-params regex matching nothing is an error."""
    import jax
    from flax import nnx

    from openvivqa_jax.training import state as train_state
    from openvivqa_jax.models import build_model
    from openvivqa_jax.training.sharding import path_str

    cfg = tiny_model_config()
    cfg.train.optimizer = "adamw"
    cfg.train.weight_decay = 0.1
    cfg.model.vision.freeze = True
    _, params = nnx.split(build_model(cfg.model, 50), nnx.Param)
    tx, _ = train_state.make_optimizer(cfg.train, cfg.model.d_model)
    tx = train_state.freeze_params(tx, params, train_state.frozen_param_regex(cfg))
    state = tx.init(params)
    grads = jax.tree.map(lambda x: np.ones_like(x), params)

    @jax.jit
    def two_steps(params, state):
        for _ in range(2):
            updates, state = tx.update(grads, state, params)
            params = jax.tree.map(lambda p, u: p + u, params, updates)
        return updates

    updates = two_steps(params, state)
    moved = {path_str(p): float(np.abs(np.asarray(u)).max()) for p, u in jax.tree_util.tree_leaves_with_path(updates)}
    frozen = {k: v for k, v in moved.items() if k.startswith("vision/backbone/")}
    assert frozen and all(v == 0.0 for v in frozen.values())
    assert all(v > 0 for k, v in moved.items() if k not in frozen)
    with pytest.raises(ValueError, match="matches no parameter"):
        train_state.freeze_params(tx, params, r"nothing/.*")
    cfg.model.vision.freeze = False
    assert train_state.frozen_param_regex(cfg) is None


@pytest.mark.slow
def test_trainer_step_with_frozen_backbone(tmp_path):
    """The train step (optimizer state sharded through the optax mask) trains with the CNN backbone frozen."""
    import jax

    from conftest import random_batch
    from openvivqa_jax.vqa import experiment, train
    from openvivqa_jax.data import pipeline
    from openvivqa_jax.training.sharding import path_str
    from openvivqa_jax.text.tokenizer import train_sentencepiece

    cfg = tiny_model_config()
    cfg.model.vision.freeze = True
    cfg.mesh.shape = (1, 1)
    sents = [f"cửa hàng số {i} tên là {w}" for i, w in enumerate("an bình cường dũng em giang hà khoa".split())] * 20
    train_sentencepiece(sents, str(tmp_path / "spm.model"), 300)
    exp, state = experiment.create_experiment(cfg, str(tmp_path))
    batch = random_batch(cfg, exp.inputs.tokenizer.vocab_size, batch=2)
    batch = {k: np.asarray(v) for k, v in batch.items()}
    before = {path_str(p): np.asarray(x) for p, x in jax.tree_util.tree_leaves_with_path(state.params)}
    step = train.make_train_step(exp.spec)
    with sharding.mesh_context(exp.spec.mesh):
        state, m = step(state, pipeline.to_global(batch, exp.spec.batch_sharding))
    after = {path_str(p): np.asarray(x) for p, x in jax.tree_util.tree_leaves_with_path(state.params)}
    assert np.isfinite(float(m["loss"]))
    frozen = [k for k in before if k.startswith("vision/backbone/")]
    others = [k for k in before if k not in frozen]
    assert frozen and all(np.array_equal(before[k], after[k]) for k in frozen)
    # Parameters the random batch gives a gradient move (some, e.g. the copied-token input projection,
    # may get none from it); the projection right after the backbone always does.
    moved = [k for k in others if not np.array_equal(before[k], after[k])]
    assert len(moved) > 0.8 * len(others)
    assert "vision/feat_proj/kernel/value" in moved


def test_model_with_vit_backbone_end_to_end():
    """MLPAG configured with model.vision.kind='vit' (needs the models to pass config.model.vision to the
    VisionEncoder; skipped until they do)."""
    from openvivqa_jax.models import build_model

    cfg = tiny_model_config()
    v = cfg.model.vision
    v.kind = "vit"
    v.patch_size, v.width, v.depth, v.heads, v.mlp_dim, v.posemb_grid = 8, 16, 1, 2, 32, (3, 4)
    try:
        model = build_model(cfg.model, 50)
    except ValueError as e:
        if "needs vision_cfg" in str(e):
            pytest.skip("models do not pass config.model.vision to VisionEncoder yet")
        raise
    from conftest import random_batch

    batch = random_batch(cfg, 50)
    batch["image"] = np.zeros((2, 24, 32, 3), np.uint8)
    logits = model(batch)
    assert logits.shape == (2, cfg.model.max_answer_len, 50 + cfg.model.num_ocr)
    assert np.isfinite(np.asarray(logits)).all()
