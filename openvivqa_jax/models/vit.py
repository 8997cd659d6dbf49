"""Vision Transformer backbone (Dosovitskiy et al. 2021) in Flax NNX, with a loader for big_vision ``.npz``
checkpoints (ViT, AugReg, DeiT-3 and SigLIP image towers).

Architecture (as big_vision's ``models/vit.py`` defines it, so its checkpoints load unchanged):

* patch embedding: a ``patch x patch`` convolution with stride ``patch`` (``embedding/kernel``
  ``(ph, pw, 3, width)``, ``embedding/bias``) over pixels scaled to ``[-1, 1]``;
* learned position embedding ``pos_embedding`` ``(1, gh * gw, width)`` added before an optional ``cls``
  token (pool type ``tok``) is prepended;
* ``depth`` pre-LN encoder blocks: ``x + MHA(LN_0(x))`` then ``x + MLP(LN_1(x))`` with a GELU MLP
  (tanh approximation, flax's default) of width ``mlp_dim``; LayerNorm epsilon 1e-6;
* a final LayerNorm ``Transformer/encoder_norm``.

The output is the grid of encoded patch tokens ``(batch, gh, gw, width)`` (the ``cls`` token, if any,
is dropped): the grid features of :class:`openvivqa_jax.models.embeddings.VisionEncoder`. No pooling
head is built; a checkpoint's ``head``, ``pre_logits`` and ``MAPHead_0`` weights are ignored (counted).

Checkpoint naming (big_vision, flattened with ``/``; optional prefixes ``params/``, ``params/img/``
(SigLIP), ``opt/target/`` (old ``vision_transformer`` repository)), mapped onto this module::

    embedding/{kernel,bias}                                               -> embedding
    pos_embedding  (or Transformer/posembed_input/pos_embedding)          -> pos_embedding
    cls                                                                   -> cls (when cls_token)
    Transformer/encoderblock_{i}/LayerNorm_{0,1}/{scale,bias}             -> blocks[i].norm1 / norm2
    Transformer/encoderblock_{i}/MultiHeadDotProductAttention_0/
        {query,key,value}/kernel (width, heads, head_dim), bias (heads, head_dim)
        out/kernel (heads, head_dim, width), bias (width,)                -> blocks[i].attn.*
    Transformer/encoderblock_{i}/MlpBlock_0/Dense_{0,1}/{kernel,bias}     -> blocks[i].mlp.wi / wo
    Transformer/encoder_norm/{scale,bias}                                 -> encoder_norm

A position-embedding grid of another size than the module's is resampled with linear interpolation
(big_vision's ``resample_posemb``: ``scipy.ndimage.zoom`` order 1, corners aligned); a grid stored with
its ``cls`` entry (``1 + g * g`` rows, the old format) has that entry split off as big_vision's
``fix_old_checkpoints`` does. At call time a grid of
another size than the stored one (images of another size) is resampled the same way.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from flax import nnx

from openvivqa_jax.errors import UserError
from openvivqa_jax.models.layers import Dropout, FeedForward, MultiHeadAttention, layer_norm

__all__ = ["VIT_VARIANTS", "ViT", "ViTBlock", "ViTMlp", "CheckpointError", "vit_settings", "resample_posemb",
           "load_big_vision_npz", "read_npz"]

#: ``variant -> (width, depth, mlp_dim, num_heads)``, big_vision's ``decode_variant`` table (Zhai et al. 2022,
#: "Scaling Vision Transformers", Table 2; So400m from the SigLIP paper).
VIT_VARIANTS: dict[str, tuple[int, int, int, int]] = {
    "Ti": (192, 12, 768, 3),
    "S": (384, 12, 1536, 6),
    "M": (512, 12, 2048, 8),
    "B": (768, 12, 3072, 12),
    "L": (1024, 24, 4096, 16),
    "So400m": (1152, 27, 4304, 16),
    "H": (1280, 32, 5120, 16),
}

_PREFIXES = ("params/img/", "params/", "opt/target/", "img/")
_IGNORED_TOP = ("head/", "pre_logits/", "MAPHead_0/")


class CheckpointError(UserError, ValueError):
    """A ``.npz`` checkpoint cannot be loaded; the message names the file, the key and what is wrong."""


def vit_settings(vision_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Resolves the ViT sizes of ``config.model.vision``.

    Fields: ``vit_variant`` (``"Ti/16"``, ``"B/32"``, ``"S"``..., or None) gives width, depth, mlp_dim,
    heads and (after ``/``) the patch size; explicit ``patch_size`` (int or ``(h, w)``), ``width``,
    ``depth``, ``heads``, ``mlp_dim`` override it. ``posemb_grid`` ``(gh, gw)`` is the stored
    position-embedding grid (default 14 x 14, a 224-pixel image at patch 16); ``cls_token`` (default
    False) prepends big_vision's ``cls`` token (pool type ``tok``).

    Returns:
      ``{patch_size: (ph, pw), width, depth, heads, mlp_dim, posemb_grid: (gh, gw), cls_token}``.

    Raises:
      ValueError: an unknown variant, a missing size, or a width not divisible by heads.
    """
    get = (lambda k, d=None: vision_cfg.get(k, d)) if hasattr(vision_cfg, "get") else (
        lambda k, d=None: getattr(vision_cfg, k, d))
    out: dict[str, Any] = {}
    variant = get("vit_variant")
    if variant:
        name, _, patch = str(variant).partition("/")
        if name not in VIT_VARIANTS:
            raise ValueError(f"model.vision.vit_variant {variant!r}: unknown size {name!r}; known: {sorted(VIT_VARIANTS)}")
        out["width"], out["depth"], out["mlp_dim"], out["heads"] = VIT_VARIANTS[name]
        if patch:
            out["patch_size"] = int(patch)
    for key in ("patch_size", "width", "depth", "heads", "mlp_dim"):
        if get(key) is not None:
            out[key] = get(key)
    missing = [k for k in ("patch_size", "width", "depth", "heads") if out.get(k) is None]
    if missing:
        raise ValueError(f"model.vision for kind 'vit' needs {missing} (or a vit_variant such as 'Ti/16')")
    p = out["patch_size"]
    out["patch_size"] = (int(p), int(p)) if np.ndim(p) == 0 else tuple(int(x) for x in p)
    out["mlp_dim"] = int(out.get("mlp_dim") or 4 * out["width"])
    out["width"], out["depth"], out["heads"] = int(out["width"]), int(out["depth"]), int(out["heads"])
    if out["width"] % out["heads"]:
        raise ValueError(f"ViT width {out['width']} is not divisible by heads {out['heads']}")
    grid = get("posemb_grid") or (14, 14)
    out["posemb_grid"] = (int(grid), int(grid)) if np.ndim(grid) == 0 else tuple(int(g) for g in grid)
    out["cls_token"] = bool(get("cls_token", False))
    return out


def resample_posemb(posemb, old_grid: tuple[int, int], new_grid: tuple[int, int]):
    """Resamples a position-embedding grid with linear interpolation, as big_vision's ``resample_posemb``
    does with ``scipy.ndimage.zoom(order=1)``: output index ``o`` of an axis samples input coordinate
    ``o * (old - 1) / (new - 1)`` (corners aligned), separably along rows and columns.

    Works on numpy arrays (at checkpoint load) and on traced jax arrays (at call time, for images whose
    patch grid differs from the stored one), with the same numbers.

    Args:
      posemb: ``(1, gh * gw, width)``.
      old_grid: ``(gh, gw)`` of ``posemb``; new_grid: the target ``(gh', gw')``.

    Returns:
      ``(1, gh' * gw', width)`` (the input itself when the grids are equal).
    """
    if tuple(old_grid) == tuple(new_grid):
        return posemb
    xp = np if isinstance(posemb, np.ndarray) else jnp
    width = posemb.shape[-1]
    grid = xp.reshape(posemb, (old_grid[0], old_grid[1], width))

    def along(g, axis: int, n_old: int, n_new: int):
        pos = np.linspace(0.0, n_old - 1.0, n_new) if n_new > 1 else np.zeros((1,))
        lo = np.clip(np.floor(pos).astype(np.int64), 0, n_old - 1)
        hi = np.minimum(lo + 1, n_old - 1)
        frac = (pos - lo).astype(np.float32)
        shape = [1, 1, 1]
        shape[axis] = n_new
        frac = frac.reshape(shape)
        return xp.take(g, lo, axis=axis) * (1.0 - frac) + xp.take(g, hi, axis=axis) * frac

    grid = along(grid, 0, old_grid[0], new_grid[0])
    grid = along(grid, 1, old_grid[1], new_grid[1])
    return xp.reshape(grid, (1, new_grid[0] * new_grid[1], width)).astype(posemb.dtype)


class ViTMlp(FeedForward):
    """big_vision's ``MlpBlock``: ``wo(gelu(wi(x)))``, ``width -> mlp_dim -> width`` (tanh GELU): the zoo's
    :class:`~openvivqa_jax.models.layers.FeedForward` (same parameters ``wi``, ``wo``) with GELU; ``x``
    ``(batch, tokens, width)`` -> same shape."""

    def __init__(self, width: int, mlp_dim: int, dropout: float, *, rngs: nnx.Rngs, dtype: Any = jnp.float32):
        super().__init__(width, mlp_dim, dropout, rngs=rngs, dtype=dtype)

    def activation(self, h: jax.Array) -> jax.Array:
        """Tanh-approximated GELU of ``h`` ``(batch, tokens, mlp_dim)``, as big_vision's ViT."""
        return jax.nn.gelu(h, approximate=True)


class ViTBlock(nnx.Module):
    """big_vision's ``Encoder1DBlock``: ``x + MHA(LN_0(x))``, then ``x + MLP(LN_1(x))``."""

    def __init__(self, width: int, heads: int, mlp_dim: int, dropout: float, *, rngs: nnx.Rngs,
                 dtype: Any = jnp.float32):
        self.norm1 = layer_norm(width, rngs, dtype)
        self.attn = MultiHeadAttention(width, heads, 0.0, rngs=rngs, dtype=dtype)
        self.norm2 = layer_norm(width, rngs, dtype)
        self.mlp = ViTMlp(width, mlp_dim, dropout, rngs=rngs, dtype=dtype)
        self.dropout = Dropout(dropout)

    def __call__(self, x, *, deterministic: bool = True, rngs: nnx.Rngs | None = None):
        """``x``: ``(batch, tokens, width)`` -> same shape."""
        y = self.norm1(x)
        x = x + self.dropout(self.attn(y, y, None), deterministic=deterministic, rngs=rngs)
        y = self.mlp(self.norm2(x), deterministic=deterministic, rngs=rngs)
        return x + self.dropout(y, deterministic=deterministic, rngs=rngs)


class ViT(nnx.Module):
    """ViT encoder over pixels giving grid features.

    Args:
      patch_size: ``(ph, pw)`` pixels.
      width, depth, heads, mlp_dim: transformer sizes.
      posemb_grid: ``(gh, gw)`` of the stored position embedding (resampled to the input's grid at call
        time when the image size differs).
      cls_token: prepend a learned ``cls`` token (big_vision pool type ``tok``); it is dropped from the output.
      dropout: dropout after the position embedding and in every block (big_vision's ``dropout``).
      rngs: parameter RNGs; dtype: compute dtype (parameters stay float32).

    Attributes:
      out_dim: ``width``; stride: ``ph`` (for square patches; the grid is ``(H // ph, W // pw)``).
    """

    def __init__(self, *, patch_size: tuple[int, int], width: int, depth: int, heads: int, mlp_dim: int,
                 posemb_grid: tuple[int, int] = (14, 14), cls_token: bool = False, dropout: float = 0.0,
                 rngs: nnx.Rngs, dtype: Any = jnp.float32):
        self.patch_size = tuple(int(p) for p in patch_size)
        self.width = int(width)
        self.posemb_grid = tuple(int(g) for g in posemb_grid)
        self.out_dim = self.width
        self.stride = self.patch_size[0]
        self.embedding = nnx.Conv(3, width, kernel_size=self.patch_size, strides=self.patch_size, padding="VALID",
                                  dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
        n = self.posemb_grid[0] * self.posemb_grid[1]
        self.pos_embedding = nnx.Param(
            jax.random.normal(rngs.params(), (1, n, width), jnp.float32) / np.sqrt(width))
        self.cls = nnx.Param(jnp.zeros((1, 1, width), jnp.float32)) if cls_token else None
        self.blocks = nnx.List([ViTBlock(width, heads, mlp_dim, dropout, rngs=rngs, dtype=dtype)
                                for _ in range(depth)])
        self.encoder_norm = layer_norm(width, rngs, dtype)
        self.dropout = Dropout(dropout)

    def __call__(self, images: jax.Array, *, deterministic: bool = True, rngs: nnx.Rngs | None = None) -> jax.Array:
        """``images``: ``(batch, H, W, 3)`` float in [0, 1] -> grid ``(batch, H // ph, W // pw, width)``.

        Pixels are scaled to ``[-1, 1]``, the range big_vision's ViT checkpoints were trained on.
        """
        x = self.embedding((images * 2.0 - 1.0).astype(self.embedding.dtype or jnp.float32))
        b, gh, gw, c = x.shape
        x = x.reshape(b, gh * gw, c)
        pos = resample_posemb(self.pos_embedding[...], self.posemb_grid, (gh, gw))
        x = x + pos.astype(x.dtype)
        if self.cls is not None:
            x = jnp.concatenate([jnp.broadcast_to(self.cls[...].astype(x.dtype), (b, 1, c)), x], 1)
        x = self.dropout(x, deterministic=deterministic, rngs=rngs)
        for block in self.blocks:
            x = block(x, deterministic=deterministic, rngs=rngs)
        x = self.encoder_norm(x)
        if self.cls is not None:
            x = x[:, 1:]
        return x.reshape(b, gh, gw, c)


def read_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Reads a ``.npz`` checkpoint into ``{flat key: array}``.

    Raises:
      CheckpointError: the file is missing or is not a readable ``.npz`` archive (names the file).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise CheckpointError(f"{path}: ViT checkpoint file not found")
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: np.asarray(z[k]) for k in z.files}
    except (OSError, ValueError, EOFError) as e:
        raise CheckpointError(f"{path}: not a readable .npz checkpoint ({type(e).__name__}: {e})") from e


def _strip_prefix(flat: dict[str, np.ndarray], path: str) -> tuple[dict[str, np.ndarray], str]:
    if "embedding/kernel" in flat:
        return flat, ""
    for p in _PREFIXES:
        if p + "embedding/kernel" in flat:
            return {k[len(p):]: v for k, v in flat.items() if k.startswith(p)}, p
    raise CheckpointError(f"{path}: no ViT patch embedding 'embedding/kernel' (also looked under prefixes "
                          f"{list(_PREFIXES)}); keys start with {sorted(flat)[:5]}")


def load_big_vision_npz(vit: ViT, path: str | os.PathLike, *, strict_unused: bool = False) -> dict[str, Any]:
    """Loads a big_vision-format ``.npz`` checkpoint into ``vit`` in place (see the module doc for names).

    Args:
      vit: the module to fill (its sizes must match the checkpoint's, except the position-embedding
        grid, which is resampled).
      path: the ``.npz`` file.
      strict_unused: raise when the checkpoint has keys this module does not use (other than the
        classification head, ``pre_logits`` and ``MAPHead_0``, which are always ignored).

    Returns:
      ``{"prefix": str, "loaded": int, "ignored": list[str], "posemb_resampled": bool}``; ignored keys are
      logged too.

    Raises:
      CheckpointError: a missing key, a shape that does not match the module (names the file, the key,
        both shapes), a ``cls`` token the module expects but the checkpoint lacks, or unused keys with
        ``strict_unused``.
    """
    path = os.fspath(path)
    flat, prefix = _strip_prefix(read_npz(path), path)
    used: set[str] = set()

    def take(key: str) -> np.ndarray:
        if key not in flat:
            raise CheckpointError(f"{path}: key {prefix + key!r} is missing (needed for this ViT)")
        used.add(key)
        return flat[key]

    def put(var: nnx.Variable, key: str, value: np.ndarray | None = None, heads: bool = False) -> None:
        value = take(key) if value is None else value
        target = tuple(var[...].shape)
        if heads and value.size == int(np.prod(target)) and tuple(value.shape) != target:
            # DenseGeneral's per-head layout, flattened row-major: (w, H, hd) -> (w, H * hd),
            # (H, hd, w) -> (H * hd, w), (H, hd) -> (H * hd,).
            value = value.reshape(target)
        if tuple(value.shape) != target:
            raise CheckpointError(f"{path}: key {prefix + key!r} has shape {tuple(value.shape)}, this ViT "
                                  f"expects {target}")
        var[...] = jnp.asarray(value, jnp.float32)

    put(vit.embedding.kernel, "embedding/kernel")
    put(vit.embedding.bias, "embedding/bias")
    pe_key, pe, cls_from_pe, resampled = _position_embedding(vit, flat, path, prefix, take)
    put(vit.pos_embedding, pe_key, pe)
    if vit.cls is not None:
        if "cls" not in flat:
            raise CheckpointError(f"{path}: this ViT has a cls token (model.vision.cls_token) but the checkpoint "
                                  "has no 'cls'")
        cls = take("cls").astype(np.float32)
        if cls_from_pe is not None:
            cls = cls + cls_from_pe
        put(vit.cls, "cls", cls)
    _put_blocks(vit, put)
    ignored = _unused_keys(vit, flat, used, path, prefix, strict_unused)
    logging.info("ViT %s: loaded %d arrays (prefix %r)", path, len(used), prefix)
    return {"prefix": prefix, "loaded": len(used), "ignored": ignored, "posemb_resampled": resampled}


def _position_embedding(vit: ViT, flat: dict[str, np.ndarray], path: str, prefix: str, take):
    """The checkpoint's position embedding on ``vit``'s grid: ``(key, pe, cls_from_pe, resampled)`` with ``pe``
    float32 ``(1, gh * gw, width)`` (resampled from the stored grid when it differs, then ``resampled`` True) and
    ``cls_from_pe`` ``(1, 1, width)``, the ``cls`` entry an old-format grid stores first (None otherwise).
    ``take(key)`` reads a checkpoint array and marks it used.

    Raises:
      CheckpointError: no position embedding, a grid that is not square, or another width than ``vit``'s.
    """
    # Position embedding: new location, or the older ones fix_old_checkpoints moves.
    pe_key = next((k for k in ("pos_embedding", "Transformer/pos_embedding", "Transformer/posembed_input/pos_embedding")
                   if k in flat), None)
    if pe_key is None:
        raise CheckpointError(f"{path}: no position embedding ('pos_embedding', 'Transformer/pos_embedding' or "
                              "'Transformer/posembed_input/pos_embedding')")
    pe = take(pe_key).astype(np.float32)
    if pe.ndim == 2:
        pe = pe[None]
    n = pe.shape[1]
    cls_from_pe = None
    g = int(round(np.sqrt(n)))
    if g * g != n and int(round(np.sqrt(n - 1))) ** 2 == n - 1:
        # Old format: cls entry first in the position embedding; it belongs to the cls token.
        cls_from_pe, pe = pe[:, :1], pe[:, 1:]
        n, g = n - 1, int(round(np.sqrt(n - 1)))
    if g * g != n:
        raise CheckpointError(f"{path}: position embedding {tuple(pe.shape)} is not a square grid")
    if pe.shape[-1] != vit.width:
        raise CheckpointError(f"{path}: key {prefix + pe_key!r} has width {pe.shape[-1]}, this ViT has width "
                              f"{vit.width}")
    resampled = (g, g) != vit.posemb_grid
    if resampled:
        logging.info("ViT %s: position embedding grid %dx%d resampled to %s", path, g, g, vit.posemb_grid)
        pe = resample_posemb(pe, (g, g), vit.posemb_grid)
    return pe_key, pe, cls_from_pe, resampled


def _put_blocks(vit: ViT, put) -> None:
    """Fills ``vit``'s encoder blocks and final LayerNorm with ``put(variable, key, heads=...)``, which reads the
    checkpoint array ``key`` into ``variable``."""
    for i, blk in enumerate(vit.blocks):
        b = f"Transformer/encoderblock_{i}/"
        put(blk.norm1.scale, b + "LayerNorm_0/scale")
        put(blk.norm1.bias, b + "LayerNorm_0/bias")
        put(blk.norm2.scale, b + "LayerNorm_1/scale")
        put(blk.norm2.bias, b + "LayerNorm_1/bias")
        a = b + "MultiHeadDotProductAttention_0/"
        for name in ("query", "key", "value", "out"):
            lin = getattr(blk.attn, name)
            put(lin.kernel, a + f"{name}/kernel", heads=True)
            put(lin.bias, a + f"{name}/bias", heads=True)
        put(blk.mlp.wi.kernel, b + "MlpBlock_0/Dense_0/kernel")
        put(blk.mlp.wi.bias, b + "MlpBlock_0/Dense_0/bias")
        put(blk.mlp.wo.kernel, b + "MlpBlock_0/Dense_1/kernel")
        put(blk.mlp.wo.bias, b + "MlpBlock_0/Dense_1/bias")
    put(vit.encoder_norm.scale, "Transformer/encoder_norm/scale")
    put(vit.encoder_norm.bias, "Transformer/encoder_norm/bias")


def _unused_keys(vit: ViT, flat: dict[str, np.ndarray], used: set[str], path: str, prefix: str,
                 strict_unused: bool) -> list[str]:
    """The sorted checkpoint keys not in ``used``, logged (and a cls token the module does not take warned of).

    Raises:
      CheckpointError: the checkpoint has more encoder blocks than ``vit``, or (``strict_unused``) keys other
        than the always-ignored heads are unused.
    """
    extra_blocks = sorted({k.split("/")[1] for k in flat if k.startswith("Transformer/encoderblock_")
                           and int(k.split("/")[1].rsplit("_", 1)[1]) >= len(vit.blocks)})
    if extra_blocks:
        raise CheckpointError(f"{path}: the checkpoint has {len(extra_blocks)} more encoder blocks than this ViT's "
                              f"depth {len(vit.blocks)} (e.g. {extra_blocks[0]}); set model.vision.depth")
    ignored = sorted(k for k in flat if k not in used)
    if vit.cls is None and "cls" in flat:
        logging.warning("ViT %s: the checkpoint has a cls token but model.vision.cls_token is False; it is not used",
                        path)
    unexpected = [k for k in ignored if not k.startswith(_IGNORED_TOP) and k != "cls"]
    if unexpected and strict_unused:
        raise CheckpointError(f"{path}: {len(unexpected)} checkpoint keys are not used by this ViT, e.g. "
                              f"{[prefix + k for k in unexpected[:3]]}")
    if ignored:
        logging.info("ViT %s: %d checkpoint keys not used (%s%s)", path, len(ignored), ", ".join(ignored[:4]),
                     ", ..." if len(ignored) > 4 else "")
    return ignored
