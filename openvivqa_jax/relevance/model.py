"""The relevance encoder: the words of a text, the vocabulary, the W2VV++ model of a description, and a trained
encoder loaded from its workdir (:func:`load_encoder`), which CLinRel and CMedRel
(:mod:`openvivqa_jax.evaluation.relevance`) and the task's own evaluation use.
"""

from __future__ import annotations

import collections
import os
import unicodedata

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax import nnx

from openvivqa_jax import jsonio
from openvivqa_jax.models.w2vvpp import PAD_ID, UNK_ID, W2VVPP
from openvivqa_jax.relevance import RelevanceModelError
from openvivqa_jax.relevance.features import FEATURES_FILE, read_feature_file, standardize
from openvivqa_jax.text.normalize import normalize_text

__all__ = ["MODEL_FILE", "words", "Vocabulary", "build", "RelevanceEncoder", "optimizer", "load_encoder"]

#: The encoder's description in a workdir.
MODEL_FILE = "relevance_model.json"


def _is_punct(ch: str) -> bool:
    return unicodedata.category(ch).startswith("P")


def words(text: str, language: str | None) -> list[str]:
    """The words of ``text``: normalized (:func:`normalize_text`: lowercase, spaced punctuation), then cut per
    character for Japanese (``language`` ``ja``) and on whitespace otherwise, punctuation (Unicode ``P*``)
    dropped. A trained encoder's vocabulary holds these words, so the rule stays as it was trained with."""
    text = normalize_text(str(text))
    if language == "ja":
        return [ch for ch in text if not ch.isspace() and not _is_punct(ch)]
    return [w for w in text.split() if not all(_is_punct(ch) for ch in w)]


class Vocabulary:
    """Word -> id (0 padding, 1 unknown, then the training words by frequency).

    Args:
      words: the vocabulary words in id order from 2.
    """

    def __init__(self, words_: list[str]):
        self.words = list(words_)
        self.index = {w: i + 2 for i, w in enumerate(self.words)}

    @property
    def size(self) -> int:
        """``V``, padding and unknown included."""
        return len(self.words) + 2

    @classmethod
    def build(cls, texts: list[list[str]], max_size: int, min_count: int) -> "Vocabulary":
        """The ``max_size - 2`` most frequent words seen at least ``min_count`` times (ties by first use)."""
        counts = collections.Counter(w for t in texts for w in t)
        kept = [w for w, c in counts.most_common() if c >= min_count][: max(0, max_size - 2)]
        return cls(kept)

    def encode(self, tokens: list[str], max_words: int) -> tuple[np.ndarray, bool]:
        """``(ids (max_words,) int32, cut)``: the ids of the first ``max_words`` words; ``cut``: words were cut."""
        ids = np.full((max_words,), PAD_ID, np.int32)
        for i, w in enumerate(tokens[:max_words]):
            ids[i] = self.index.get(w, UNK_ID)
        return ids, len(tokens) > max_words


def build(meta: dict, seed: int = 0) -> W2VVPP:
    """The W2VV++ encoder of a model description ``meta`` (:data:`MODEL_FILE`), initialized with ``seed``."""
    m = meta["model"]
    return W2VVPP(vocab_size=meta["vocab_size"], word_dim=m["word_dim"], gru_dim=m["gru_dim"],
                  mlp_dims=tuple(m["mlp_dims"]), visual_dim=meta["visual_dim"], dropout=m["dropout"],
                  rngs=nnx.Rngs(seed))


class RelevanceEncoder:
    """A trained W2VV++ encoder of one language, loaded from a workdir (:func:`load_encoder`).

    Attributes:
      workdir, language, pair_text (``answer`` / ``question_answer``), visual_dim, max_words, vocab, meta.
    """

    def __init__(self, workdir: str, meta: dict, params):
        self.workdir, self.meta = workdir, meta
        self.language = meta["language"]
        self.pair_text = meta["pair_text"]
        self.visual_dim = int(meta["visual_dim"])
        self.max_words = int(meta["model"]["max_words"])
        self.vocab = Vocabulary(meta["words"])
        graphdef, _ = nnx.split(nnx.eval_shape(lambda: build(meta)), nnx.Param)
        self._params = params
        self._fn = jax.jit(lambda p, ids: nnx.merge(graphdef, p)(ids))

    def encode(self, texts: list[str], batch_size: int = 256) -> np.ndarray:
        """``texts`` ``(n,)`` -> their projections ``(n, visual_dim)`` float32 (not normalized)."""
        ids = np.stack([self.vocab.encode(words(t, self.language), self.max_words)[0] for t in texts]) \
            if texts else np.zeros((0, self.max_words), np.int32)
        out = []
        for s in range(0, len(ids), batch_size):
            chunk = ids[s:s + batch_size]
            pad = batch_size - len(chunk)  # one compiled shape
            full = np.concatenate([chunk, np.zeros((pad, self.max_words), np.int32)]) if pad else chunk
            out.append(np.asarray(self._fn(self._params, jnp.asarray(full)))[: len(chunk)])
        return np.concatenate(out) if out else np.zeros((0, self.visual_dim), np.float32)

    def image_features(self) -> dict[str, np.ndarray] | None:
        """The image features written at training (``<workdir>/image_features.npz``, as stored), None if absent."""
        path = os.path.join(self.workdir, FEATURES_FILE)
        return read_feature_file(path, self.visual_dim) if os.path.exists(path) else None

    def visual(self, features: np.ndarray) -> np.ndarray:
        """Stored image features ``(n, visual_dim)`` -> the encoder's visual space (:func:`standardize`)."""
        return standardize(self.meta, features)


def optimizer(clip: float, lr: float) -> optax.GradientTransformation:
    """Adam on gradients clipped to global norm ``clip``."""
    return optax.chain(optax.clip_by_global_norm(clip), optax.adam(lr))


def _abstract_state(meta: dict):
    """The shapes of a train state ``{step, params, opt_state}`` of the model of ``meta``."""
    def make():
        params = nnx.state(build(meta), nnx.Param)
        return {"step": jnp.int32(0), "params": params, "opt_state": optimizer(1.0, 1e-3).init(params)}

    return jax.eval_shape(make)


def load_encoder(workdir: str) -> RelevanceEncoder:
    """Loads the best checkpoint (else the last) of the relevance model trained in ``workdir``.

    Raises:
      RelevanceModelError: ``workdir`` holds no relevance model or no checkpoint (one line naming it).
    """
    workdir = os.path.abspath(os.path.expanduser(str(workdir)))
    path = os.path.join(workdir, MODEL_FILE)
    if not os.path.exists(path):
        raise RelevanceModelError(f"relevance model {workdir} not found: no {MODEL_FILE} there (train one with "
                                  "python -m openvivqa_jax.main --config configs/relevance/w2vvpp.py --workdir ...)")
    meta = jsonio.read_json(path, what="relevance model file", error=RelevanceModelError, repeated_keys="error")
    abstract = _abstract_state(meta)
    for sub in ("best", "checkpoints"):
        folder = os.path.join(workdir, sub)
        if not os.path.isdir(folder):
            continue
        mgr = ocp.CheckpointManager(folder, item_names=("state",))
        step = mgr.best_step() if sub == "best" else mgr.latest_step()
        if step is None:
            continue
        try:
            state = mgr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract)))["state"]
        except (ValueError, KeyError) as e:
            raise RelevanceModelError(f"relevance model {workdir}: checkpoint {folder}/{step} does not fit its "
                                      f"{MODEL_FILE}: {' '.join(str(e).split())[:300]}") from None
        return RelevanceEncoder(workdir, meta, state["params"])
    raise RelevanceModelError(f"relevance model {workdir} has no checkpoint in best/ or checkpoints/")
