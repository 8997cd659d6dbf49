"""Flax NNX models: shared layers, encoders, fusion blocks, answer decoder, pointer network, zoo.

:func:`build_model` maps ``config.model.name`` to a class of the zoo.
"""

from __future__ import annotations

import importlib

# JAX and Flax are imported by build_model, not here: the config check (openvivqa_jax.config_check) reads
# MODEL_REGISTRY and DTYPES before anything heavy is imported.

__all__ = ["MODEL_REGISTRY", "DTYPES", "OCR_FEATURE_GROUPS", "build_model", "model_class"]

#: ``name -> ".module:Class"``, the module relative to this package; modules are imported lazily. Each
#: model module is a leaf: it imports only the shared modules (``layers``, ``encoders``, ``embeddings``,
#: ``decoder``, ``base``, ``classifier``), never another model module.
MODEL_REGISTRY = {
    "mlpag": ".mlpag:MLPAG",
    "fst": ".fst:FST",
    "qumlag": ".qumlag:QuMLAG",
    "m4c": ".m4c:M4C",
    "saaa": ".saaa:SAAA",
    "mcan": ".mcan:MCAN",
    "lorra": ".lorra:LoRRA",
}

#: The compute dtypes ``config.model.dtype`` may name (parameters stay float32).
DTYPES = ("float32", "bfloat16")
#: OCR token feature groups of ``model.ocr_features`` (:class:`openvivqa_jax.models.embeddings.OcrEmbedding`);
#: here, without JAX, so that the config check names a misspelled one before anything is built.
OCR_FEATURE_GROUPS = ("pieces", "phoc", "appearance", "box_grid", "order", "question_match")


def model_class(name: str):
    """The class registered as ``name`` (``is_generator``, ``copies_ocr`` tell how to feed it).

    Raises:
      ValueError: for an unknown model name.
    """
    if name not in MODEL_REGISTRY:
        raise ValueError(f"unknown model {name!r}; known: {sorted(MODEL_REGISTRY)}")
    module, cls = MODEL_REGISTRY[name].split(":")
    return getattr(importlib.import_module(module, __name__), cls)


def build_model(model_cfg, vocab_size: int, seed: int = 0, tokenizer=None):
    """Instantiates ``model_cfg.name`` with ``vocab_size`` pieces.

    With ``tokenizer`` (the run's SentencePiece model), the pretrained text parts the config names are loaded
    from the user's files (fastText question vectors, a BERT text encoder:
    :func:`openvivqa_jax.models.pretrained.initialize_pretrained`); without it they keep their random start (an
    abstract build whose parameters come from a checkpoint).

    Args:
      model_cfg: ``config.model``; ``dtype`` selects the compute dtype (``float32`` or ``bfloat16``;
        parameters stay float32); ``attention_impl`` (default ``"xla"``) the implementation of
        ``jax.nn.dot_product_attention`` in every attention layer (``"cudnn"``: cuDNN's fused kernel).
      vocab_size: SentencePiece vocabulary size ``V``.
      seed: parameter initialization seed.

    Returns:
      The NNX module.

    Raises:
      ValueError: for an unknown model name or dtype, or an ``attention_impl`` that does not apply
        (:func:`~openvivqa_jax.models.layers.set_attention_impl`).
      openvivqa_jax.errors.UserError: a missing or bad pretrained file (with ``tokenizer``).
    """
    import jax.numpy as jnp
    from flax import nnx

    from openvivqa_jax.models.layers import set_attention_impl

    klass = model_class(model_cfg.name)
    dtype_name = model_cfg.get("dtype", "float32")
    if dtype_name not in DTYPES:
        raise ValueError(f"unknown model dtype {dtype_name!r}; known: {sorted(DTYPES)}")
    dtype = getattr(jnp, dtype_name)  # jnp.float32, jnp.bfloat16
    model = klass(model_cfg, vocab_size, rngs=nnx.Rngs(params=seed), dtype=dtype)
    if tokenizer is not None:
        from openvivqa_jax.models.pretrained import initialize_pretrained

        initialize_pretrained(model, model_cfg, tokenizer)
    return set_attention_impl(model, model_cfg.get("attention_impl", "xla"), dtype)
