"""Dropout whose keep-mask is drawn from fewer random bits (:func:`dropout_bit_width`): the same
Bernoulli(keep) masks as ``nnx.Dropout`` in distribution, at a fraction of the random-number cost.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from jax.extend.random import threefry_2x32

__all__ = ["Dropout", "dropout_bit_width"]

def dropout_bit_width(rate: float) -> int:
    """Random bits per element that dropout at ``rate`` draws: the narrowest of 8, 16 and 32 whose
    threshold ``round(keep * 2**w)`` (``keep = 1 - rate``) puts the realized drop rate within 0.1% of
    ``rate`` (relative), e.g. 8 for 0.5 or 0.25 (exact), 16 for 0.1 (drop rate 0.1000061)."""
    keep = 1.0 - rate
    for w in (8, 16):
        if abs(_threshold(keep, w) / 2 ** w - keep) <= 1e-3 * min(rate, keep):
            return w
    return 32


def _threshold(keep: float, width: int) -> int:
    """``round(keep * 2**width)``, at most ``2**width - 1`` (the largest ``width``-bit integer + 1 is not
    representable; keeping everything is ``rate == 0``, handled before)."""
    return min(round(keep * 2 ** width), 2 ** width - 1)


class Dropout(nnx.Dropout):
    """Inverted dropout (Srivastava et al. 2014): keep each element with probability ``keep = 1 - rate``
    and scale kept elements by ``1 / keep``; the identity when ``deterministic`` or ``rate == 0``.

    Same arguments, key stream and semantics as :class:`flax.nnx.Dropout` (one fresh key per call from
    ``rngs.dropout``, so masks are independent per element, per call, i.e. per layer, and per step, and
    fixed by the seed), with cheaper random bits. ``nnx.Dropout`` draws a 32-bit
    ``jax.random.bernoulli`` per element, and JAX's default partitionable threefry spends one
    threefry-2x32 block (64 bits) on each 32-bit word. Here each element takes only
    :func:`dropout_bit_width` bits (16 at rate 0.1, 8 at 0.5), and with a threefry key the words come
    from counter-mode threefry-2x32 (Salmon et al. 2011: block ``i`` encrypts counters ``(i, i + n/2)``),
    two words per block: 4x fewer blocks at rate 0.1, 8x at 0.5. An element is kept when its ``w``-bit
    integer is below ``round(keep * 2**w)``. Other key implementations (``train.dropout_prng`` ``rbg``,
    ``unsafe_rbg``) draw the words with ``jax.random.bits``.
    """

    def __call__(self, inputs, *, deterministic: bool | None = None, rngs=None):
        """``inputs`` of any shape -> same shape and dtype, masked and rescaled (or unchanged).

        Raises:
          ValueError: when dropout is active and no ``rngs`` is given (as ``nnx.Dropout``).
        """
        deterministic = self.deterministic if deterministic is None else deterministic
        if deterministic is None:
            raise ValueError("Dropout: pass deterministic=True/False")
        if self.rate == 0.0 or deterministic:
            return inputs
        if self.rate == 1.0:
            return jnp.zeros_like(inputs)
        rngs = self.rngs if rngs is None else rngs
        if rngs is None:
            raise ValueError("Dropout: deterministic is False but no rngs were given")
        if isinstance(rngs, nnx.Rngs):
            key = rngs[self.rng_collection]()
        elif isinstance(rngs, nnx.RngStream):
            key = rngs()
        else:
            key = rngs
        shape = list(inputs.shape)
        for dim in self.broadcast_dims:
            shape[dim] = 1
        keep = 1.0 - self.rate
        mask = _keep_mask(key, tuple(shape), keep, dropout_bit_width(self.rate))
        mask = jnp.broadcast_to(mask, inputs.shape)
        return jax.lax.select(mask, inputs / keep, jnp.zeros_like(inputs))


def _keep_mask(key: jax.Array, shape: tuple[int, ...], keep: float, width: int) -> jax.Array:
    """Bool ``shape`` mask, ``True`` with probability ``round(keep * 2**width) / 2**width`` per element,
    from ``width``-bit integers packed ``32 / width`` to a 32-bit word (see :class:`Dropout`)."""
    n = 1
    for s in shape:
        n *= s
    per_word = 32 // width
    words = -(-n // per_word)
    words += words % 2  # threefry-2x32 takes counters in pairs
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        impl = str(jax.random.key_impl(key))
        data = jax.random.key_data(key)
    else:  # a raw uint32[2] key is threefry's
        impl, data = "threefry2x32", key
    if impl == "threefry2x32":
        bits = threefry_2x32(data, jax.lax.iota(jnp.uint32, words))
    else:
        bits = jax.random.bits(key, (words,), jnp.uint32)
    udtype = {8: jnp.uint8, 16: jnp.uint16, 32: jnp.uint32}[width]
    if width < 32:
        bits = jax.lax.bitcast_convert_type(bits, udtype).reshape(-1)
    return (bits[:n] < jnp.asarray(_threshold(keep, width), udtype)).reshape(shape)
