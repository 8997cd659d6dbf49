"""The ``relevance`` task: trains a W2VV++ sentence encoder (:mod:`openvivqa_jax.models.w2vvpp`) that projects
sentences of one language into a visual feature space, for CLinRel and CMedRel
(:mod:`openvivqa_jax.evaluation.relevance`, ``papers/cross_lingual_caption_eval.md``).

Run: ``python -m openvivqa_jax.main --config configs/relevance/w2vvpp.py --workdir runs/w2vvpp_vi``
(``--mode evaluate`` scores the best checkpoint again).

Data: (text, image feature) pairs from a built TFDS dataset (``config.data``). The text of a pair is an answer
(``data.pair_text = "answer"``) or the question and the answer (``"question_answer"``), one pair per reference
answer; only questions of ``data.language`` are used when the records carry a language (EVJVQA), so one
encoder is trained per language. Words are the language's EVJVQA tokens of the normalized text
(:func:`openvivqa_jax.evaluation.evjvqa.tokenize`: whitespace, Japanese per character).

Visual features (``config.visual.source``), fixed during training as in W2VV++:

* ``regions``: the image's region features (the synthetic ``*_regions`` builder configs, the OpenViVQA
  ``features`` variant), averaged per cell of ``visual.pool_grid`` (by box centre; ``(1, 1)``: the mean of the
  region features) and concatenated;
* ``cnn``: the project's ``SmallCNN`` (``models/layers.py``) over the image, its grid average-pooled to
  ``visual.pool_grid``; the CNN keeps its seeded initialization (random features: no trained backbone ships
  with the project);
* ``vit``: a ViT from a big_vision ``.npz`` (``visual.vit_checkpoint``, sizes as ``model.vision`` of the VQA
  configs: ``vit_variant``...), grid pooled the same way;
* ``file``: a user file of precomputed vectors keyed by image id (:func:`read_feature_file`).

The features of every image of every split are written to ``<workdir>/image_features.npz`` (keys: image ids),
which CMedRel reads when no other file is given.

Workdir: ``relevance_model.json`` (language, vocabulary, sizes), ``checkpoints/`` and ``best/`` (orbax, the best
by dev ``train.best_metric``, default ``rsum``, the sum of the recalls), ``metrics.jsonl`` and TensorBoard events
(clu), ``eval/<split>_retrieval.json``. Training resumes from the last checkpoint; a batch depends only on the
seed and the step, so a resumed run draws what the uninterrupted run would have. Ctrl-C / SIGTERM saves the
current step first (:mod:`openvivqa_jax.interrupts`).
"""

from __future__ import annotations

import collections
import json
import os
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp
from absl import logging
from flax import nnx

from openvivqa_jax import checkpoints, interrupts, jsonio
from openvivqa_jax.config_check import ConfigError
from openvivqa_jax.errors import UserError
from openvivqa_jax.evaluation.evjvqa import tokenize
from openvivqa_jax.models.w2vvpp import PAD_ID, UNK_ID, W2VVPP, cosine_matrix, recall_at_k, \
    vse_hardest_negative_loss
from openvivqa_jax.text.normalize import normalize_text
from openvivqa_jax.run_log import JsonlWriter, MeanAccumulator

__all__ = ["RelevanceModelError", "FeatureFileError", "PAIR_TEXTS", "VISUAL_SOURCES", "MODEL_FILE",
           "FEATURES_FILE", "Vocabulary", "RelevanceEncoder", "read_feature_file", "pool_regions", "pool_grid",
           "load_encoder", "train_and_evaluate", "evaluate"]

#: ``data.pair_text`` values.
PAIR_TEXTS = ("answer", "question_answer")
#: ``visual.source`` values.
VISUAL_SOURCES = ("regions", "cnn", "vit", "file")
#: The encoder's description in a workdir.
MODEL_FILE = "relevance_model.json"
#: Every image's visual feature, written at training.
FEATURES_FILE = "image_features.npz"


class RelevanceModelError(UserError, ValueError):
    """A relevance model that cannot be used: no model in the folder, another language than the data, a
    checkpoint that does not fit (one line naming the folder)."""


class FeatureFileError(UserError, ValueError):
    """An image-feature file that cannot be used: unreadable, not keyed by image id, the wrong width, or
    missing an image (one line naming the file)."""


# ------------------------------------------------------------------------------------------------- text
def words(text: str, language: str | None) -> list[str]:
    """The words of ``text``: normalized (:func:`normalize_text`), then EVJVQA's tokens of ``language``."""
    return tokenize(normalize_text(str(text)), language)


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


# --------------------------------------------------------------------------------------- visual features
def read_feature_file(path: str, width: int | None = None) -> dict[str, np.ndarray]:
    """Reads precomputed image vectors keyed by image id.

    Formats: ``.npz`` with one array ``(d,)`` per image id (the keys), or with two arrays ``ids`` ``(n,)`` and
    ``features`` ``(n, d)``; ``.npy`` ``(n, d)`` with the ids one per line in ``<path without .npy>.ids.txt``.

    Args:
      path: the file.
      width: the expected ``d`` (None: any, but all equal).

    Returns:
      image id -> ``(d,)`` float32.

    Raises:
      FeatureFileError: unreadable, another layout, vectors of several widths or of another width than ``width``
        (one line naming the file).
    """
    path = os.path.expanduser(str(path))
    try:
        if path.endswith(".npy"):
            mat = np.load(path, allow_pickle=False)
            ids_path = path[:-4] + ".ids.txt"
            with open(ids_path, encoding="utf-8") as f:
                ids = [ln.strip() for ln in f if ln.strip()]
            if mat.ndim != 2 or len(ids) != mat.shape[0]:
                raise FeatureFileError(f"image features file {path}: expected an (n, d) array with the n ids in "
                                       f"{ids_path}, got shape {mat.shape} and {len(ids)} ids")
            out = {i: np.asarray(v, np.float32) for i, v in zip(ids, mat)}
        else:
            with np.load(path, allow_pickle=False) as z:
                if set(z.files) == {"ids", "features"}:
                    out = {str(i): np.asarray(v, np.float32) for i, v in zip(z["ids"], z["features"])}
                else:
                    out = {k: np.asarray(z[k], np.float32) for k in z.files}
    except FeatureFileError:
        raise
    except (OSError, ValueError) as e:
        raise FeatureFileError(f"image features file {path} cannot be read: {' '.join(str(e).split())}") from None
    if not out:
        raise FeatureFileError(f"image features file {path} holds no vector")
    shapes = collections.Counter(v.shape for v in out.values())
    if len(shapes) > 1 or len(next(iter(shapes))) != 1:
        raise FeatureFileError(f"image features file {path}: every vector must be 1-D of one width, got shapes "
                               f"{dict(shapes)}")
    d = next(iter(shapes))[0]
    if width is not None and d != width:
        raise FeatureFileError(f"image features file {path} has vectors of width {d}, but the relevance model "
                               f"projects into a visual space of width {width}")
    return out


def pool_regions(features: np.ndarray, boxes: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
    """Region features ``(num_regions, d)`` with boxes ``(num_regions, 4)`` xyxy in [0, 1] -> ``(rows * cols *
    d,)``: the mean of the regions whose box centre lies in each cell (zeros for an empty cell), cells in
    row-major order. ``(1, 1)`` is the mean of all region features."""
    rows, cols = grid
    d = features.shape[1]
    out = np.zeros((rows, cols, d), np.float32)
    if len(features):
        cx = np.clip(((boxes[:, 0] + boxes[:, 2]) / 2 * cols).astype(int), 0, cols - 1)
        cy = np.clip(((boxes[:, 1] + boxes[:, 3]) / 2 * rows).astype(int), 0, rows - 1)
        for r in range(rows):
            for c in range(cols):
                sel = (cy == r) & (cx == c)
                if sel.any():
                    out[r, c] = features[sel].mean(0)
    return out.reshape(-1)


def pool_grid(grid: np.ndarray, cells: tuple[int, int]) -> np.ndarray:
    """Grid features ``(batch, H, W, d)`` -> ``(batch, rows * cols * d)``: the mean over each of ``rows x cols``
    nearly equal blocks (``np.array_split``), cells in row-major order."""
    rows, cols = cells
    out = []
    for band in np.array_split(np.asarray(grid, np.float32), rows, axis=1):
        for block in np.array_split(band, cols, axis=2):
            out.append(block.mean((1, 2)))
    return np.concatenate(out, -1)


def _image_backbone(cfg):
    """``(fn (batch, H, W, 3) float [0, 1] -> (batch, H', W', d), name)`` of ``visual.source`` cnn / vit."""
    v = cfg.visual
    if v.source == "cnn":
        from openvivqa_jax.models.layers import SmallCNN

        net = SmallCNN(tuple(v.cnn_channels), rngs=nnx.Rngs(cfg.seed), pixel_features=int(v.get("pixel_features", 0)))
    else:
        from openvivqa_jax.models import vit as vit_lib

        if not v.get("vit_checkpoint"):
            raise ConfigError("config value visual.vit_checkpoint is empty: visual.source='vit' needs a big_vision "
                              ".npz (set it with --config.visual.vit_checkpoint=...)")
        net = vit_lib.ViT(**vit_lib.vit_settings(v), rngs=nnx.Rngs(cfg.seed))
        vit_lib.load_big_vision_npz(net, v.vit_checkpoint)
    graphdef, state = nnx.split(net)
    fn = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x))
    return (lambda x: fn(state, x)), v.source


def _split_features(cfg, split_records: dict[str, list], image_bytes) -> dict[str, np.ndarray]:
    """image id -> visual feature ``(visual_dim,)`` for every image of ``split_records`` (module doc)."""
    v = cfg.visual
    grid = tuple(int(x) for x in v.pool_grid)
    out: dict[str, np.ndarray] = {}
    if v.source == "file":
        table = read_feature_file(v.features_file)
        for split, recs in split_records.items():
            for r in recs:
                if r.image_id not in table:
                    raise FeatureFileError(f"image features file {v.features_file} has no vector for image "
                                           f"{r.image_id!r} (question {r.question_id!r} of split {split!r})")
                out[r.image_id] = table[r.image_id]
        return out
    if v.source == "regions":
        for split, recs in split_records.items():
            for r in recs:
                if r.image_id in out:
                    continue
                if not r.objects or r.objects.get("features") is None:
                    raise FeatureFileError(f"split {split!r}: question {r.question_id!r} (image {r.image_id!r}) has "
                                           "no region features: visual.source='regions' needs a dataset built with "
                                           "them (e.g. synthetic_openvivqa/default_clean_regions)")
                out[r.image_id] = pool_regions(r.objects["features"], r.objects["boxes"], grid)
        return out
    from PIL import Image

    from openvivqa_jax.data import images

    fn, _ = _image_backbone(cfg)
    w, h = (int(x) for x in cfg.data.image_size)
    todo = {}
    for split, recs in split_records.items():
        for r in recs:
            todo.setdefault(r.image_id, (split, r.index))
    ids = list(todo)
    for start in range(0, len(ids), 64):
        chunk = ids[start:start + 64]
        pixels = []
        for iid in chunk:
            data = image_bytes(*todo[iid])
            rgb = images.decode_image(data, name=repr(iid)).pil.resize((w, h), Image.BILINEAR)
            pixels.append(np.asarray(rgb, np.float32) / 255.0)
        feats = pool_grid(np.asarray(fn(jnp.asarray(np.stack(pixels)))), grid)
        out.update(zip(chunk, feats))
    return out


# ------------------------------------------------------------------------------------------------- data
def _check(cfg) -> None:
    if cfg.data.pair_text not in PAIR_TEXTS:
        raise ConfigError(f"config value data.pair_text={cfg.data.pair_text!r} is out of range: must be one of "
                          f"{', '.join(map(repr, PAIR_TEXTS))} (set it with --config.data.pair_text=...)")
    if cfg.visual.source not in VISUAL_SOURCES:
        raise ConfigError(f"config value visual.source={cfg.visual.source!r} is out of range: must be one of "
                          f"{', '.join(map(repr, VISUAL_SOURCES))} (set it with --config.visual.source=...)")
    if cfg.visual.source == "file" and not cfg.visual.get("features_file"):
        raise ConfigError("config value visual.features_file is empty: visual.source='file' needs a file of "
                          "image vectors (set it with --config.visual.features_file=...)")
    g = tuple(cfg.visual.pool_grid)
    if len(g) != 2 or not all(isinstance(x, int) and x >= 1 for x in g):
        raise ConfigError(f"config value visual.pool_grid={g!r} is out of range: must be (rows, cols), two "
                          "integers >= 1 (set it with --config.visual.pool_grid=...)")


def pair_text(pair_mode: str, question: str, answer: str) -> str:
    """The text of a pair: the answer, or the question then the answer."""
    return answer if pair_mode == "answer" else f"{question} {answer}"


class _Data:
    """Records, pairs and image features of the splits (built once)."""

    def __init__(self, cfg, workdir: str):
        from openvivqa_jax.data import pipeline

        self.cfg = cfg
        builder = pipeline.load_builder(cfg.data)
        self.sources = {}
        self.records: dict[str, list] = {}
        lang = cfg.data.language
        skipped = collections.Counter()
        for split in (cfg.data.train_split, cfg.data.eval_split, cfg.data.test_split):
            src = pipeline.load_source(builder, split)
            recs = pipeline.read_records(src, f"{builder.name}/{split}", keep_objects=True)
            kept = [r for r in recs if r.extra.get("language", lang) == lang]
            skipped[split] = len(recs) - len(kept)
            self.sources[split], self.records[split] = src, kept
            if not kept:
                raise RelevanceModelError(f"split {split!r} of {builder.name} has no question in language "
                                          f"{lang!r} (set --config.data.language=...)")
        if sum(skipped.values()):
            logging.info("relevance data: questions of other languages than %r left out: %s", lang, dict(skipped))
        feats_path = os.path.join(workdir, FEATURES_FILE)
        if os.path.exists(feats_path):
            self.features = read_feature_file(feats_path)
        else:
            def image_bytes(split, index):
                return bytes(pipeline.decode_record(self.sources[split][index], index).image_bytes)

            self.features = _split_features(cfg, self.records, image_bytes)
            if jax.process_index() == 0:
                np.savez(feats_path, **self.features)
        self.visual_dim = int(next(iter(self.features.values())).shape[0])

    def pairs(self, split: str) -> tuple[list[str], list[str], list[str]]:
        """``(texts, image_ids, question_ids)``: one pair per reference answer."""
        texts, images, qids = [], [], []
        for r in self.records[split]:
            for a in dict.fromkeys(r.answers):  # repeated references are one pair
                texts.append(pair_text(self.cfg.data.pair_text, r.question, a))
                images.append(r.image_id)
                qids.append(r.question_id)
        return texts, images, qids


# ------------------------------------------------------------------------------------------------ model
def _build(meta: dict, seed: int = 0) -> W2VVPP:
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
        graphdef, _ = nnx.split(nnx.eval_shape(lambda: _build(meta)), nnx.Param)
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


def _optimizer(clip: float, lr: float) -> optax.GradientTransformation:
    """Adam on gradients clipped to global norm ``clip``."""
    return optax.chain(optax.clip_by_global_norm(clip), optax.adam(lr))


def _abstract_state(meta: dict):
    """The shapes of a train state ``{step, params, opt_state}`` of the model of ``meta``."""
    def make():
        params = nnx.state(_build(meta), nnx.Param)
        return {"step": jnp.int32(0), "params": params, "opt_state": _optimizer(1.0, 1e-3).init(params)}

    return jax.eval_shape(make)


def _managers(workdir: str, keep: int):
    return checkpoints.checkpoint_managers(workdir, keep=keep, latest_items=("state",))


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


# ----------------------------------------------------------------------------------------------- train
def _encode_split(data: _Data, vocab: Vocabulary, split: str, max_words: int, meta: dict):
    texts, images, qids = data.pairs(split)
    lang = data.cfg.data.language
    enc = [vocab.encode(words(t, lang), max_words) for t in texts]
    ids = np.stack([e[0] for e in enc])
    cut = sum(e[1] for e in enc)
    if cut:
        logging.info("relevance data %s: %d of %d texts cut at model.max_words=%d", split, cut, len(texts), max_words)
    image_list = list(dict.fromkeys(images))
    col = {iid: j for j, iid in enumerate(image_list)}
    text_image = np.asarray([col[i] for i in images], np.int64)
    visual = standardize(meta, np.stack([data.features[i] for i in image_list]))
    text_key = np.asarray([hash(t) for t in texts], np.int64)
    return ids, text_image, visual, text_key


def _retrieval(encode_fn, ids, text_image, visual, ks) -> dict[str, float]:
    proj = encode_fn(ids)
    sims = np.asarray(cosine_matrix(jnp.asarray(proj), jnp.asarray(visual)))
    return recall_at_k(sims, text_image, ks)


def _writer(workdir: str):
    from clu import metric_writers

    return metric_writers.create_default_writer(workdir, just_logging=jax.process_index() > 0)


def _jsonl(workdir: str, step: int, kind: str, values: dict) -> None:
    JsonlWriter(os.path.join(workdir, "metrics.jsonl")).write(step, kind, values)


def _standardization(data: "_Data", cfg) -> tuple[list[float] | None, list[float] | None]:
    """Per-dimension mean and standard deviation of the train images' features (``visual.standardize``), or
    ``(None, None)``. Region means and pooled grids are non-negative and alike from image to image (cosines near
    1), so their differences are what the ranking loss must see."""
    if not cfg.visual.get("standardize", True):
        return None, None
    ids = list(dict.fromkeys(r.image_id for r in data.records[cfg.data.train_split]))
    x = np.stack([data.features[i] for i in ids]).astype(np.float64)
    return x.mean(0).tolist(), np.maximum(x.std(0), 1e-6).tolist()


def standardize(meta: dict, features: np.ndarray) -> np.ndarray:
    """Visual features ``(..., visual_dim)`` as the encoder's space has them: ``(x - mean) / std`` with the
    train split's statistics stored in ``meta`` (unchanged when the model has none)."""
    x = np.asarray(features, np.float32)
    if meta.get("visual_mean") is None:
        return x
    return ((x - np.asarray(meta["visual_mean"], np.float32)) / np.asarray(meta["visual_std"], np.float32))


def _setup(cfg, workdir: str):
    _check(cfg)
    workdir = os.path.abspath(os.path.expanduser(workdir))
    os.makedirs(workdir, exist_ok=True)
    data = _Data(cfg, workdir)
    meta_path = os.path.join(workdir, MODEL_FILE)
    lang = cfg.data.language
    m = cfg.model
    if os.path.exists(meta_path):
        meta = jsonio.read_json(meta_path, what="relevance model file", error=RelevanceModelError,
                                repeated_keys="error")
        if meta["language"] != lang:
            raise RelevanceModelError(f"workdir {workdir} holds a relevance model of language {meta['language']!r}, "
                                      f"not data.language={lang!r}: use another --workdir")
        want = {"source": cfg.visual.source, "pool_grid": list(cfg.visual.pool_grid)}
        have = {k: meta["visual"].get(k) for k in want}
        if have != want:
            raise RelevanceModelError(f"workdir {workdir} holds a relevance model of visual features {have}, not "
                                      f"{want}: use another --workdir")
        vocab = Vocabulary(meta["words"])
    else:
        texts, _, _ = data.pairs(cfg.data.train_split)
        vocab = Vocabulary.build([words(t, lang) for t in texts], int(m.vocab_size), int(m.min_word_count))
        mean, std = _standardization(data, cfg)
        meta = {"language": lang, "pair_text": cfg.data.pair_text, "words": vocab.words, "vocab_size": vocab.size,
                "visual_dim": data.visual_dim, "visual_mean": mean, "visual_std": std,
                "visual": {"source": cfg.visual.source, "pool_grid": list(cfg.visual.pool_grid),
                           "dataset": f"{cfg.data.builder}/{cfg.data.builder_config}"},
                "model": {"word_dim": int(m.word_dim), "gru_dim": int(m.gru_dim), "mlp_dims": list(m.mlp_dims),
                          "dropout": float(m.dropout), "max_words": int(m.max_words)}}
        if jax.process_index() == 0:
            with open(meta_path, "w", encoding="utf-8") as f:
                json.dump(meta, f, ensure_ascii=False, indent=1)
    logging.info("relevance model %s: %d words, visual space %d (%s, pool %s), text %s", lang, vocab.size,
                 data.visual_dim, cfg.visual.source, tuple(cfg.visual.pool_grid), cfg.data.pair_text)
    return workdir, data, vocab, meta


def _encode_fn(graphdef, batch_size: int):
    fn = jax.jit(lambda p, ids: nnx.merge(graphdef, p)(ids))

    def run(params, ids: np.ndarray) -> np.ndarray:
        out = []
        for s in range(0, len(ids), batch_size):
            chunk = ids[s:s + batch_size]
            pad = batch_size - len(chunk)
            full = np.concatenate([chunk, np.zeros((pad, ids.shape[1]), np.int32)]) if pad else chunk
            out.append(np.asarray(fn(params, jnp.asarray(full)))[: len(chunk)])
        return np.concatenate(out)

    return run


def _final(cfg, workdir, data, vocab, meta, params_of_best, graphdef) -> dict:
    ks = tuple(int(k) for k in cfg.eval.ks)
    run = _encode_fn(graphdef, int(cfg.eval.batch_size))
    results = {}
    os.makedirs(os.path.join(workdir, "eval"), exist_ok=True)
    for split in (cfg.data.eval_split, cfg.data.test_split):
        ids, text_image, visual, _ = _encode_split(data, vocab, split, int(cfg.model.max_words), meta)
        r = _retrieval(lambda x: run(params_of_best, x), ids, text_image, visual, ks)
        r.update(num_texts=len(ids), num_images=len(visual))
        results[split] = r
        if jax.process_index() == 0:
            with open(os.path.join(workdir, "eval", f"{split}_retrieval.json"), "w", encoding="utf-8") as f:
                json.dump(r, f, indent=2)
    names = [f"t2i_R@{k}" for k in ks] + [f"i2t_R@{k}" for k in ks] + ["rsum"]
    lines = [f"{'':10s}" + "".join(f"{n:>10s}" for n in names) + f"{'texts':>8s}{'images':>8s}"]
    for split, r in results.items():
        lines.append(f"{split:10s}" + "".join(f"{r[n]:10.4f}" for n in names)
                     + f"{r['num_texts']:8d}{r['num_images']:8d}")
    table = "\n".join(lines)
    logging.info("retrieval (%s, best checkpoint):\n%s", meta["language"], table)
    print(f"Retrieval recall ({meta['language']}):\n{table}")
    return results


def train_and_evaluate(cfg: ml_collections.ConfigDict, workdir: str) -> dict:
    """Trains the encoder of ``cfg`` in ``workdir`` (resuming), evaluates dev retrieval every
    ``train.eval_every_steps``, then dev and test with the best checkpoint; returns ``{split: recalls}``.

    Raises:
      ConfigError: a ``data.pair_text``, ``visual.source`` or ``visual.pool_grid`` out of range, or a missing
        ``visual.features_file`` / ``visual.vit_checkpoint``.
      FeatureFileError, RelevanceModelError, DatasetError: unusable inputs (one line).
    """
    from clu import periodic_actions

    workdir, data, vocab, meta = _setup(cfg, workdir)
    t, mw = cfg.train, int(cfg.model.max_words)
    tr_ids, tr_img, tr_visual, tr_key = _encode_split(data, vocab, cfg.data.train_split, mw, meta)
    dev = _encode_split(data, vocab, cfg.data.eval_split, mw, meta)
    model = _build(meta, cfg.seed)
    graphdef, params = nnx.split(model, nnx.Param)
    tx = _optimizer(float(t.grad_clip_norm), float(t.learning_rate))
    state = {"step": jnp.int32(0), "params": params, "opt_state": tx.init(params)}
    latest, best = _managers(workdir, int(t.keep_checkpoints))
    state, start = _resume(latest, state)
    if jax.process_index() == 0:
        with open(os.path.join(workdir, "config.json"), "w", encoding="utf-8") as f:
            f.write(cfg.to_json_best_effort(indent=2))
    margin, seed, bsz = float(t.margin), int(cfg.seed), int(t.batch_size)
    batch_indices = _batch_sampler(len(tr_ids), bsz, seed)
    train_step = _make_train_step(graphdef, tx, margin, seed, int(t.get("sum_negatives_steps", 0)))
    run = _encode_fn(graphdef, int(cfg.eval.batch_size))
    ks = tuple(int(k) for k in cfg.eval.ks)
    writer = _writer(workdir)
    hooks = [periodic_actions.ReportProgress(num_train_steps=t.num_train_steps, writer=writer,
                                             every_steps=t.log_every_steps)] if jax.process_index() == 0 else []

    def save(step):
        latest.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state)))

    acc = MeanAccumulator()
    step = start
    with interrupts.StopSignals() as signals:
        for step in range(start + 1, int(t.num_train_steps) + 1):
            idx = batch_indices(step - 1)
            img = tr_img[idx]
            same = (img[:, None] == img[None, :]) | (tr_key[idx][:, None] == tr_key[idx][None, :])
            state, m = train_step(state, jnp.asarray(tr_ids[idx]), jnp.asarray(tr_visual[img]), jnp.asarray(same))
            for h in hooks:
                h(step)
            acc.add(m)
            if step % t.log_every_steps == 0 or step == t.num_train_steps:
                vals = acc.pop_means()
                writer.write_scalars(step, {f"train/{k}": v for k, v in vals.items()})
                _jsonl(workdir, step, "train", vals)
                logging.info("step %d/%d loss %.4f", step, t.num_train_steps, vals["loss"])
            if t.eval_every_steps and (step % t.eval_every_steps == 0 or step == t.num_train_steps):
                r = _eval_dev(workdir, writer, lambda x: run(state["params"], x), dev, ks, step)
                best.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state)),
                          metrics={"score": float(r[t.best_metric])})
            if step % t.checkpoint_every_steps == 0 or step == t.num_train_steps:
                save(step)
            if signals.requested:
                checkpoints.stop_with_checkpoint(signals.requested, step, save, latest, best, warn=False)
    if latest.latest_step() != step and step > start:
        save(step)
    latest.wait_until_finished()
    best.wait_until_finished()
    writer.flush()
    return _final(cfg, workdir, data, vocab, meta, _best_params(best, state), graphdef)


def _resume(latest: ocp.CheckpointManager, state: dict) -> tuple[dict, int]:
    """``(state, start_step)`` from the latest checkpoint of ``latest``; ``(state, 0)`` when there is none."""
    if latest.latest_step() is None:
        return state, 0
    step = latest.latest_step()
    restored = latest.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(jax.eval_shape(lambda: state))))
    start = int(step)
    logging.info("Resumed from step %d (%s)", start, latest.directory)
    return restored["state"], start


def _batch_sampler(n_pairs: int, bsz: int, seed: int):
    """``step -> indices (bsz,)`` of the train pairs of 0-based ``step``: a permutation of the pairs per epoch,
    drawn from ``(seed, epoch)`` alone, so a resumed run draws what the uninterrupted run would have.

    Raises:
      ConfigError: ``train.batch_size`` larger than the train split's pairs.
    """
    if bsz > n_pairs:
        raise ConfigError(f"config value train.batch_size={bsz} is out of range: the train split has only "
                          f"{n_pairs} pairs (set it with --config.train.batch_size=...)")
    per_epoch = n_pairs // bsz

    def batch_indices(step: int) -> np.ndarray:
        epoch, pos = divmod(step, per_epoch)
        perm = np.random.default_rng([seed, epoch]).permutation(n_pairs)
        return perm[pos * bsz:(pos + 1) * bsz]

    return batch_indices


def _make_train_step(graphdef, tx: optax.GradientTransformation, margin: float, seed: int, warm: int):
    """The jitted step ``(state, ids (batch, words), visual (batch, visual_dim), same (batch, batch)) ->
    (state, {loss, grad_norm})``: the ranking loss over all negatives before step ``warm``, the hardest after;
    dropout keys ``fold_in(key(seed), step)``."""

    def loss_fn(p, ids, visual, same, key, hardest):
        out = nnx.merge(graphdef, p)(ids, deterministic=False, rngs=nnx.Rngs(dropout=key))
        return vse_hardest_negative_loss(out, visual, margin, same, hardest=hardest)

    @jax.jit
    def train_step(state, ids, visual, same):
        key = jax.random.fold_in(jax.random.key(seed), state["step"])
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], ids, visual, same, key, state["step"] >= warm)
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        return {"step": state["step"] + 1, "params": optax.apply_updates(state["params"], updates),
                "opt_state": opt_state}, {"loss": loss, "grad_norm": optax.tree.norm(grads)}

    return train_step


def _eval_dev(workdir: str, writer, encode_fn, dev, ks: tuple[int, ...], step: int) -> dict[str, float]:
    """Dev retrieval recalls of ``encode_fn`` (``dev``: :func:`_encode_split`'s tuple), written to TensorBoard,
    ``metrics.jsonl`` and one log line."""
    r = _retrieval(encode_fn, dev[0], dev[1], dev[2], ks)
    writer.write_scalars(step, {f"dev/{k}": v for k, v in r.items()})
    _jsonl(workdir, step, "eval", {f"dev/{k}": v for k, v in r.items()})
    logging.info("step %d dev: %s", step, {k: round(v, 4) for k, v in r.items()})
    return r


def _best_params(best: ocp.CheckpointManager, state: dict):
    """The parameters of the best checkpoint in ``best``, else ``state``'s."""
    params = state["params"]
    if best.best_step() is not None:
        params = best.restore(best.best_step(), args=ocp.args.Composite(
            state=ocp.args.StandardRestore(jax.eval_shape(lambda: state))))["state"]["params"]
    return params


def evaluate(cfg: ml_collections.ConfigDict, workdir: str) -> dict:
    """Scores dev and test retrieval with the best checkpoint of ``workdir`` (``--mode evaluate``).

    Raises:
      RelevanceModelError: no trained model in ``workdir``.
    """
    workdir = os.path.abspath(os.path.expanduser(workdir))
    if not os.path.exists(os.path.join(workdir, MODEL_FILE)):
        raise RelevanceModelError(f"relevance model {workdir} not found: no {MODEL_FILE} there")
    workdir, data, vocab, meta = _setup(cfg, workdir)
    enc = load_encoder(workdir)
    graphdef, _ = nnx.split(nnx.eval_shape(lambda: _build(meta)), nnx.Param)
    return _final(cfg, workdir, data, vocab, meta, enc._params, graphdef)

