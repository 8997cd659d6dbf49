"""Deterministic generator of the embedded synthetic OpenViVQA stand-in (docs/design.md §3).

Pure Python / numpy / PIL: no TFDS or TensorFlow import, so training, prediction and OCR code may use it
directly (e.g. :func:`render_scene` makes a fresh signboard photo with a shop name never seen in training).

What one image is
-----------------
A street-scene-like render: sky, a row of building facades, a sidewalk and a road; one to three shop signboards
(a shop-kind word from :data:`SHOP_KINDS` + a one or two syllable proper name, sometimes a price line such as
``25.000đ`` / ``25K`` / ``25.000 VNĐ``, a phone number or a slogan); optionally a street-name plate and a
"khai trương" banner; simple coloured objects (cars, motorbikes, people, umbrellas, plastic stools) painted in the
twelve guideline colours of :data:`COLORS`.

Questions and answers follow the OpenViVQA guideline (paper Table 1 and §3.2.4): lowercase, phrase or sentence
answers, quantities written in words (``một`` .. ``mười``), colours only from the twelve, left/right from the
viewer, prices as ``#,### đồng``; every string passes through
:func:`openvivqa_jax.text.normalize.normalize_text`. Text QAs (``qa_type`` 1) ask about scene text (shop name,
price, what a named shop sells, its signboard colour, side, phone number, the street); non-text QAs (``qa_type``
0) ask about object colours, counts and sides. Answers are a deterministic function of (scene, question).
Each QA carries its template ``kind`` (:data:`TEXT_KINDS`, :data:`NON_TEXT_KINDS`), so scores can be reported per
kind of question.

OCR
---
Ground truth is word level: one token per whitespace word of each *normalized* rendered line (``25.000đ`` gives
``25,000`` and ``đồng``), box ``(x0, y0, x1, y1)`` in [0, 1] of the image from ``ImageDraw.textbbox`` of the
rendered piece, score 1.0. An optional noise model (drop, one-character substitution, box jitter) is applied
deterministically from the seed.

Splits
------
Shop proper names are built from three *disjoint* syllable pools (:data:`NAME_SYLLABLES`), one per split, and
no pool syllable occurs in any fixed word of the generator (templates, kinds, colours, streets, slogans). So no
test (or validation) shop-name word ever occurs in train: only a model that copies OCR tokens can answer.

Determinism
-----------
Image ``i`` of split ``s`` uses ``numpy.random.default_rng(SeedSequence([seed, SPLIT_CODES[s], i]))`` for the
scene and QAs and ``SeedSequence([seed, SPLIT_CODES[s], i, 1])`` for the OCR noise, so the same seed gives
byte-identical examples (with the same PIL / FreeType build) and images are independent of each other.

Modules
-------
:mod:`.scene` (vocabulary, pools, config, scene specification), :mod:`.render` (fonts and drawing),
:mod:`.questions` (question templates), :mod:`.ocr_noise` (OCR noise); this module puts them together
(:func:`render_scene`, :func:`generate_split`, :func:`detector_regions`) and re-exports their public names.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterator, Sequence

import numpy as np
from absl import logging
from PIL import Image

from tfds_builders.synthetic_openvivqa.ocr_noise import apply_ocr_noise
from tfds_builders.synthetic_openvivqa.questions import _make_qas
from tfds_builders.synthetic_openvivqa.render import FONT_PATH, SIGN_TEXT_COLORS, _draw_scene
from tfds_builders.synthetic_openvivqa.scene import (
    COLORS,
    COUNT_WORDS,
    NAME_SYLLABLES,
    NON_TEXT_KINDS,
    OBJECT_KINDS,
    REGION_CLASSES,
    REGION_FEATURE_DIM,
    REGION_POOL,
    SHOP_KINDS,
    SHOP_NAME_POOLS,
    SPLIT_CODES,
    SPLITS,
    STREETS,
    TEXT_KINDS,
    GeneratorConfig,
    _FIXED_VOCAB,
    _check_split,
    _sample_scene,
    image_rng,
    split_of_name,
)

__all__ = [
    "COLORS",
    "COUNT_WORDS",
    "TEXT_KINDS",
    "NON_TEXT_KINDS",
    "FONT_PATH",
    "GeneratorConfig",
    "NAME_SYLLABLES",
    "OBJECT_KINDS",
    "REGION_CLASSES",
    "REGION_FEATURE_DIM",
    "SHOP_KINDS",
    "SHOP_NAME_POOLS",
    "SIGN_TEXT_COLORS",
    "SPLITS",
    "SPLIT_CODES",
    "STREETS",
    "apply_ocr_noise",
    "detector_regions",
    "generate_split",
    "image_rng",
    "render_scene",
    "split_of_name",
]


def _as_rng(rng: np.random.Generator | int) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)):
        return np.random.default_rng(int(rng))
    raise TypeError(f"render_scene: rng must be a numpy Generator or an int seed, got {type(rng).__name__}")


def render_scene(rng: np.random.Generator | int, size: tuple[int, int] = (256, 192),
                 shop_names: Sequence[str] | None = None, *, split: str = "train", num_signs: int | None = None,
                 sign_colors: Sequence[str] | None = None, max_ocr_tokens: int = 30, min_qas: int = 3,
                 max_qas: int = 5) -> tuple[Image.Image, dict]:
    """Renders one street scene with signboards and returns it with its ground truth.

    Args:
        rng: a numpy Generator (consumed) or an int seed.
        size: ``(width, height)`` in pixels. The scene (layout, names, colours) does not depend on it, so the
            same seed rendered at two sizes gives the same scene scaled.
        shop_names: 1-3 names to paint instead of sampled ones (e.g. a name from no pool, to test copying).
        split: pool names are sampled from when ``shop_names`` is None.
        num_signs: number of signboards (1-3); sampled when None and no ``shop_names`` are given.
        sign_colors: guideline colour names of the signboards (one per sign) instead of sampled ones.
        max_ocr_tokens: budget for scene-text tokens (optional text is left out to fit).
        min_qas, max_qas: number of QAs in ``scene_info["qas"]``.

    Returns:
        ``(image, scene_info)``: an RGB ``PIL.Image`` of ``size``; ``scene_info`` with ``size``,
        ``signboards`` (list of ``{name, kind, color, price (int VND or None), phone, slogan, side, box}``,
        box xyxy in [0, 1]), ``street`` (name or None), ``objects`` (``{kind, color, side, box}``), ``regions``
        (``{class, box}`` of every drawn object, signboard, street sign and banner, for :func:`detector_regions`),
        ``ocr`` (clean ground truth ``{text: list[str] (num_ocr,), box: float32 (num_ocr, 4),
        score: float32 (num_ocr,)}``) and ``qas`` (``{question, answers, qa_type, kind}``).

    Raises:
        ValueError: for a bad split, size, ``shop_names`` or ``num_signs``.
        FileNotFoundError: if the Vietnamese-capable font is missing.
    """
    _check_split(split)
    w, h = (int(v) for v in size)
    if w < 32 or h < 24:
        raise ValueError(f"render_scene: image size {size} too small (need at least 32x24)")
    rng = _as_rng(rng)
    spec = _sample_scene(rng, split, shop_names, num_signs, max_ocr_tokens, sign_colors)
    qas = _make_qas(spec, rng, min_qas, max_qas)
    # Every QA word is template vocabulary, a shop name of this scene, a number or "?": so no word of another
    # split's name pool can leak into a question or answer.
    allowed = _FIXED_VOCAB | {word for s in spec["signs"] for word in s["name"].split()}
    for qa in qas:
        for text in (qa["question"], *qa["answers"]):
            bad = [t for t in text.split() if t not in allowed and t != "?" and not any(c.isdigit() for c in t)]
            if bad:
                raise AssertionError(f"synthetic_openvivqa: QA {text!r} has words {bad} outside the template "
                                     "vocabulary (add them to _TEMPLATE_WORDS)")
    img, ocr = _draw_scene(spec, (w, h))
    if len(ocr) > max_ocr_tokens:
        raise AssertionError(f"synthetic_openvivqa: {len(ocr)} OCR tokens exceed max_ocr_tokens={max_ocr_tokens}")
    info = {
        "size": (w, h),
        "signboards": [{k: s[k] for k in ("name", "kind", "color", "price", "phone", "slogan", "side", "box")}
                       for s in spec["signs"]],
        "street": spec["street"]["name"] if spec["street"] else None,
        "objects": [{k: o[k] for k in ("kind", "color", "side", "box")} for o in spec["objects"]],
        "n_unplaced_objects": spec["n_unplaced"],
        # What an object detector would report: every drawn object, signboard, street sign and banner.
        "regions": ([{"class": o["kind"], "box": o["box"]} for o in spec["objects"]]
                    + [{"class": "signboard", "box": s["box"]} for s in spec["signs"]]
                    + [{"class": "street_sign", "box": spec["street"]["box"]} for _ in [spec["street"]] if _]
                    + [{"class": "banner", "box": spec["banner"]["box"]} for _ in [spec["banner"]] if _]),
        "ocr": {"text": [t for t, _ in ocr],
                "box": np.asarray([b for _, b in ocr], np.float32).reshape(-1, 4),
                "score": np.ones((len(ocr),), np.float32)},
        "qas": qas,
    }
    return img, info


def detector_regions(image: np.ndarray, regions: Sequence[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Region features of an oracle object detector: the ground-truth boxes and classes of a scene's drawn
    objects and text panels, each described by its class and its pooled colours.

    This stands in for the pre-extracted detector features of the real datasets (bottom-up attention
    features, Anderson et al. 2018, which are trained to predict object classes and attributes such as
    colour): here the detector is exact, so a model's errors on colour, count and side questions come from
    the model, not from the features.

    Args:
        image: ``(height, width, 3)`` uint8, the rendered scene.
        regions: ``render_scene``'s ``scene_info["regions"]``: ``{"class": one of REGION_CLASSES, "box": xyxy in
            [0, 1]}`` each.

    Returns:
        ``(features (num_regions, REGION_FEATURE_DIM) float16, boxes (num_regions, 4) float32)``: per region
        the class one-hot (:data:`REGION_CLASSES`), then the box's pixels averaged over a
        ``REGION_POOL x REGION_POOL`` grid (PIL box filter), RGB in ``[0, 1]``, row-major.

    Raises:
        ValueError: an unknown class or a box outside ``[0, 1]`` / with no area.
    """
    h, w = image.shape[:2]
    feats = np.zeros((len(regions), REGION_FEATURE_DIM), np.float32)
    boxes = np.zeros((len(regions), 4), np.float32)
    for i, r in enumerate(regions):
        if r["class"] not in REGION_CLASSES:
            raise ValueError(f"detector_regions: unknown class {r['class']!r}; known: {REGION_CLASSES}")
        x0, y0, x1, y1 = (float(v) for v in r["box"])
        if not (-1e-6 <= x0 < x1 <= 1 + 1e-6 and -1e-6 <= y0 < y1 <= 1 + 1e-6):
            raise ValueError(f"detector_regions: box {r['box']} of a {r['class']} is not xyxy inside [0, 1]")
        px0, py0 = min(int(x0 * w), w - 1), min(int(y0 * h), h - 1)
        px1, py1 = max(px0 + 1, min(w, int(np.ceil(x1 * w)))), max(py0 + 1, min(h, int(np.ceil(y1 * h))))
        crop = Image.fromarray(np.ascontiguousarray(image[py0:py1, px0:px1, :3]))
        pooled = np.asarray(crop.resize((REGION_POOL, REGION_POOL), Image.Resampling.BOX), np.float32) / 255.0
        feats[i, REGION_CLASSES.index(r["class"])] = 1.0
        feats[i, len(REGION_CLASSES):] = pooled.reshape(-1)
        boxes[i] = np.clip([x0, y0, x1, y1], 0.0, 1.0)
    return feats.astype(np.float16), boxes


def generate_split(split: str, cfg: GeneratorConfig) -> Iterator[tuple[str, dict]]:
    """Yields ``(key, example)`` for every question of ``split`` in the common schema (tfds_builders.common).

    ``example``: ``image`` uint8 ``(height, width, 3)``, ``image_id`` ``"syn-<split>-<image:05d>"``,
    ``question_id`` (also the key) ``"syn-<split>-<image:05d>-<q>"``, ``question``, ``answers`` (one
    reference), ``qa_type`` (1 text, 0 non-text), ``language`` (``"vi"``), ``kind`` (the QA's template kind, one
    of :data:`TEXT_KINDS` + :data:`NON_TEXT_KINDS`), ``ocr`` ``{text (num_ocr,), box float32 (num_ocr, 4) xyxy in
    [0, 1], score float32 (num_ocr,)}`` with the configured noise. Consecutive examples of one image share the
    same ``image`` array object.

    Raises:
        ValueError: unknown split or bad noise settings.
        AssertionError: if a generated shop name is not in the split's pool (the split-disjointness guarantee).
    """
    n_images = cfg.num_images(split)
    totals = Counter()
    for i in range(n_images):
        img, info = render_scene(image_rng(cfg.seed, split, i), cfg.image_size, split=split,
                                 max_ocr_tokens=cfg.max_ocr_tokens, min_qas=cfg.min_qas, max_qas=cfg.max_qas)
        for s in info["signboards"]:
            if s["name"] not in SHOP_NAME_POOLS[split]:
                raise AssertionError(f"synthetic_openvivqa: shop name {s['name']!r} of syn-{split}-{i:05d} is "
                                     f"not in the {split} pool")
        tokens, boxes, stats = apply_ocr_noise(info["ocr"]["text"], info["ocr"]["box"],
                                               image_rng(cfg.seed, split, i, stream=1), cfg.ocr_drop_prob,
                                               cfg.ocr_sub_prob, cfg.ocr_box_jitter)
        totals.update(stats)
        totals["unplaced_objects"] += info["n_unplaced_objects"]
        ocr = {"text": tokens, "box": boxes, "score": np.ones((len(tokens),), np.float32)}
        image = np.asarray(img, dtype=np.uint8)
        image_id = f"syn-{split}-{i:05d}"
        extra = {}
        if cfg.region_features:
            feats, rboxes = detector_regions(image, info["regions"])
            extra["objects"] = {"features": feats, "boxes": rboxes}
            totals["regions"] += len(feats)
        for q, qa in enumerate(info["qas"]):
            totals["questions"] += 1
            totals[f"qa_type_{qa['qa_type']}"] += 1
            qid = f"{image_id}-{q}"
            yield qid, {"image": image, "image_id": image_id, "question_id": qid, "question": qa["question"],
                        "answers": list(qa["answers"]), "qa_type": np.int32(qa["qa_type"]), "language": "vi",
                        "kind": qa["kind"], "ocr": ocr, **extra}
    logging.info("synthetic_openvivqa %s: %d images, %d questions (text %d, non-text %d); OCR noise dropped %d "
                 "and corrupted %d tokens; %d objects did not fit the layout and were not drawn.", split, n_images,
                 totals["questions"], totals["qa_type_1"], totals["qa_type_0"], totals["dropped"],
                 totals["substituted"], totals["unplaced_objects"])
