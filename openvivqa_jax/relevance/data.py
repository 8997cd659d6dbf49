"""The relevance task's data: (text, image) pairs of the splits of a built dataset, one per reference answer and
in the configured language, every image's visual feature (computed once and written to the workdir), the pairs
encoded for the model, and the run's setup (:func:`setup`).
"""

from __future__ import annotations

import collections
import os

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from flax import nnx
from PIL import Image

from openvivqa_jax import outputs
from openvivqa_jax import jsonio
from openvivqa_jax.data import images, pipeline
from openvivqa_jax.data.datasets import load_builder
from openvivqa_jax.errors import ConfigError
from openvivqa_jax.models import vit as vit_lib
from openvivqa_jax.models.layers import SmallCNN
from openvivqa_jax.relevance import FeatureFileError, RelevanceModelError
from openvivqa_jax.relevance.config import check_relevance_config
from openvivqa_jax.relevance.features import FEATURES_FILE, pool_grid, pool_regions, read_feature_file, standardize
from openvivqa_jax.relevance.model import MODEL_FILE, Vocabulary, words

__all__ = ["pair_text", "PairData", "encode_split", "setup"]


def _image_backbone(cfg):
    """``(fn (batch, H, W, 3) float [0, 1] -> (batch, H', W', d), name)`` of ``visual.source`` cnn / vit."""
    v = cfg.visual
    if v.source == "cnn":
        net = SmallCNN(tuple(v.cnn_channels), rngs=nnx.Rngs(cfg.seed), pixel_features=int(v.get("pixel_features", 0)))
    else:
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


def pair_text(pair_mode: str, question: str, answer: str) -> str:
    """The text of a pair: the answer, or the question then the answer."""
    return answer if pair_mode == "answer" else f"{question} {answer}"


class PairData:
    """Records, pairs and image features of the splits (built once)."""

    def __init__(self, cfg, workdir: str):
        self.cfg = cfg
        builder = load_builder(cfg.data)
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
                with outputs.atomic_write(feats_path, "wb") as f:  # a half file would be read next time
                    np.savez(f, **self.features)
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


def encode_split(data: PairData, vocab: Vocabulary, split: str, max_words: int, meta: dict):
    """``(ids (pairs, max_words), text_image (pairs,), visual (images, visual_dim), text_key (pairs,))`` of the
    pairs of ``split``: word ids, each text's image column, the images' standardized features, a hash per text."""
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


def _standardization(data: PairData, cfg) -> tuple[list[float] | None, list[float] | None]:
    """Per-dimension mean and standard deviation of the train images' features (``visual.standardize``), or
    ``(None, None)``. Region means and pooled grids are non-negative and alike from image to image (cosines near
    1), so their differences are what the ranking loss must see."""
    if not cfg.visual.get("standardize", True):
        return None, None
    ids = list(dict.fromkeys(r.image_id for r in data.records[cfg.data.train_split]))
    x = np.stack([data.features[i] for i in ids]).astype(np.float64)
    return x.mean(0).tolist(), np.maximum(x.std(0), 1e-6).tolist()


def setup(cfg, workdir: str):
    """``(workdir, data, vocab, meta)`` of a checked config: the run folder (absolute, created), the
    :class:`PairData`, and the vocabulary and description of the workdir's model (made from the train split and
    written to :data:`~openvivqa_jax.relevance.model.MODEL_FILE` when the workdir has none).

    Raises:
      ConfigError: see :func:`openvivqa_jax.relevance.config.check_relevance_config`.
      RelevanceModelError: the workdir holds a model of another language or other visual features.
    """
    check_relevance_config(cfg)
    workdir = os.path.abspath(os.path.expanduser(workdir))
    os.makedirs(workdir, exist_ok=True)
    data = PairData(cfg, workdir)
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
            outputs.write_json(meta_path, meta, indent=1)
    logging.info("relevance model %s: %d words, visual space %d (%s, pool %s), text %s", lang, vocab.size,
                 data.visual_dim, cfg.visual.source, tuple(cfg.visual.pool_grid), cfg.data.pair_text)
    return workdir, data, vocab, meta
