"""Input pipeline: TFDS data source -> grain -> fixed-shape numpy batches with masks -> global arrays.

* Data sources come from ``builder.as_data_source`` over ``array_record`` files (no TensorFlow at read
  time), their examples are decoded into records (:mod:`openvivqa_jax.data.records`); images are left encoded
  and decoded here with PIL (cached per ``image_id``).
* Training order is a seeded grain shuffle repeated over epochs; the iterator state is a small JSON
  value saved with every checkpoint, so a restarted run neither repeats nor skips data.
* Each process reads only its rows of every global batch (``_ProcessShare``); global batches are made
  with ``jax.make_array_from_process_local_data``.
* Evaluation pads the last partial batch with ``valid = False`` rows, so every example is scored once.

Batch layout (fixed shapes; ``N = num_ocr``, ``P = max_ocr_pieces``, ``L = max_answer_len``):

==================  ==========================  ======================================
key                 shape                       meaning
==================  ==========================  ======================================
image               (B, H, W, 3) uint8          resized pixels (vision kind ``cnn``)
region_features     (B, R, D) float32           pre-extracted (vision kind ``region``), or the picture's
                                                class-free proposals (kind ``proposals``,
                                                :mod:`openvivqa_jax.data.proposals`)
region_boxes/mask   (B, R, 4) / (B, R)
question            (B, Lq) int32               pieces; ``question_mask`` (B, Lq) bool
question_bert       (B, Lq) int32               ids of ``model.text_encoder``'s tokenizer;
                                                ``question_bert_mask`` (B, Lq) bool
ocr_pieces          (B, N, P) int32             pieces per OCR token; ``ocr_piece_mask``
ocr_phoc            (B, N, phoc_dim) float32    PHOC (:mod:`openvivqa_jax.data.phoc`)
ocr_boxes           (B, N, 4) float32           xyxy in [0, 1]
ocr_mask            (B, N) bool                 real OCR tokens
ocr_fasttext        (B, N, 300) float32         fastText vectors (``ocr_extra_features``)
ocr_pixels          (B, N, 48) float32          each token box's pixels on a 4x4 grid (``ocr_extra_features``;
                                                :func:`openvivqa_jax.data.proposals.box_pixels`)
decoder_in          (B, L) int32                teacher-forced inputs
target_vocab        (B, L) int32                positive piece or -1
target_ocr          (B, L, N) bool              positive OCR slots
target_mask         (B, L) bool
index               (B,) int32                  example index within the split
valid               (B,) bool                   False for eval padding rows
allowed_vocab       (B, V + N) bool             eval batches only, ``data.decode_dictionary``
                                                not ``'none'``: extended ids decoding may emit
==================  ==========================  ======================================

Constrained decoding (ST-VQA, Biten et al. 2019 §3: task 1 per-image 100-word dictionaries, task 2
a global 30k-word dictionary): ``data.decode_dictionary`` is ``'none'``, ``'per_image'`` (the
example's ``dictionary`` feature) or ``'global'`` (the file ``data.global_dictionary_file`` if set,
else the example's ``dictionary`` feature, which the ST-VQA builder fills with the global
dictionary for task 2). ``allowed_vocab`` allows the SentencePiece pieces of every dictionary
entry, EOS, and each OCR slot whose token is a dictionary entry or consists of dictionary words.
This constrains pieces, not whole words (:mod:`openvivqa_jax.vqa.decoding`). An example without a
dictionary is decoded unconstrained and counted (``decode_dictionary_missing``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Sequence

import grain
import jax
import numpy as np
from absl import logging
from PIL import Image

from openvivqa_jax.data import images
from openvivqa_jax.data.phoc import get_phoc_spec, phoc_batch
from openvivqa_jax.data.proposals import BOX_PIXELS_DIM, PROPOSAL_FEATURE_DIM, box_pixels, padded_proposals
from openvivqa_jax.data.records import (DatasetError, Record, SkipCounter, as_str, decode_record, kind_subset,
                                        kind_weighted_indices, load_source, read_dictionary_file, read_records)
from openvivqa_jax.models.counting import counter_weight
from openvivqa_jax.models.pretrained import FASTTEXT_HINT, fasttext_path
from openvivqa_jax.models.verifying import POLARITY_FIELD, verifier_enabled
from openvivqa_jax.text.answer_vocab import AnswerVocab
from openvivqa_jax.text.checkpoint_tokenizer import question_tokenizer
from openvivqa_jax.text.counts import answer_count
from openvivqa_jax.text.polarity import polarity
from openvivqa_jax.text.tokenizer import Tokenizer
from openvivqa_jax.text.word_vectors import WordVectorsError, open_word_vectors

__all__ = [
    "DatasetError",
    "Record",
    "SkipCounter",
    "load_source",
    "decode_record",
    "read_dictionary_file",
    "read_records",
    "kind_subset",
    "kind_weighted_indices",
    "Preprocessor",
    "train_iterator",
    "eval_batches",
    "to_global",
]


def ocr_fasttext_source(cfg):
    """The :class:`~openvivqa_jax.text.word_vectors.WordVectors` for ``ocr_fasttext`` features, when
    ``model.ocr_extra_features`` names them; None otherwise.

    Without ``model.fasttext.path`` the features are zero, said in one warning line.

    Raises:
      openvivqa_jax.text.word_vectors.WordVectorsError: a missing or bad file, or one whose width is not the
        configured ``ocr_fasttext`` width.
    """
    extra = dict(cfg.model.get("ocr_extra_features", {}) or {})
    if "ocr_fasttext" not in extra:
        return None
    path = fasttext_path(cfg.model)
    if not path:
        logging.warning("model.ocr_extra_features names ocr_fasttext but model.fasttext.path is not set: the OCR "
                        "tokens' fastText features are zero (the paper uses %s)", FASTTEXT_HINT)
        return _ZeroVectors(int(extra["ocr_fasttext"]))
    wv = open_word_vectors(path)
    if wv.dim != int(extra["ocr_fasttext"]):
        raise WordVectorsError(f"{path} has {wv.dim}-d vectors but model.ocr_extra_features.ocr_fasttext is "
                               f"{extra['ocr_fasttext']}")
    return wv


class _ZeroVectors:
    def __init__(self, dim: int):
        self.dim = dim

    def token_vectors(self, tokens, num_slots):
        return np.zeros((num_slots, self.dim), np.float32)


def ocr_fasttext_features(vectors, texts: Sequence[str], num_ocr: int) -> np.ndarray:
    """OCR tokens' fastText features (MLPAG §4.3's scene-text embedding): ``(num_ocr, dim)`` float32, one row per
    token in slot order (:meth:`~openvivqa_jax.text.word_vectors.WordVectors.token_vectors`: n-gram vectors for
    out-of-vocabulary tokens with a ``.bin``), zero rows for padding slots."""
    return vectors.token_vectors(list(texts), num_ocr)


class Preprocessor:
    """Record -> fixed-shape numpy features (see the module table).

    Args:
      cfg: the full config (reads ``data.*`` and ``model.*``).
      tokenizer: the SentencePiece tokenizer.
      mask_ocr: drop every OCR token (the no-OCR ablation).
      counter: a :class:`SkipCounter` for truncations.
      allow_copy: answers may copy OCR tokens (models with a pointer network).
      answer_list: for classifiers, the :class:`~openvivqa_jax.text.answer_list.AnswerList`; adds
        ``answer_scores`` ``(K + num_ocr_classes,)`` soft scores over all references.
      num_ocr_classes: OCR classes of the classifier (LoRRA: ``num_ocr``; others 0).

    Reads ``data.decode_dictionary`` (``'none'`` default, ``'per_image'``, ``'global'``) and
    ``data.global_dictionary_file`` (module doc); ``features(..., for_decoding=True)`` then adds
    ``allowed_vocab`` ``(V + N,)`` bool.

    Raises:
      ValueError: an unknown ``decode_dictionary``, or one other than ``'none'`` for a classifier.
      DatasetError: an unreadable or malformed global dictionary file (names the file).
    """

    def __init__(self, cfg, tokenizer: Tokenizer, mask_ocr: bool = False, counter: SkipCounter | None = None,
                 allow_copy: bool = True, answer_list=None, num_ocr_classes: int = 0):
        m = cfg.model
        self.cfg = cfg
        self.tok = tokenizer
        self.num_ocr = m.num_ocr
        self.max_pieces = cfg.data.max_ocr_pieces
        self.q_len = m.max_question_len
        self.vision_kind = m.vision.kind
        self.image_w, self.image_h = tuple(cfg.data.image_size)
        self.num_regions = m.vision.get("num_regions", 0)
        self.region_dim = m.vision.get("region_dim", 0)
        if self.vision_kind == "proposals":
            self.region_dim = PROPOSAL_FEATURE_DIM
            self.proposal_min_size = int(m.vision.get("proposal_min_size", 8))
            self.proposal_scale = float(m.vision.get("proposal_scale", 400.0))
        self.phoc_alphabet = m.get("phoc_alphabet", "vietnamese")
        self.phoc_dim = get_phoc_spec(self.phoc_alphabet).dim
        self.vocab = AnswerVocab(tokenizer, m.num_ocr, m.max_answer_len, allow_copy=allow_copy)
        self.answer_list = answer_list
        self.num_ocr_classes = num_ocr_classes
        self.mask_ocr = mask_ocr
        self.counter = counter or SkipCounter()
        #: Largest stored image accepted (width * height), as the builders and predict check it.
        self.max_image_pixels = int(cfg.data.get("max_image_pixels", images.DEFAULT_MAX_PIXELS))
        self._image = functools.lru_cache(maxsize=cfg.data.get("image_cache_size", 8192))(self._decode_image)
        self._proposals = functools.lru_cache(maxsize=cfg.data.get("image_cache_size", 8192))(
            self._proposals_uncached)
        self.decode_dictionary = cfg.data.get("decode_dictionary", "none") or "none"
        if self.decode_dictionary not in ("none", "per_image", "global"):
            raise ValueError(f"data.decode_dictionary must be 'none', 'per_image' or 'global', "
                             f"got {self.decode_dictionary!r}")
        if self.decode_dictionary != "none" and answer_list is not None:
            raise ValueError(f"data.decode_dictionary={self.decode_dictionary!r} constrains the decoding of "
                             f"generator models; model {m.name!r} is a classifier")
        self._dictionary_mask = functools.lru_cache(maxsize=256)(self._dictionary_mask_uncached)
        self._ocr_fasttext = ocr_fasttext_source(cfg)
        self.ocr_pixels = "ocr_pixels" in dict(m.get("ocr_extra_features", {}) or {})
        if self.ocr_pixels and int(m.ocr_extra_features.ocr_pixels) != BOX_PIXELS_DIM:
            raise ValueError(f"model.ocr_extra_features.ocr_pixels must be {BOX_PIXELS_DIM} (RGB on a 4x4 grid), "
                             f"got {m.ocr_extra_features.ocr_pixels}")
        self._question_bert = question_tokenizer(m)
        #: The count-question targets of the glimpses' count loss and of the region counter (``count_target``,
        #: :func:`answer_count`).
        glimpses = m.get("visual_glimpses") or {}
        self.count_targets = bool((float(glimpses.get("count_loss", 0.0) or 0.0) > 0
                                   and int(glimpses.get("num", 0) or 0) > 0) or counter_weight(m) > 0)
        #: Each question's polarity from the negation rules, for the region verifier (``question_polarity``).
        self.question_polarity = verifier_enabled(m)
        self._global_words = None
        path = cfg.data.get("global_dictionary_file")
        if self.decode_dictionary == "global" and path:
            self._global_words = read_dictionary_file(os.path.expanduser(path))
            logging.info("Global decoding dictionary %s: %d entries", path, len(self._global_words))

    def _dictionary_mask_uncached(self, words: tuple) -> tuple[np.ndarray, frozenset, frozenset]:
        """``words`` (normalized entries) -> (piece mask ``(V,)`` bool with EOS, entries, entry words)."""
        mask = np.zeros((self.vocab.vocab_size,), bool)
        for w in words:
            mask[list(self.tok.encode(w))] = True
        mask[self.tok.eos_id] = True
        mask[[self.tok.pad_id, self.tok.unk_id, self.tok.bos_id]] = False
        return mask, frozenset(words), frozenset(x for w in words for x in w.split())

    def allowed_vocab(self, rec: Record, texts: Sequence[str]) -> np.ndarray:
        """The extended ids decoding may emit for ``rec``: ``(V + N,)`` bool (module doc).

        Args:
          rec: the record (its ``extra["dictionary"]`` for ``per_image``, and ``global`` without a file).
          texts: the OCR token texts in slot order (after masking/truncation), ``(n <= N,)``.
        """
        V, N = self.vocab.vocab_size, self.num_ocr
        if self._global_words is not None:
            words = self._global_words
        else:
            raw = rec.extra.get("dictionary")
            # Builders store normalized words; bytes are decoded, not normalized again (30k per example
            # for ST-VQA task 2), and the mask is cached per distinct dictionary.
            words = tuple(w for w in (as_str(x).strip() for x in (raw if raw is not None else [])) if w)
        if not words:
            self.counter.add("decode_dictionary_missing")
            return np.ones((V + N,), bool)
        piece_mask, entries, entry_words = self._dictionary_mask(words)
        out = np.zeros((V + N,), bool)
        out[:V] = piece_mask
        for j, t in enumerate(texts[:N]):
            out[V + j] = t in entries or all(x in entry_words for x in t.split())
        return out

    def _decode_image(self, image_id: str, data: bytes) -> np.ndarray:
        """Encoded bytes -> ``(image_h, image_w, 3)`` uint8: :func:`openvivqa_jax.data.images.decode_image`
        (the decoder of the builders and predict: EXIF orientation, alpha onto white, 16-bit by range),
        then a bilinear resize.

        Raises:
          DatasetError: (one line, naming the image) the bytes are not a usable image.
        """
        try:
            rgb = images.decode_image(data, name=repr(image_id), max_pixels=self.max_image_pixels).pil
        except images.ImageDecodeError as e:
            raise DatasetError(str(e)) from None
        return np.asarray(rgb.resize((self.image_w, self.image_h), Image.BILINEAR), np.uint8)

    def _proposals_uncached(self, image_id: str, data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Encoded bytes -> the class-free region proposals of the picture resized to ``data.image_size``
        (:func:`openvivqa_jax.data.proposals.region_proposals`): ``region_features (num_regions,
        PROPOSAL_FEATURE_DIM)``, ``region_boxes (num_regions, 4)``, ``region_mask (num_regions,)``, zero-padded;
        segments beyond ``num_regions`` (the smallest) are counted as ``proposal_segments_beyond_num_regions``.

        Raises:
          DatasetError: (one line, naming the image) the bytes are not a usable image.
        """
        try:
            feats, boxes, mask, n = padded_proposals(data, repr(image_id), **self.proposal_settings())
        except images.ImageDecodeError as e:
            raise DatasetError(str(e)) from None
        if n > self.num_regions:
            self.counter.add("proposal_segments_beyond_num_regions", n - self.num_regions)
        return feats, boxes, mask

    def _ocr_pixels(self, rec: Record, boxes: np.ndarray) -> np.ndarray:
        """``ocr_pixels`` ``(num_ocr, BOX_PIXELS_DIM)``: the pixels under each OCR token's box, from the picture
        as the CNN gets it (:meth:`_decode_image`), zero-padded.

        Raises:
          DatasetError: the record has no picture, or its picture is not usable (one line, naming both).
        """
        out = np.zeros((self.num_ocr, BOX_PIXELS_DIM), np.float32)
        if not len(boxes):
            return out
        if rec.image_bytes is None:
            raise DatasetError(f"question {rec.question_id!r}: no image for model.ocr_extra_features.ocr_pixels")
        try:
            out[: len(boxes)] = box_pixels(self._image(rec.image_id, bytes(rec.image_bytes)), boxes)
        except DatasetError as e:
            raise DatasetError(f"question {rec.question_id!r}: {e}") from None
        return out

    def proposal_settings(self) -> dict:
        """The keyword arguments of :func:`openvivqa_jax.data.proposals.padded_proposals` but the picture."""
        return dict(width=self.image_w, height=self.image_h, max_pixels=self.max_image_pixels,
                    num_regions=self.num_regions, min_size=self.proposal_min_size, scale=self.proposal_scale)

    def _question_extras(self, rec: Record, out: dict) -> None:
        """Adds the optional question fields to ``out``: the pretrained text encoder's own ids
        (``question_bert``, ``question_bert_mask``; models/bert.py) and ``count_target`` (the glimpses' count
        loss: the count the first reference answer gives, 0 for none) and ``question_polarity`` (the region
        verifier's: +1, or -1 for a question negated by :func:`openvivqa_jax.text.polarity.polarity`, with the
        record's ``language`` field where the dataset has one)."""
        if self._question_bert is not None:
            out["question_bert"], out["question_bert_mask"], cut = self._question_bert.encode_padded(rec.question,
                                                                                                     self.q_len)
            if cut:
                self.counter.add("question_bert_truncated")
        if self.count_targets:
            out["count_target"] = np.int32((rec.answers and answer_count(rec.question, rec.answers[0])) or 0)
        if self.question_polarity:
            # The dataset's language field, where it has one, picks the negation rules; else they are detected.
            lang = str((getattr(rec, "extra", None) or {}).get("language") or "").strip().lower() or None
            out[POLARITY_FIELD] = np.float32(polarity(rec.question, lang))

    def features(self, rec: Record, answer: str | None, for_decoding: bool = False) -> dict:
        """Fixed-shape features of one record; ``answer`` (normalized) gives the targets; with
        ``for_decoding`` and ``data.decode_dictionary`` set, also ``allowed_vocab`` ``(V + N,)`` bool."""
        N, P = self.num_ocr, self.max_pieces
        out: dict[str, np.ndarray] = {}
        if self.vision_kind in ("cnn", "vit", "proposals"):
            if rec.image_bytes is None:
                raise DatasetError(f"question {rec.question_id!r}: no image for vision kind {self.vision_kind!r}")
            try:
                if self.vision_kind == "proposals":
                    feats, boxes, mask = self._proposals(rec.image_id, bytes(rec.image_bytes))
                    out.update(region_features=feats, region_boxes=boxes, region_mask=mask)
                else:
                    out["image"] = self._image(rec.image_id, bytes(rec.image_bytes))
            except DatasetError as e:
                raise DatasetError(f"question {rec.question_id!r}: {e}") from None
        else:
            R, D = self.num_regions, self.region_dim
            feats = np.zeros((R, D), np.float32)
            boxes = np.zeros((R, 4), np.float32)
            mask = np.zeros((R,), bool)
            if rec.objects is not None:
                if len(rec.objects["features"]) > R:  # counted (logged with the other counters), not silent
                    self.counter.add("regions_beyond_num_regions", len(rec.objects["features"]) - R)
                f = rec.objects["features"][:R]
                if f.shape[1] != D:
                    raise DatasetError(f"question {rec.question_id!r}: region features have dim {f.shape[1]}, "
                                       f"config model.vision.region_dim is {D}")
                feats[: len(f)] = f
                boxes[: len(f)] = rec.objects["boxes"][:R]
                mask[: len(f)] = True
            out.update(region_features=feats, region_boxes=boxes, region_mask=mask)
        q = list(self.tok.encode(rec.question))
        self.counter.add("questions_encoded")
        if len(q) > self.q_len:
            self.counter.add("question_truncated")
            q = q[: self.q_len]
        out["question"] = np.zeros((self.q_len,), np.int32)
        out["question"][: len(q)] = q
        out["question_mask"] = np.arange(self.q_len) < len(q)
        self._question_extras(rec, out)
        texts = [] if self.mask_ocr else rec.ocr_texts
        if len(texts) > N:
            self.counter.add("ocr_tokens_truncated", len(texts) - N)
        texts = texts[:N]
        n = len(texts)
        pieces = np.zeros((N, P), np.int32)
        pmask = np.zeros((N, P), bool)
        for i, t in enumerate(texts):
            ids = self.tok.encode(t)[:P]
            pieces[i, : len(ids)] = ids
            pmask[i, : len(ids)] = True
        boxes = np.zeros((N, 4), np.float32)
        if n:
            boxes[:n] = np.clip(rec.ocr_boxes[:n], 0.0, 1.0)
        out.update(ocr_pieces=pieces, ocr_piece_mask=pmask, ocr_phoc=phoc_batch(texts, N, self.phoc_alphabet),
                   ocr_boxes=boxes, ocr_mask=np.arange(N) < n)
        if self._ocr_fasttext is not None:
            out["ocr_fasttext"] = ocr_fasttext_features(self._ocr_fasttext, texts, N)
        if self.ocr_pixels:
            out["ocr_pixels"] = self._ocr_pixels(rec, boxes[:n])
        enc = self.vocab.encode(answer or "", texts)
        if answer is not None:
            self.counter.add("answers_encoded")
        if answer is not None and enc.truncated:
            self.counter.add("answer_truncated")
        out.update(decoder_in=enc.decoder_in, target_vocab=enc.target_vocab, target_ocr=enc.target_ocr,
                   target_mask=enc.target_mask if answer is not None else np.zeros_like(enc.target_mask))
        if self.answer_list is not None:
            out["answer_scores"] = self.answer_list.scores(rec.answers, texts, self.num_ocr_classes).astype(np.float32)
        if for_decoding and self.decode_dictionary != "none":
            out["allowed_vocab"] = self.allowed_vocab(rec, texts)
        out["index"] = np.int32(rec.index)
        out["valid"] = np.bool_(True)
        return out


class _TrainMap(grain.transforms.RandomMap):
    def __init__(self, pre: Preprocessor, source_name: str):
        self.pre = pre
        self.source_name = source_name

    def random_map(self, element, rng: np.random.Generator):
        ex, index = element
        rec = decode_record(ex, index, self.source_name, self.pre.counter)
        if not rec.answers:
            raise DatasetError(f"{self.source_name}: question {rec.question_id!r} has no answer in a training split")
        answer = rec.answers[int(rng.integers(len(rec.answers)))] if len(rec.answers) > 1 else rec.answers[0]
        return self.pre.features(rec, answer)


class _IndexedSource:
    """Wraps a data source so items carry their index in it: ``(example, index)``; with ``indices``, only
    those examples, in that order (item ``i`` is example ``indices[i]``)."""

    def __init__(self, source, indices: Sequence[int] | None = None):
        self.source = source
        self.indices = None if indices is None else np.asarray(indices, np.int64)

    def __len__(self):
        return len(self.source) if self.indices is None else len(self.indices)

    def __getitem__(self, i):
        j = int(i) if self.indices is None else int(self.indices[int(i)])
        return self.source[j], j


class _ProcessShare:
    """This process's rows of the global batches of a (lazy, random-access) dataset ``ds``.

    Local element ``k`` is global position ``(k // b) * (b * pc) + pi * b + k % b`` of ``ds`` (``b``
    the per-process batch, ``pi``/``pc`` the process index/count), so global batch ``g`` is positions
    ``[g * b * pc, (g + 1) * b * pc)`` of ``ds`` in process order, which is the row order
    ``jax.make_array_from_process_local_data`` assembles on a mesh whose devices are in process order.
    """

    def __init__(self, ds, batch_size: int, process_index: int, process_count: int):
        self.ds, self.b, self.pi, self.pc = ds, int(batch_size), int(process_index), int(process_count)

    def __len__(self):
        return (len(self.ds) // (self.b * self.pc)) * self.b

    def __getitem__(self, k):
        k = int(k)
        return self.ds[(k // self.b) * self.b * self.pc + self.pi * self.b + k % self.b]


def train_iterator(source, pre: Preprocessor, *, batch_size: int, seed: int, source_name: str = "",
                   num_threads: int = 2, prefetch: int = 8, indices: Sequence[int] | None = None):
    """An infinite, checkpointable iterator of local training batches.

    Shuffles the whole split with ``seed`` (a new permutation every epoch; the same on every
    process), draws one reference answer per visit (the RNG keyed by the global position), and cuts
    the stream into global batches of ``batch_size * process_count`` examples; this process reads and
    preprocesses only its rows ``[process_index * batch_size, (process_index + 1) * batch_size)`` of
    each global batch (:class:`_ProcessShare`). The global batches are therefore the same whatever the
    number of processes: 2 processes x 4 devices train on exactly the batches of 1 process x 8.

    Args:
      source: random-access data source.
      pre: the :class:`Preprocessor`.
      batch_size: per-process batch size (the global batch divided by ``jax.process_count()``).
      seed: shuffle seed.
      indices: train on these examples of ``source`` only (e.g. :func:`kind_subset`); None: all.

    Returns:
      A grain ``DatasetIterator`` with ``get_state()``/``set_state()``.

    Raises:
      DatasetError: if the split is smaller than one batch.
    """
    indexed = _IndexedSource(source, indices)
    if len(indexed) < batch_size * jax.process_count():
        raise DatasetError(f"{source_name}: {len(indexed)} examples is fewer than one global batch "
                           f"({batch_size} x {jax.process_count()} processes); lower --config.train.batch_size "
                           f"(at most {len(indexed)}) or train on a larger split")
    ds = grain.MapDataset.source(indexed)
    ds = ds.seed(seed).shuffle().repeat()
    ds = ds.random_map(_TrainMap(pre, source_name))  # lazy: only the rows this process asks for are read
    ds = grain.MapDataset.source(_ProcessShare(ds, batch_size, jax.process_index(), jax.process_count()))
    ds = ds.batch(batch_size, drop_remainder=True)
    it = ds.to_iter_dataset(grain.ReadOptions(num_threads=num_threads, prefetch_buffer_size=prefetch))
    return iter(it)


def eval_batches(source, pre: Preprocessor, *, batch_size: int, source_name: str = "",
                 records: Sequence[Record] | None = None) -> Iterator[dict]:
    """Ordered local eval batches of this process's share, the last one padded (``valid`` False).

    Every process yields the same number of batches (padding with all-invalid batches), so the global
    arrays line up across processes.
    """
    n = len(source)
    pc, pi = jax.process_count(), jax.process_index()
    mine = list(range(pi, n, pc))
    per_proc = -(-n // pc)
    num_batches = -(-per_proc // batch_size)
    template = None
    for b in range(num_batches):
        idx = mine[b * batch_size:(b + 1) * batch_size]
        feats = []
        for i in idx:
            rec = decode_record(source[i], i, source_name, pre.counter)
            feats.append(pre.features(rec, rec.answers[0] if rec.answers else None, for_decoding=True))
        if feats:
            template = feats[0]
        elif template is None:
            rec = decode_record(source[0], 0, source_name)
            template = pre.features(rec, None, for_decoding=True)
        while len(feats) < batch_size:
            pad = {k: np.zeros_like(v) for k, v in template.items()}
            pad["valid"] = np.bool_(False)
            if "allowed_vocab" in pad:
                pad["allowed_vocab"] = np.ones_like(template["allowed_vocab"])
            feats.append(pad)
        yield {k: np.stack([f[k] for f in feats]) for k in feats[0]}


def to_global(batch: dict, sharding) -> dict:
    """Local numpy batch -> global ``jax.Array`` s laid out by ``sharding`` (leading axis on ``data``)."""
    return {k: jax.make_array_from_process_local_data(sharding, np.asarray(v)) for k, v in batch.items()}
