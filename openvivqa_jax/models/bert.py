"""A BERT / RoBERTa text encoder in NNX that loads Hugging Face checkpoints from a folder (M4C's question encoder).

M4C (Hu et al. 2020 §3.1) encodes the question with the first three layers of BERT-base (Devlin et al. 2019) and
fine-tunes them; the OpenViVQA authors' M4C (paper §5.1) uses BERT as the question embedding without naming the
checkpoint. This module reads the folder a user downloaded (nothing is downloaded here):

* ``config.json``: ``model_type`` (``bert``, ``roberta``; PhoBERT and XLM-R are ``roberta``), ``vocab_size``,
  ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``, ``intermediate_size``, ``hidden_act``,
  ``max_position_embeddings``, ``type_vocab_size``, ``layer_norm_eps``, ``pad_token_id``;
* ``model.safetensors`` (read with the ``safetensors`` library, no torch). A folder holding only
  ``pytorch_model.bin`` is refused with the conversion command: that file is a pickle whose reading executes
  code and needs torch.

The layer is HF's ``BertLayer`` (post-LN): ``h = LN(x + W_o Attn(x))``, ``y = LN(h + W_2 act(W_1 h))``; the
embeddings are ``LN(word + position + token_type)``, RoBERTa's positions counting from ``pad_token_id + 1``
over the real tokens (HF ``create_position_ids_from_input_ids``).

:func:`load_hf_checkpoint` maps every tensor of the first ``N`` layers and the embeddings, reports the tensors it
ignored (pooler, MLM head, later layers, buffers), and refuses a missing tensor or a shape mismatch in one line
naming the tensor.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from openvivqa_jax import jsonio
from openvivqa_jax.errors import UserError

__all__ = ["text_encoder_folder", "TEXT_ENCODERS", "BertCheckpointError", "BertSettings", "read_bert_settings",
           "BertEncoder", "BertLayer",
           "read_hf_tensors", "load_hf_checkpoint", "LoadReport", "hf_parameter_names"]

_ACTIVATIONS = {
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "relu": jax.nn.relu,
}


#: ``model.text_encoder.kind``: ``"learned"`` (M4C's transformer text encoder trained from scratch) or ``"bert"``.
TEXT_ENCODERS = ("learned", "bert")


def text_encoder_folder(model_cfg) -> str | None:
    """The checkpoint folder of ``model.text_encoder`` when its kind is ``"bert"`` and its ``path`` is set, else
    None (the text encoder trained from scratch). A ``"bert"`` kind without a path says so in one warning line.

    Raises:
      ValueError: an unknown ``model.text_encoder.kind``.
    """
    te = model_cfg.get("text_encoder")
    kind = (te.get("kind") if te is not None else None) or "learned"
    if kind not in TEXT_ENCODERS:
        raise ValueError(f"model.text_encoder.kind must be one of {TEXT_ENCODERS}, got {kind!r}")
    if kind != "bert":
        return None
    if not te.get("path"):
        from absl import logging

        logging.warning("model.text_encoder.kind='bert' but model.text_encoder.path is not set: M4C's text encoder "
                        "is trained from scratch (the checkpoint folder: config.json, model.safetensors, tokenizer)")
        return None
    return os.path.expanduser(te.path)


class BertCheckpointError(UserError, ValueError):
    """A Hugging Face checkpoint folder that is missing, unreadable, or does not match the encoder (one line,
    naming the file or tensor)."""


@dataclasses.dataclass(frozen=True)
class BertSettings:
    """The architecture of a checkpoint (``config.json``'s fields of the same names)."""

    model_type: str = "bert"
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1

    @property
    def roberta_positions(self) -> bool:
        """RoBERTa-family position ids (from ``pad_token_id + 1``)."""
        return self.model_type in ("roberta", "xlm-roberta", "camembert", "phobert")


def read_bert_settings(folder: str) -> BertSettings:
    """The :class:`BertSettings` of ``<folder>/config.json``.

    Raises:
      BertCheckpointError: the folder or ``config.json`` is missing or unreadable, the model type is not BERT or
        RoBERTa, or the activation is unknown.
    """
    path = os.path.join(os.path.expanduser(folder), "config.json")
    if not os.path.isfile(path):
        raise BertCheckpointError(f"BERT checkpoint config not found: {path} (the folder of a Hugging Face "
                                  "checkpoint: config.json, model.safetensors and the tokenizer files)")
    raw = jsonio.read_json(path, error=BertCheckpointError)
    if not isinstance(raw, dict):
        raise BertCheckpointError(f"{path}: expected a JSON object of settings, got {type(raw).__name__}")
    fields = {f.name for f in dataclasses.fields(BertSettings)}
    s = BertSettings(**{k: v for k, v in raw.items() if k in fields})
    if s.model_type not in ("bert", "roberta", "xlm-roberta", "camembert", "phobert"):
        raise BertCheckpointError(f"{path}: model_type {s.model_type!r} is not a BERT or RoBERTa encoder")
    if s.hidden_act not in _ACTIVATIONS:
        raise BertCheckpointError(f"{path}: hidden_act {s.hidden_act!r} is not one of {sorted(_ACTIVATIONS)}")
    if s.hidden_size % s.num_attention_heads:
        raise BertCheckpointError(f"{path}: hidden_size {s.hidden_size} is not a multiple of num_attention_heads "
                                  f"{s.num_attention_heads}")
    return s


def _linear(din: int, dout: int, rngs: nnx.Rngs, dtype: Any) -> nnx.Linear:
    # BERT's initializer: normal(0, 0.02) kernels, zero biases (used when no checkpoint is loaded).
    return nnx.Linear(din, dout, dtype=dtype, param_dtype=jnp.float32,
                      kernel_init=nnx.initializers.normal(0.02), rngs=rngs)


def _norm(d: int, eps: float, rngs: nnx.Rngs, dtype: Any) -> nnx.LayerNorm:
    return nnx.LayerNorm(d, epsilon=eps, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)


class BertLayer(nnx.Module):
    """HF ``BertLayer`` (post-LN self-attention and feed-forward) over ``(batch, len, hidden)``."""

    def __init__(self, s: BertSettings, *, rngs: nnx.Rngs, dtype: Any = jnp.float32):
        h = s.hidden_size
        self.num_heads = s.num_attention_heads
        self.query, self.key, self.value = (_linear(h, h, rngs, dtype) for _ in range(3))
        self.attn_out = _linear(h, h, rngs, dtype)
        self.attn_norm = _norm(h, s.layer_norm_eps, rngs, dtype)
        self.intermediate = _linear(h, s.intermediate_size, rngs, dtype)
        self.output = _linear(s.intermediate_size, h, rngs, dtype)
        self.output_norm = _norm(h, s.layer_norm_eps, rngs, dtype)
        self.act = _ACTIVATIONS[s.hidden_act]
        self.attn_dropout = nnx.Dropout(s.attention_probs_dropout_prob)
        self.dropout = nnx.Dropout(s.hidden_dropout_prob)

    def __call__(self, x, mask, *, deterministic=True, rngs=None):
        """``x`` ``(batch, len, hidden)``, ``mask`` ``(batch, len)`` bool keys -> ``(batch, len, hidden)``."""
        b, n, h = x.shape
        dh = h // self.num_heads

        def heads(t):
            return t.reshape(b, n, self.num_heads, dh).transpose(0, 2, 1, 3)

        q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
        logits = jnp.einsum("bhqd,bhkd->bhqk", q, k).astype(jnp.float32) / math.sqrt(dh)
        logits = jnp.where(mask[:, None, None, :], logits, jnp.finfo(jnp.float32).min)
        probs = self.attn_dropout(jax.nn.softmax(logits, -1), deterministic=deterministic, rngs=rngs)
        ctx = jnp.einsum("bhqk,bhkd->bhqd", probs.astype(v.dtype), v).transpose(0, 2, 1, 3).reshape(b, n, h)
        x = self.attn_norm(x + self.dropout(self.attn_out(ctx), deterministic=deterministic, rngs=rngs))
        y = self.output(self.act(self.intermediate(x)))
        return self.output_norm(x + self.dropout(y, deterministic=deterministic, rngs=rngs))


class BertEncoder(nnx.Module):
    """Embeddings and the first ``num_layers`` layers of a BERT / RoBERTa encoder (module doc).

    Args:
      settings: the architecture (:func:`read_bert_settings`).
      num_layers: ``N`` layers kept (M4C: 3 of BERT-base); at most ``settings.num_hidden_layers``.
      rngs, dtype: parameter RNGs and compute dtype.

    Raises:
      ValueError: ``num_layers`` is not in ``[1, num_hidden_layers]``.
    """

    def __init__(self, settings: BertSettings, num_layers: int, *, rngs: nnx.Rngs, dtype: Any = jnp.float32):
        s = settings
        if not 1 <= num_layers <= s.num_hidden_layers:
            raise ValueError(f"model.text_encoder.num_layers={num_layers} must be in [1, {s.num_hidden_layers}] "
                             f"(the checkpoint's num_hidden_layers)")
        self.settings = s
        emb = dict(dtype=dtype, param_dtype=jnp.float32, embedding_init=nnx.initializers.normal(0.02), rngs=rngs)
        self.word_embeddings = nnx.Embed(s.vocab_size, s.hidden_size, **emb)
        self.position_embeddings = nnx.Embed(s.max_position_embeddings, s.hidden_size, **emb)
        self.token_type_embeddings = nnx.Embed(max(s.type_vocab_size, 1), s.hidden_size, **emb)
        self.emb_norm = _norm(s.hidden_size, s.layer_norm_eps, rngs, dtype)
        self.emb_dropout = nnx.Dropout(s.hidden_dropout_prob)
        self.layers = nnx.List([BertLayer(s, rngs=rngs, dtype=dtype) for _ in range(num_layers)])

    def position_ids(self, mask: jax.Array) -> jax.Array:
        """``(batch, len)`` int32 position ids: ``0..len-1`` (BERT), or for RoBERTa ``pad + 1 + k`` at the
        ``k``-th real token and ``pad`` at padding (HF ``create_position_ids_from_input_ids``)."""
        if not self.settings.roberta_positions:
            return jnp.broadcast_to(jnp.arange(mask.shape[1], dtype=jnp.int32)[None], mask.shape)
        m = mask.astype(jnp.int32)
        return jnp.cumsum(m, 1) * m + self.settings.pad_token_id

    def __call__(self, ids, mask, token_types=None, *, deterministic=True, rngs=None):
        """Encodes token ids.

        Args:
          ids: ``(batch, len)`` int32 ids of the checkpoint's tokenizer (with its special tokens).
          mask: ``(batch, len)`` bool, real tokens.
          token_types: ``(batch, len)`` int32 segment ids (None: all 0).

        Returns:
          ``(batch, len, hidden)`` hidden states of layer ``N``.
        """
        mask = mask.astype(bool)
        tt = jnp.zeros_like(ids) if token_types is None else token_types
        x = self.word_embeddings(ids) + self.position_embeddings(self.position_ids(mask)) + \
            self.token_type_embeddings(tt)
        x = self.emb_dropout(self.emb_norm(x), deterministic=deterministic, rngs=rngs)
        for layer in self.layers:
            x = layer(x, mask, deterministic=deterministic, rngs=rngs)
        return x


def read_hf_tensors(folder: str) -> dict[str, np.ndarray]:
    """The tensors of ``<folder>/model.safetensors`` as numpy arrays (float32 for floating tensors).

    Raises:
      BertCheckpointError: no ``model.safetensors`` (a ``pytorch_model.bin``-only folder gets the conversion
        command), or the file is not a safetensors file.
    """
    folder = os.path.expanduser(folder)
    path = os.path.join(folder, "model.safetensors")
    if not os.path.isfile(path):
        if os.path.isfile(os.path.join(folder, "pytorch_model.bin")):
            raise BertCheckpointError(
                f"{folder} has pytorch_model.bin but no model.safetensors; reading a PyTorch pickle needs torch. "
                "Convert it once where torch is installed: python -c \"import torch, safetensors.torch as s; "
                f"s.save_file({{k: v.contiguous() for k, v in torch.load('{folder}/pytorch_model.bin', "
                f"map_location='cpu').items()}}, '{folder}/model.safetensors')\"")
        raise BertCheckpointError(f"BERT weights not found: {path}")
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        tensors = load_file(path)
    except (SafetensorError, OSError, ValueError) as e:
        raise BertCheckpointError(f"{path} is not a safetensors file: {e}") from None
    return {k: (v.astype(np.float32) if v.dtype.kind == "f" else v) for k, v in tensors.items()}


def hf_parameter_names(num_layers: int) -> dict[str, tuple[str, bool]]:
    """``HF tensor name (without the bert./roberta. prefix) -> (our parameter path, transposed)``: every tensor
    the encoder takes. HF Linear weights are ``(out, in)``, NNX kernels ``(in, out)``."""
    names = {
        "embeddings.word_embeddings.weight": ("word_embeddings/embedding", False),
        "embeddings.position_embeddings.weight": ("position_embeddings/embedding", False),
        "embeddings.token_type_embeddings.weight": ("token_type_embeddings/embedding", False),
        "embeddings.LayerNorm.weight": ("emb_norm/scale", False),
        "embeddings.LayerNorm.bias": ("emb_norm/bias", False),
    }
    per_layer = {
        "attention.self.query": "query", "attention.self.key": "key", "attention.self.value": "value",
        "attention.output.dense": "attn_out", "intermediate.dense": "intermediate", "output.dense": "output",
    }
    for i in range(num_layers):
        for hf, ours in per_layer.items():
            names[f"encoder.layer.{i}.{hf}.weight"] = (f"layers/{i}/{ours}/kernel", True)
            names[f"encoder.layer.{i}.{hf}.bias"] = (f"layers/{i}/{ours}/bias", False)
        for hf, ours in (("attention.output.LayerNorm", "attn_norm"), ("output.LayerNorm", "output_norm")):
            names[f"encoder.layer.{i}.{hf}.weight"] = (f"layers/{i}/{ours}/scale", False)
            names[f"encoder.layer.{i}.{hf}.bias"] = (f"layers/{i}/{ours}/bias", False)
    return names


@dataclasses.dataclass
class LoadReport:
    """What :func:`load_hf_checkpoint` did: ``loaded`` tensor names, ``ignored`` ones (not used by the encoder)."""

    folder: str
    prefix: str
    loaded: list[str]
    ignored: list[str]

    def summary(self) -> str:
        """One line: counts and the ignored tensors (grouped by their first two name parts)."""
        groups: dict[str, int] = {}
        for n in self.ignored:
            parts = n[len(self.prefix):].split(".") if n.startswith(self.prefix) else n.split(".")
            key = ".".join(parts[:3] if parts[:2] == ["encoder", "layer"] else parts[:2])
            groups[key] = groups.get(key, 0) + 1
        ign = ", ".join(f"{k} ({v})" for k, v in sorted(groups.items())) or "none"
        return f"BERT checkpoint {self.folder}: {len(self.loaded)} tensors loaded; ignored {len(self.ignored)}: {ign}"


def _rename_legacy(name: str) -> str:
    # Checkpoints converted from TF name LayerNorm parameters gamma / beta.
    return name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")


def load_hf_checkpoint(encoder: BertEncoder, folder: str) -> LoadReport:
    """Loads ``<folder>/model.safetensors`` into ``encoder`` in place (module doc).

    Args:
      encoder: built from the same folder's ``config.json`` (:func:`read_bert_settings`).
      folder: the checkpoint folder.

    Returns:
      The :class:`LoadReport` (its ``summary()`` is logged by the caller).

    Raises:
      BertCheckpointError: unreadable weights, a tensor the encoder needs that is missing, or a tensor whose shape
        differs from the encoder's parameter (names the tensor and both shapes).
    """
    tensors = {_rename_legacy(k): v for k, v in read_hf_tensors(folder).items()}
    prefix = next((p for p in ("bert.", "roberta.", "") if f"{p}embeddings.word_embeddings.weight" in tensors), None)
    if prefix is None:
        raise BertCheckpointError(f"{folder}/model.safetensors has no embeddings.word_embeddings.weight (with or "
                                  "without a bert. / roberta. prefix): not a BERT or RoBERTa checkpoint")
    names = hf_parameter_names(len(encoder.layers))
    def variable(path: str) -> nnx.Variable:
        obj = encoder
        for part in path.split("/"):
            obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
        return obj

    loaded = []
    for hf, (ours, transpose) in names.items():
        full = prefix + hf
        if full not in tensors:
            raise BertCheckpointError(f"{folder}/model.safetensors: tensor {full} is missing")
        value = tensors[full].T if transpose else tensors[full]
        var = variable(ours)
        target = tuple(var[...].shape)
        if tuple(value.shape) != target:
            want = target[::-1] if transpose else target
            raise BertCheckpointError(f"{folder}/model.safetensors: tensor {full} has shape "
                                      f"{tuple(tensors[full].shape)}, the encoder's {ours} needs {want}")
        var[...] = jnp.asarray(value, var[...].dtype)
        loaded.append(full)
    used = set(loaded)
    ignored = sorted(k for k in tensors if k not in used)
    return LoadReport(os.path.expanduser(folder), prefix, loaded, ignored)
