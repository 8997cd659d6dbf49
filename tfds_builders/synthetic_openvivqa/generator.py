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
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os
from collections import Counter
from typing import Any, Iterator, Sequence

import numpy as np
from absl import logging
from PIL import Image, ImageDraw, ImageFont

from openvivqa_jax.text.normalize import normalize_text

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

SPLITS = ("train", "validation", "test")
#: Integer code of each split, mixed into the per-image seed sequence.
SPLIT_CODES = {"train": 0, "validation": 1, "test": 2}

#: Font with Vietnamese glyphs (DejaVu Sans Bold). Override with the ``OPENVIVQA_FONT`` environment variable.
FONT_PATH = os.environ.get("OPENVIVQA_FONT", "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf")

#: The twelve guideline colours (paper Table 1: black, white, red, orange, yellow, green, blue, sky blue,
#: purple, pink, brown, gray) with their standard Vietnamese names and the RGB painted for each. Pairwise
#: Euclidean RGB distances are >= 80 (closest: cam/vàng), so JPEG never makes two of them look alike.
COLORS: dict[str, tuple[int, int, int]] = {
    "đen": (20, 20, 20),
    "trắng": (248, 248, 248),
    "đỏ": (215, 25, 30),
    "cam": (255, 135, 0),
    "vàng": (250, 220, 0),
    "xanh lá": (30, 150, 50),
    "xanh dương": (25, 70, 210),
    "xanh da trời": (100, 185, 245),
    "tím": (140, 50, 180),
    "hồng": (255, 125, 195),
    "nâu": (120, 70, 25),
    "xám": (128, 128, 128),
}

#: Quantities in words (guideline: letters, not digits, and not greater than ten).
COUNT_WORDS = ("một", "hai", "ba", "bốn", "năm", "sáu", "bảy", "tám", "chín", "mười")
#: Template kinds of the text QAs (``qa_type`` 1): a shop's name, the price on its sign, its signboard's colour,
#: what it sells (the kind word on the sign), its side of the image, its phone number, the street plate.
TEXT_KINDS = ("name", "price", "sign_colour", "sells", "shop_position", "phone", "street")
#: Template kinds of the non-text QAs (``qa_type`` 0): an object's colour, an object's side, how many objects of
#: a kind, how many shops.
NON_TEXT_KINDS = ("colour", "position", "count", "shop_count")


@dataclasses.dataclass(frozen=True)
class ShopKind:
    """One kind of shop: the word on the sign and the phrases QAs use.

    Attributes:
        sign: kind word(s) painted on the signboard (normalized form), e.g. ``"phở"``.
        place: how a question names this shop by kind, e.g. ``"quán phở"``.
        sells: object of "bán" in the answer to "what does it sell", e.g. ``"phở"``.
        item: a priced unit (``"một tô phở"``) or None when the sign never shows a price.
        category: ``"món ăn"`` or ``"đồ uống"`` for priced kinds, else None.
    """

    sign: str
    place: str
    sells: str
    item: str | None = None
    category: str | None = None


SHOP_KINDS: tuple[ShopKind, ...] = (
    ShopKind("phở", "quán phở", "phở", "một tô phở", "món ăn"),
    ShopKind("bún bò", "quán bún bò", "bún bò", "một tô bún bò", "món ăn"),
    ShopKind("cơm tấm", "quán cơm tấm", "cơm tấm", "một dĩa cơm tấm", "món ăn"),
    ShopKind("bánh mì", "tiệm bánh mì", "bánh mì", "một ổ bánh mì", "món ăn"),
    ShopKind("cà phê", "quán cà phê", "cà phê", "một ly cà phê", "đồ uống"),
    ShopKind("trà sữa", "tiệm trà sữa", "trà sữa", "một ly trà sữa", "đồ uống"),
    ShopKind("nhà thuốc", "nhà thuốc", "thuốc"),
    ShopKind("tạp hóa", "tiệm tạp hóa", "đồ tạp hóa"),
    ShopKind("hoa tươi", "tiệm hoa tươi", "hoa tươi"),
    ShopKind("nhà sách", "nhà sách", "sách"),
)


@dataclasses.dataclass(frozen=True)
class ObjectKind:
    """A drawable object kind.

    Attributes:
        key: internal name.
        noun: the noun phrase with its classifier (``"chiếc ô tô"``); counts read ``"có ba chiếc ô tô"``.
        layer: ``"road"`` or ``"walk"`` (sidewalk); objects in one layer never overlap.
        width: width as a fraction of the image width.
        max_count: most instances in one image (well under ten, the guideline's limit).
    """

    key: str
    noun: str
    layer: str
    width: float
    max_count: int


OBJECT_KINDS: tuple[ObjectKind, ...] = (
    ObjectKind("car", "chiếc ô tô", "road", 0.19, 2),
    ObjectKind("motorbike", "chiếc xe máy", "road", 0.085, 4),
    ObjectKind("person", "người", "walk", 0.05, 4),
    ObjectKind("umbrella", "cây dù", "walk", 0.13, 2),
    ObjectKind("stool", "chiếc ghế nhựa", "walk", 0.045, 4),
)
_OBJECT_BY_KEY = {k.key: k for k in OBJECT_KINDS}

#: Classes of the oracle detector's regions (:func:`detector_regions`): the object kinds, then the signboards,
#: the street sign and the banner.
REGION_CLASSES: tuple[str, ...] = tuple(k.key for k in OBJECT_KINDS) + ("signboard", "street_sign", "banner")
#: Side of each region's pooled colour grid: ``REGION_POOL x REGION_POOL`` cells of mean RGB.
REGION_POOL = 4
#: Width ``D`` of a region feature: class one-hot, then the pooled RGB grid in [0, 1] (row-major, RGB last).
REGION_FEATURE_DIM = len(REGION_CLASSES) + 3 * REGION_POOL ** 2

#: Street names for the optional street plate (fixed vocabulary, shared by every split).
STREETS = ("lê lợi", "nguyễn huệ", "trần phú", "hàng bông", "tạ hiện", "lý thái tổ", "hai bà trưng",
           "bà triệu", "phan đình phùng", "điện biên phủ")
#: Slogans painted on a signboard's third line (distractor OCR tokens).
SLOGANS = ("giao hàng tận nơi", "mở cửa cả ngày", "giảm giá", "ngon rẻ")
BANNER_TEXT = "khai trương"
PHONE_PREFIXES = ("090", "091", "093", "097", "098", "038", "035", "077")

# Name syllables (normalized). Any syllable that also occurs in a fixed word of the generator is an error.
_NAME_SYLLABLES_ALL = (
    "minh", "châu", "hoàng", "lan", "phúc", "an", "bình", "hạnh", "thảo", "ngọc", "hương", "long",
    "phát", "thành", "tâm", "đức", "hải", "hùng", "mai", "linh", "nga", "quang", "sơn", "thủy",
    "trang", "tuấn", "vân", "yến", "khánh", "hiền", "loan", "nhung", "phương", "quý", "thắng", "tín",
    "trí", "uyên", "vy", "xuân", "bảo", "cường", "dũng", "giang", "hiếu", "kim", "lộc", "my",
    "oanh", "phong", "quyên", "tài", "thịnh", "toàn", "vinh", "hòa", "hậu", "nhi", "đạt", "ngân",
    "thư", "diệp", "liên", "tú", "duy", "khoa", "lâm", "nhân", "sang", "thiện", "tùng", "vũ",
)
# Fixed (split-independent) permutation of the syllables; 60% train, 20% validation, 20% test.
_POOL_SEED = 20230517


def _fixed_vocabulary() -> set[str]:
    """Every word the generator writes that is not a shop name (templates are checked at QA time too)."""
    words: set[str] = set()
    texts = [k.sign for k in SHOP_KINDS] + [k.place for k in SHOP_KINDS] + [k.sells for k in SHOP_KINDS]
    texts += [k.item or "" for k in SHOP_KINDS] + [k.category or "" for k in SHOP_KINDS]
    texts += [k.noun for k in OBJECT_KINDS] + list(COLORS) + list(COUNT_WORDS) + list(STREETS) + list(SLOGANS)
    texts += [BANNER_TEXT, "đt", "đường", "giá", "đồng", "vnđ", _TEMPLATE_WORDS]
    for t in texts:
        words.update(normalize_text(t).split())
    return words


# Words of the QA templates below (kept in sync by an assertion in render_scene).
_TEMPLATE_WORDS = (
    "cửa hàng này tên gì là của bên trái phải ở giữa món ăn đồ uống đây có giá bao nhiêu biển hiệu bảng "
    "màu bán nào nằm số điện thoại con đường trong ảnh mấy mặc áo người phía các"
)


def _build_pools() -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    syllables = [normalize_text(s) for s in _NAME_SYLLABLES_ALL]
    if len(set(syllables)) != len(syllables):
        raise AssertionError("generator.py: duplicate name syllables after normalization")
    for s in syllables:
        if normalize_text(s.upper()) != s or " " in s:
            raise AssertionError(f"generator.py: name syllable {s!r} is not a normalized single word")
    clash = set(syllables) & _fixed_vocabulary()
    if clash:
        raise AssertionError(f"generator.py: name syllables {sorted(clash)} also occur in fixed vocabulary")
    order = np.random.default_rng(_POOL_SEED).permutation(len(syllables))
    shuffled = [syllables[i] for i in order]
    n = len(shuffled)
    n_train, n_val = int(round(0.6 * n)), int(round(0.2 * n))
    sy = {
        "train": tuple(sorted(shuffled[:n_train])),
        "validation": tuple(sorted(shuffled[n_train:n_train + n_val])),
        "test": tuple(sorted(shuffled[n_train + n_val:])),
    }
    names = {}
    for split, pool in sy.items():
        singles = list(pool)
        pairs = [f"{a} {b}" for a, b in itertools.permutations(pool, 2)]
        names[split] = tuple(singles + pairs)
    for a, b in itertools.combinations(SPLITS, 2):
        if set(sy[a]) & set(sy[b]) or set(names[a]) & set(names[b]):
            raise AssertionError(f"generator.py: name pools of {a} and {b} overlap")
    return sy, names


#: Proper-name syllables of each split (pairwise disjoint).
NAME_SYLLABLES: dict[str, tuple[str, ...]]
#: All shop proper names of each split: single syllables and ordered pairs of distinct syllables of that
#: split's pool (pairwise disjoint across splits, at word level too).
SHOP_NAME_POOLS: dict[str, tuple[str, ...]]
NAME_SYLLABLES, SHOP_NAME_POOLS = _build_pools()
_FIXED_VOCAB = frozenset(_fixed_vocabulary())
_NAME_TO_SPLIT = {name: split for split, names in SHOP_NAME_POOLS.items() for name in names}


def split_of_name(name: str) -> str | None:
    """Returns the split whose pool holds shop name ``name`` (normalized first), or None if in no pool."""
    return _NAME_TO_SPLIT.get(normalize_text(name))


@dataclasses.dataclass(frozen=True)
class GeneratorConfig:
    """Sizes, seed and OCR noise of one synthetic dataset variant.

    Attributes:
        seed: master seed; every image's randomness derives from (seed, split, image index).
        num_train_images, num_validation_images, num_test_images: images per split (3-5 questions each).
        image_size: rendered ``(width, height)`` in pixels.
        jpeg_quality: JPEG quality used by the TFDS builder when encoding images.
        ocr_drop_prob: probability that a ground-truth OCR token is removed (missed detection).
        ocr_sub_prob: probability that a token has one character replaced by another letter (or digit for a
            digit), a recognition error; the token is re-normalized and stays one word.
        ocr_box_jitter: std of Gaussian noise on each box coordinate, as a fraction of the box width (x) or
            height (y); boxes are clipped to [0, 1] and kept non-degenerate.
        max_ocr_tokens: at most this many OCR tokens per image (optional scene text is left out to fit).
        min_qas, max_qas: questions per image (guideline: at least three).
        region_features: also yield ``objects`` ``{features, boxes}``, the oracle detector's region features
            (:func:`detector_regions`), for models with ``model.vision.kind = "region"``.
    """

    seed: int = 0
    num_train_images: int = 1500
    num_validation_images: int = 150
    num_test_images: int = 200
    image_size: tuple[int, int] = (256, 192)
    jpeg_quality: int = 90
    ocr_drop_prob: float = 0.03
    ocr_sub_prob: float = 0.05
    ocr_box_jitter: float = 0.02
    max_ocr_tokens: int = 30
    min_qas: int = 3
    max_qas: int = 5
    region_features: bool = False

    def num_images(self, split: str) -> int:
        """Number of images of ``split``; raises ValueError for an unknown split."""
        _check_split(split)
        return int(getattr(self, f"num_{split}_images"))


def _check_split(split: str) -> None:
    if split not in SPLIT_CODES:
        raise ValueError(f"synthetic_openvivqa: unknown split {split!r}; expected one of {SPLITS}")


def image_rng(seed: int, split: str, index: int, stream: int = 0) -> np.random.Generator:
    """The generator of image ``index`` of ``split`` (stream 0: scene and QAs; stream 1: OCR noise)."""
    _check_split(split)
    key = [int(seed), SPLIT_CODES[split], int(index)] + ([stream] if stream else [])
    return np.random.default_rng(np.random.SeedSequence(key))


# ----------------------------------------------------------------------------------------------------------
# Fonts
# ----------------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _font(px: int) -> ImageFont.FreeTypeFont:
    if not os.path.exists(FONT_PATH):
        raise FileNotFoundError(
            f"synthetic_openvivqa: font {FONT_PATH!r} not found. It needs a TrueType font with Vietnamese glyphs "
            "(install fonts-dejavu-core, e.g. `apt-get install fonts-dejavu-core`, or point the OPENVIVQA_FONT "
            "environment variable at another such .ttf file).")
    return ImageFont.truetype(FONT_PATH, size=max(6, int(px)))


def _fit_font(text: str, target_px: float, max_width: float) -> ImageFont.FreeTypeFont:
    """Largest font not above ``target_px`` whose rendering of ``text`` fits in ``max_width`` pixels."""
    px = max(6, int(target_px))
    width = _font(px).getlength(text)
    if width > max_width:
        px = max(6, int(px * max_width / width))
        while px > 6 and _font(px).getlength(text) > max_width:
            px -= 1
    return _font(px)


# ----------------------------------------------------------------------------------------------------------
# Scene specification (size independent, relative coordinates)
# ----------------------------------------------------------------------------------------------------------

# A text line is a list of words; a word is a list of (rendered piece, OCR token) pairs: "25.000đ" is one
# rendered word with pieces ("25.000", "25,000") and ("đ", "đồng").
Piece = tuple[str, str]
Line = list[list[Piece]]


def _plain_line(text: str) -> Line:
    """One piece per word; the token is the normalized word."""
    return [[(w, normalize_text(w))] for w in text.split()]


def _price_line(value: int, rng: np.random.Generator) -> Line:
    """A price in one of several real-world spellings; tokens are the normalized ``#,###`` and ``đồng``."""
    number = f"{value:,}"
    dotted = number.replace(",", ".")
    style = int(rng.integers(5))
    if style == 0:
        words = [[(dotted, number), ("đ", "đồng")]]
    elif style == 1:
        words = [[(dotted, number)], [("VNĐ", "đồng")]]
    elif style == 2:
        words = [[(str(value // 1000), number), ("K", "đồng")]]
    elif style == 3:
        words = [[(number, number)], [("đ", "đồng")]]
    else:
        words = [[(dotted, number)], [("đồng", "đồng")]]
    if rng.random() < 0.4:
        words = [[("giá", "giá")]] + words
    return words


def _line_tokens(line: Line) -> list[str]:
    return [tok for word in line for _, tok in word]


def _line_text(line: Line) -> str:
    return " ".join("".join(p for p, _ in word) for word in line)


def _phone(rng: np.random.Generator) -> str:
    prefix = PHONE_PREFIXES[int(rng.integers(len(PHONE_PREFIXES)))]
    digits = "".join(str(int(d)) for d in rng.integers(0, 10, size=7))
    return f"{prefix}{digits[0]}.{digits[1:4]}.{digits[4:]}"


def _sample_name(rng: np.random.Generator, split: str, taken: set[str]) -> str:
    pool = NAME_SYLLABLES[split]
    while True:
        if rng.random() < 0.35:
            name = pool[int(rng.integers(len(pool)))]
        else:
            a, b = rng.choice(len(pool), size=2, replace=False)
            name = f"{pool[int(a)]} {pool[int(b)]}"
        if name not in taken:
            return name


def _sample_scene(rng: np.random.Generator, split: str, shop_names: Sequence[str] | None,
                  num_signs: int | None, max_ocr_tokens: int,
                  sign_colors: Sequence[str] | None = None) -> dict[str, Any]:
    """Samples everything about one image except pixels; coordinates are fractions of width/height."""
    if shop_names is not None:
        shop_names = [normalize_text(n) for n in shop_names]
        if not 1 <= len(shop_names) <= 3 or any(not n for n in shop_names) or len(set(shop_names)) != len(shop_names):
            raise ValueError(f"render_scene: shop_names must be 1-3 distinct non-empty names, got {shop_names!r}")
        if num_signs is not None and num_signs != len(shop_names):
            raise ValueError(f"render_scene: num_signs={num_signs} but {len(shop_names)} shop_names given")
        n_signs = len(shop_names)
    elif num_signs is not None:
        if not 1 <= num_signs <= 3:
            raise ValueError(f"render_scene: num_signs must be 1, 2 or 3, got {num_signs}")
        n_signs = num_signs
    else:
        n_signs = int(rng.choice([1, 2, 3], p=[0.3, 0.4, 0.3]))

    kinds = rng.choice(len(SHOP_KINDS), size=n_signs, replace=False)
    sign_colors_idx = rng.choice(len(COLORS), size=n_signs, replace=False)
    color_names = list(COLORS)
    sign_color_names = [color_names[int(c)] for c in sign_colors_idx]
    if sign_colors is not None:  # drawn above anyway, so the rest of the scene does not change
        sign_colors = [normalize_text(c) for c in sign_colors]
        if len(sign_colors) != n_signs or any(c not in COLORS for c in sign_colors):
            raise ValueError(f"render_scene: sign_colors must be {n_signs} names from {list(COLORS)}, "
                             f"got {sign_colors!r}")
        sign_color_names = list(sign_colors)
    names: list[str] = []
    for i in range(n_signs):
        names.append(shop_names[i] if shop_names is not None else _sample_name(rng, split, set(names)))

    # Signboard slots across the facade row.
    if n_signs == 1:
        w = float(rng.uniform(0.5, 0.7))
        x0 = float(rng.uniform(0.03, 0.97 - w))
        slots = [(x0, x0 + w)]
    else:
        gap = 0.05
        w = (0.96 - gap * (n_signs - 1)) / n_signs
        slots = [(0.02 + i * (w + gap), 0.02 + i * (w + gap) + w) for i in range(n_signs)]
    sides = (["này"] if n_signs == 1 else ["trái", "phải"] if n_signs == 2 else ["trái", "giữa", "phải"])

    case = "upper" if rng.random() < 0.65 else "title"
    signs = []
    budget = max_ocr_tokens
    for i in range(n_signs):
        kind = SHOP_KINDS[int(kinds[i])]
        y0 = float(rng.uniform(0.14, 0.2))
        h = float(rng.uniform(0.24, 0.3))
        sign = {
            "name": names[i], "kind": kind.sign, "color": sign_color_names[i],
            "box": (slots[i][0], y0, slots[i][1], y0 + h), "side": sides[i],
            "price": None, "phone": None, "slogan": None,
            "lines": [_plain_line(kind.sign), _plain_line(names[i])],
        }
        budget -= len(_line_tokens(sign["lines"][0])) + len(_line_tokens(sign["lines"][1]))
        signs.append(sign)
    if budget < 0:
        raise ValueError(f"render_scene: shop names {names!r} need more than max_ocr_tokens={max_ocr_tokens} tokens")
    # Third lines (price / phone / slogan), street plate and banner while the token budget allows.
    for sign in signs:
        kind = next(k for k in SHOP_KINDS if k.sign == sign["kind"])
        r = rng.random()
        extra = None
        if kind.item is not None and r < 0.65:
            price = int(rng.integers(2, 31)) * 5000
            extra = _price_line(price, rng)
            sign["price"] = price
        elif r < 0.8:
            phone = _phone(rng)
            extra = [[("ĐT", "đt")], [(phone, phone)]]
            sign["phone"] = phone
        elif r < 0.9:
            slogan = SLOGANS[int(rng.integers(len(SLOGANS)))]
            extra = _plain_line(slogan)
            sign["slogan"] = slogan
        if extra is not None:
            n_tok = len(_line_tokens(extra))
            if n_tok <= budget:
                sign["lines"].append(extra)
                budget -= n_tok
            else:
                sign["price"] = sign["phone"] = sign["slogan"] = None
    street = None
    if rng.random() < 0.45:
        cand = STREETS[int(rng.integers(len(STREETS)))]
        line = _plain_line("đường " + cand)
        if len(_line_tokens(line)) <= budget:
            left = rng.random() < 0.5
            x0 = 0.03 if left else 0.62
            street = {"name": cand, "box": (x0, 0.015, x0 + 0.35, 0.115), "lines": [line]}
            budget -= len(_line_tokens(line))
    banner = None
    if rng.random() < 0.25 and budget >= 2:
        x0 = float(rng.uniform(0.1, 0.6))
        banner = {"box": (x0, 0.49, x0 + 0.3, 0.57), "lines": [_plain_line(BANNER_TEXT)]}
        budget -= 2

    # Objects: per layer, non-overlapping intervals in the left [0.02, 0.44] or right [0.56, 0.98] zone.
    objects = []
    occupied: dict[str, list[tuple[float, float]]] = {"road": [], "walk": []}
    n_kinds = int(rng.integers(2, 5))
    chosen = rng.choice(len(OBJECT_KINDS), size=n_kinds, replace=False)
    n_unplaced = 0
    for ki in sorted(int(k) for k in chosen):
        kind = OBJECT_KINDS[ki]
        count = int(rng.integers(1, kind.max_count + 1))
        for _ in range(count):
            color = color_names[int(rng.integers(len(color_names)))]
            placed = False
            for _try in range(25):
                left = rng.random() < 0.5
                lo, hi = (0.02, 0.44) if left else (0.56, 0.98)
                x0 = float(rng.uniform(lo, hi - kind.width))
                iv = (x0, x0 + kind.width)
                if all(iv[1] + 0.01 <= a or iv[0] >= b + 0.01 for a, b in occupied[kind.layer]):
                    occupied[kind.layer].append(iv)
                    placed = True
                    break
            if not placed:
                n_unplaced += 1  # the scene simply has one object fewer; counts below use placed objects only
                continue
            if kind.layer == "road":
                yb = float(rng.uniform(0.86, 0.97))
            else:
                yb = float(rng.uniform(0.7, 0.79))
            objects.append({"kind": kind.key, "color": color, "x": iv, "y_bottom": yb,
                            "side": "trái" if (iv[0] + iv[1]) / 2 < 0.5 else "phải"})
    # Near-neutral facades (beige / grey / cream), never one of the twelve colours.
    facade = []
    for _ in range(4):
        base = int(rng.integers(195, 232))
        tint = rng.integers(-8, 9, size=3)
        facade.append(tuple(int(base + t) for t in tint))
    return {"signs": signs, "street": street, "banner": banner, "objects": objects, "case": case,
            "facade": facade, "n_unplaced": n_unplaced}


# ----------------------------------------------------------------------------------------------------------
# Rendering
# ----------------------------------------------------------------------------------------------------------


#: Text colour on each signboard colour. Chosen empirically for tesseract 5 (``-l vie``) on the RGB render:
#: its Otsu binarization picks one colour channel, in which white text on a saturated red/green/blue/purple
#: sign vanishes while black text survives; neutral dark signs (black, brown, grey) take white text, which
#: tesseract reads as inverted lines. (On a grayscale conversion the saturated ones would need white text.)
SIGN_TEXT_COLORS: dict[str, tuple[int, int, int]] = {
    c: ((255, 255, 255) if c in ("đen", "nâu", "xám") else (0, 0, 0)) for c in COLORS
}


def _case(text: str, case: str) -> str:
    return text.upper() if case == "upper" else " ".join(w[:1].upper() + w[1:] for w in text.split(" "))


def _draw_line(draw: ImageDraw.ImageDraw, line: Line, case: str, box_px: tuple[float, float, float, float],
               target_px: float, fill, size: tuple[int, int], ocr: list[tuple[str, tuple[float, ...]]]) -> None:
    """Draws ``line`` centred in ``box_px`` and appends one (token, relative box) per piece to ``ocr``."""
    cased: Line = [[(_case(p, case) if not any(ch.isdigit() for ch in p) else p, t) for p, t in word]
                   for word in line]
    text = _line_text(cased)
    x0, y0, x1, y1 = box_px
    font = _fit_font(text, target_px, 0.92 * (x1 - x0))
    bb = font.getbbox(text)
    tx = (x0 + x1) / 2 - (bb[2] - bb[0]) / 2 - bb[0]
    ty = (y0 + y1) / 2 - (bb[1] + bb[3]) / 2
    draw.text((tx, ty), text, fill=fill, font=font)
    w, h = size
    offset = 0
    for wi, word in enumerate(cased):
        if wi:
            offset += 1  # the space
        for piece, token in word:
            px = tx + font.getlength(text[:offset])
            b = draw.textbbox((px, ty), piece, font=font)
            rel = (min(max(b[0] / w, 0.0), 1.0), min(max(b[1] / h, 0.0), 1.0),
                   min(max(b[2] / w, 0.0), 1.0), min(max(b[3] / h, 0.0), 1.0))
            ocr.append((token, rel))
            offset += len(piece)
    # The rendered line normalizes to exactly the tokens recorded for it.
    expected = " ".join(_line_tokens(line))
    if normalize_text(text) != expected:
        raise AssertionError(f"synthetic_openvivqa: line {text!r} normalizes to {normalize_text(text)!r}, "
                             f"tokens say {expected!r}")


def _draw_object(draw: ImageDraw.ImageDraw, obj: dict, size: tuple[int, int]) -> tuple[float, ...]:
    """Paints one object; returns its pixel box."""
    w, h = size
    kind = _OBJECT_BY_KEY[obj["kind"]]
    col = COLORS[obj["color"]]
    x0, x1 = obj["x"][0] * w, obj["x"][1] * w
    yb = obj["y_bottom"] * h
    bw = x1 - x0
    lw = max(1, round(h / 160))
    dark = (15, 15, 15)
    if kind.key == "car":
        hh = 0.13 * h
        r = 0.11 * bw
        draw.rounded_rectangle([x0, yb - 0.62 * hh, x1, yb - 0.12 * hh], radius=r, fill=col)
        draw.polygon([(x0 + 0.18 * bw, yb - 0.6 * hh), (x0 + 0.3 * bw, yb - hh), (x0 + 0.72 * bw, yb - hh),
                      (x0 + 0.85 * bw, yb - 0.6 * hh)], fill=col)
        draw.rectangle([x0 + 0.33 * bw, yb - 0.92 * hh, x0 + 0.49 * bw, yb - 0.64 * hh], fill=(190, 215, 230))
        draw.rectangle([x0 + 0.53 * bw, yb - 0.92 * hh, x0 + 0.7 * bw, yb - 0.64 * hh], fill=(190, 215, 230))
        rr = 0.1 * bw
        for cx in (x0 + 0.22 * bw, x0 + 0.78 * bw):
            draw.ellipse([cx - rr, yb - 0.12 * hh - rr, cx + rr, yb - 0.12 * hh + rr], fill=dark)
        return (x0, yb - hh, x1, yb + rr - 0.12 * hh)
    if kind.key == "motorbike":
        hh = 0.1 * h
        rr = 0.2 * bw
        for cx in (x0 + 0.2 * bw, x0 + 0.8 * bw):
            draw.ellipse([cx - rr, yb - 2 * rr, cx + rr, yb], fill=dark)
        draw.rounded_rectangle([x0 + 0.12 * bw, yb - 0.75 * hh, x0 + 0.88 * bw, yb - 0.3 * hh],
                               radius=0.1 * bw, fill=col)
        draw.rectangle([x0 + 0.7 * bw, yb - hh, x0 + 0.8 * bw, yb - 0.7 * hh], fill=col)
        return (x0, yb - hh, x1, yb)
    if kind.key == "person":
        hh = 0.2 * h
        head = 0.16 * hh
        cx = (x0 + x1) / 2
        draw.rectangle([x0 + 0.22 * bw, yb - 0.42 * hh, x0 + 0.45 * bw, yb], fill=(45, 45, 70))
        draw.rectangle([x0 + 0.55 * bw, yb - 0.42 * hh, x0 + 0.78 * bw, yb], fill=(45, 45, 70))
        draw.rounded_rectangle([x0, yb - 0.82 * hh, x1, yb - 0.4 * hh], radius=0.2 * bw, fill=col)
        draw.ellipse([cx - head / 2 - 0.05 * bw, yb - hh, cx + head / 2 + 0.05 * bw, yb - 0.82 * hh],
                     fill=(230, 185, 140))
        return (x0, yb - hh, x1, yb)
    if kind.key == "umbrella":
        hh = 0.24 * h
        cx = (x0 + x1) / 2
        draw.rectangle([cx - lw, yb - 0.8 * hh, cx + lw, yb], fill=(60, 60, 60))
        draw.pieslice([x0, yb - hh, x1, yb - 0.6 * hh], 180, 360, fill=col)
        return (x0, yb - hh, x1, yb)
    # stool
    hh = 0.07 * h
    draw.rectangle([x0, yb - hh, x1, yb - 0.8 * hh], fill=col)
    draw.polygon([(x0 + 0.1 * bw, yb - 0.8 * hh), (x1 - 0.1 * bw, yb - 0.8 * hh), (x1, yb), (x1 - 0.2 * bw, yb),
                  ((x0 + x1) / 2, yb - 0.4 * hh), (x0 + 0.2 * bw, yb), (x0, yb)], fill=col)
    return (x0, yb - hh, x1, yb)


def _draw_scene(spec: dict, size: tuple[int, int]) -> tuple[Image.Image, list]:
    w, h = size
    img = Image.new("RGB", (w, h), (214, 228, 240))
    draw = ImageDraw.Draw(img)
    # Sky gradient, facades, sidewalk, road with lane marks.
    for y in range(int(0.3 * h)):
        t = y / max(1, 0.3 * h)
        draw.line([(0, y), (w, y)], fill=(int(200 + 30 * t), int(222 + 12 * t), int(242 - 4 * t)))
    n_f = len(spec["facade"])
    for i, col in enumerate(spec["facade"]):
        top = (0.08 + 0.03 * (i % 2)) * h
        draw.rectangle([i * w / n_f, top, (i + 1) * w / n_f, 0.64 * h], fill=col)
    draw.rectangle([0, 0.64 * h, w, 0.8 * h], fill=(175, 168, 160))
    draw.rectangle([0, 0.8 * h, w, h], fill=(72, 72, 78))
    for x in np.arange(0.02, 1.0, 0.16):
        draw.rectangle([x * w, 0.9 * h - max(1, h / 160), (x + 0.08) * w, 0.9 * h + max(1, h / 160)],
                       fill=(225, 225, 225))

    ocr: list[tuple[str, tuple[float, ...]]] = []
    case = spec["case"]
    lw = max(1, round(h / 120))
    for sign in spec["signs"]:
        bx0, by0, bx1, by1 = sign["box"]
        px = (bx0 * w, by0 * h, bx1 * w, by1 * h)
        bg = COLORS[sign["color"]]
        # No frame lines anywhere (signs, facades, objects): tesseract's layout analysis drops text enclosed by
        # a rectangle outline, and outlined shapes pass for glyphs.
        draw.rectangle(px, fill=bg)
        fg = SIGN_TEXT_COLORS[sign["color"]]
        sh = px[3] - px[1]
        lines = sign["lines"]
        # Row heights: kind, name (largest), optional third line.
        fracs = [0.3, 0.42, 0.28] if len(lines) == 3 else [0.36, 0.64]
        y = px[1]
        for line, frac, scale in zip(lines, fracs, ([0.62, 0.75, 0.62] if len(lines) == 3 else [0.55, 0.72])):
            row = (px[0], y, px[2], y + frac * sh)
            _draw_line(draw, line, case, row, scale * frac * sh, fg, size, ocr)
            y += frac * sh
    if spec["street"] is not None:
        st = spec["street"]
        bx0, by0, bx1, by1 = st["box"]
        px = (bx0 * w, by0 * h, bx1 * w, by1 * h)
        draw.rectangle(px, fill=COLORS["xanh dương"])
        _draw_line(draw, st["lines"][0], "upper", px, 0.7 * (px[3] - px[1]), (255, 255, 255), size, ocr)
    if spec["banner"] is not None:
        bn = spec["banner"]
        bx0, by0, bx1, by1 = bn["box"]
        px = (bx0 * w, by0 * h, bx1 * w, by1 * h)
        draw.rectangle(px, fill=COLORS["đỏ"])
        _draw_line(draw, bn["lines"][0], "upper", px, 0.75 * (px[3] - px[1]), COLORS["vàng"], size, ocr)
    # Objects back to front (sidewalk first, then road; within a layer by bottom y).
    order = sorted(range(len(spec["objects"])),
                   key=lambda i: (spec["objects"][i]["kind"] not in ("person", "umbrella", "stool"),
                                  spec["objects"][i]["y_bottom"]))
    for i in order:
        obj = spec["objects"][i]
        b = _draw_object(draw, obj, size)
        obj["box"] = (b[0] / w, b[1] / h, b[2] / w, b[3] / h)
    return img, ocr


# ----------------------------------------------------------------------------------------------------------
# Questions and answers
# ----------------------------------------------------------------------------------------------------------


def _pick(rng: np.random.Generator, options: Sequence[Any]) -> Any:
    return options[int(rng.integers(len(options)))]


def _side_phrase(side: str) -> str:
    return {"trái": "bên trái", "phải": "bên phải", "giữa": "ở giữa", "này": "này"}[side]


def _text_qas(spec: dict, rng: np.random.Generator) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """Returns (shop-name QAs, other text QAs) as (question, answer, kind) triples (kinds: :data:`TEXT_KINDS`)."""
    signs = spec["signs"]
    single = len(signs) == 1
    kinds_count = Counter(s["kind"] for s in signs)
    name_qas, other = [], []
    for s in signs:
        kind = next(k for k in SHOP_KINDS if k.sign == s["kind"])
        name = s["name"]
        # Shop name, by position.
        if single:
            subj = _pick(rng, ["cửa hàng này", kind.place + " này" if kind.place.startswith(("quán", "tiệm"))
                               else "cửa hàng này"])
            q = _pick(rng, [f"{subj} tên gì ?", f"{subj} tên là gì ?", f"tên của {subj} là gì ?"])
            name_qas.append((q, f"{subj} tên là {name}", "name"))
        else:
            subj = f"cửa hàng {_side_phrase(s['side'])}"
            q = _pick(rng, [f"{subj} tên là gì ?", f"{subj} tên gì ?", f"tên của {subj} là gì ?"])
            name_qas.append((q, f"{subj} tên là {name}", "name"))
            if kinds_count[s["kind"]] == 1:
                q = _pick(rng, [f"{kind.place} tên là gì ?", f"{kind.place} tên gì ?"])
                name_qas.append((q, f"{kind.place} tên là {name}", "name"))
        ref = "cửa hàng này" if single else f"cửa hàng {name}"
        # Price.
        if s["price"] is not None:
            price = f"{s['price']:,} đồng"
            if single:
                q, a = _pick(rng, [(f"{kind.category} ở đây giá bao nhiêu ?", f"{kind.category} có giá {price}"),
                                   (f"{kind.item} ở {ref} giá bao nhiêu ?", f"{kind.item} có giá {price}")])
            else:
                q, a = _pick(rng, [
                    (f"{kind.category} ở cửa hàng {name} giá bao nhiêu ?", f"{kind.category} có giá {price}"),
                    (f"giá của {kind.category} ở cửa hàng {name} là bao nhiêu ?", f"{kind.category} có giá {price}"),
                    (f"{kind.item} ở cửa hàng {name} giá bao nhiêu ?", f"{kind.item} có giá {price}"),
                ])
            other.append((q, a, "price"))
        # Signboard colour by name.
        noun = _pick(rng, ["biển hiệu", "bảng hiệu"])
        q = _pick(rng, [f"{noun} của {ref} màu gì ?", f"{noun} của {ref} có màu gì ?"])
        other.append((q, f"{noun} màu {s['color']}", "sign_colour"))
        # What it sells (the kind word is scene text).
        other.append((f"{ref} bán gì ?", f"{ref} bán {kind.sells}", "sells"))
        # Side of a named shop.
        if not single:
            q = _pick(rng, [f"cửa hàng {name} ở bên nào ?", f"cửa hàng {name} nằm ở phía nào ?"])
            where = "ở giữa" if s["side"] == "giữa" else f"ở {_side_phrase(s['side'])}"
            other.append((q, f"cửa hàng {name} nằm {where}", "shop_position"))
        if s["phone"] is not None:
            other.append((f"số điện thoại của {ref} là gì ?", f"số điện thoại là {s['phone']}", "phone"))
    if spec["street"] is not None:
        q = _pick(rng, ["con đường này tên là gì ?", "đây là đường nào ?"])
        other.append((q, f"đây là đường {spec['street']['name']}", "street"))
    return name_qas, other


def _object_qas(spec: dict, rng: np.random.Generator) -> list[tuple[str, str, str]]:
    """Non-text QAs as (question, answer, kind) triples (kinds: :data:`NON_TEXT_KINDS`)."""
    objs = spec["objects"]
    qas: list[tuple[str, str, str]] = []
    by_kind: dict[str, list[dict]] = {}
    for o in objs:
        by_kind.setdefault(o["kind"], []).append(o)
    for key, group in by_kind.items():
        noun = _OBJECT_BY_KEY[key].noun
        n = len(group)
        if n > 10:
            raise AssertionError(f"synthetic_openvivqa: {n} objects of kind {key} exceed the guideline's ten")
        q = _pick(rng, [f"có bao nhiêu {noun} ?", f"trong ảnh có bao nhiêu {noun} ?", f"có mấy {noun} ?"])
        qas.append((q, f"có {COUNT_WORDS[n - 1]} {noun}", "count"))
        # Colour of a unique object (of the image, or of its side).
        def colour_qa(o: dict, where: str) -> tuple[str, str, str]:
            if key == "person":
                subj = f"người {where}".strip()
                return (f"{subj} mặc áo màu gì ?", f"{subj} mặc áo màu {o['color']}", "colour")
            subj = f"{noun} {where}".strip()
            return (_pick(rng, [f"{subj} có màu gì ?", f"{subj} màu gì ?"]), f"{subj} có màu {o['color']}",
                    "colour")
        if n == 1:
            qas.append(colour_qa(group[0], "trong ảnh" if key == "person" else ""))
        else:
            for side in ("trái", "phải"):
                on_side = [o for o in group if o["side"] == side]
                if len(on_side) == 1:
                    qas.append(colour_qa(on_side[0], f"bên {side}"))
        # Side of an object unique by (kind, colour).
        col_count = Counter(o["color"] for o in group)
        for o in group:
            if col_count[o["color"]] == 1:
                subj = f"người mặc áo màu {o['color']}" if key == "person" else f"{noun} màu {o['color']}"
                q = _pick(rng, [f"{subj} ở bên nào ?", f"{subj} nằm ở phía nào ?"])
                qas.append((q, f"{subj} ở bên {o['side']}", "position"))
    n_signs = len(spec["signs"])
    q = _pick(rng, ["có bao nhiêu cửa hàng ?", "có mấy cửa hàng trong ảnh ?"])
    qas.append((q, f"có {COUNT_WORDS[n_signs - 1]} cửa hàng", "shop_count"))
    return qas


def _make_qas(spec: dict, rng: np.random.Generator, min_qas: int, max_qas: int) -> list[dict]:
    """3-5 QAs, about half text QAs, always one shop-name question (the copying target)."""
    name_qas, text_other = _text_qas(spec, rng)
    non_text = _object_qas(spec, rng)
    n = int(rng.integers(min_qas, max_qas + 1))
    n_text = n // 2 + (int(rng.random() < 0.5) if n % 2 else 0)
    n_text = max(1, n_text)
    chosen_text = [name_qas[int(rng.integers(len(name_qas)))]]
    rest_text = [qa for qa in name_qas + text_other if qa != chosen_text[0]]
    rest_text = [rest_text[i] for i in rng.permutation(len(rest_text))]
    non_text = [non_text[i] for i in rng.permutation(len(non_text))]
    chosen_text += rest_text[: n_text - 1]
    chosen_non = non_text[: n - len(chosen_text)]
    if len(chosen_text) + len(chosen_non) < n:  # not enough non-text candidates: fill with text ones
        chosen_text += rest_text[n_text - 1: n_text - 1 + n - len(chosen_text) - len(chosen_non)]
    qas, seen = [], set()
    for qa_type, group in ((1, chosen_text), (0, chosen_non)):
        for q, a, kind in group:
            q, a = normalize_text(q), normalize_text(a)
            if q in seen:
                continue
            seen.add(q)
            qas.append({"question": q, "answers": [a], "qa_type": qa_type, "kind": kind})
    order = rng.permutation(len(qas))
    return [qas[i] for i in order]


# ----------------------------------------------------------------------------------------------------------
# OCR noise and public API
# ----------------------------------------------------------------------------------------------------------

_VI_LETTERS = ("abcdeghiklmnopqrstuvxyăâđêôơư"
               "àáảãạằắẳẵặầấẩẫậèéẻẽẹềếểễệìíỉĩịòóỏõọồốổỗộờớởỡợùúủũụừứửữựỳýỷỹỵ")


def apply_ocr_noise(tokens: Sequence[str], boxes: np.ndarray, rng: np.random.Generator, drop_prob: float,
                    sub_prob: float, box_jitter: float) -> tuple[list[str], np.ndarray, dict[str, int]]:
    """Simulates recognition errors on ground-truth OCR.

    Args:
        tokens: normalized tokens, length ``num_ocr``.
        boxes: ``(num_ocr, 4)`` float xyxy in [0, 1].
        rng: the image's noise generator (stream 1 of :func:`image_rng`).
        drop_prob: probability a token is removed.
        sub_prob: probability a token gets one character substituted (letter by letter, digit by digit).
        box_jitter: Gaussian std of each coordinate as a fraction of the box width/height.

    Returns:
        (tokens, ``(num_kept, 4)`` float32 boxes, counters ``{"dropped", "substituted"}``). Every random draw
        is made for every token whatever the probabilities, so results depend only on the seed.

    Raises:
        ValueError: if a probability is outside [0, 1], the jitter is negative, or shapes disagree.
    """
    for name, p in (("ocr_drop_prob", drop_prob), ("ocr_sub_prob", sub_prob)):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"synthetic_openvivqa: {name}={p} is not a probability")
    if box_jitter < 0:
        raise ValueError(f"synthetic_openvivqa: ocr_box_jitter={box_jitter} must be >= 0")
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    if len(tokens) != len(boxes):
        raise ValueError(f"synthetic_openvivqa: {len(tokens)} OCR tokens but {len(boxes)} boxes")
    out_t, out_b = [], []
    stats = {"dropped": 0, "substituted": 0}
    for tok, box in zip(tokens, boxes):
        u_drop, u_sub, u_pos, u_chr = rng.random(4)
        noise = rng.normal(size=4)
        if u_drop < drop_prob:
            stats["dropped"] += 1
            continue
        if u_sub < sub_prob and tok:
            pos = int(u_pos * len(tok))
            ch = tok[pos]
            if ch.isdigit():
                pool = [d for d in "0123456789" if d != ch]
            elif ch.isalpha():
                pool = [c for c in _VI_LETTERS if c != ch]
            else:
                pool = []
            if pool:
                cand = normalize_text(tok[:pos] + pool[int(u_chr * len(pool))] + tok[pos + 1:])
                if cand and " " not in cand:
                    tok = cand
                    stats["substituted"] += 1
        if box_jitter > 0:
            bw, bh = box[2] - box[0], box[3] - box[1]
            box = box + noise * box_jitter * np.array([bw, bh, bw, bh])
            box = np.clip(box, 0.0, 1.0)
            x0, x1 = sorted((box[0], box[2]))
            y0, y1 = sorted((box[1], box[3]))
            eps = 1e-3
            if x1 - x0 < eps:
                x0, x1 = (min(x0, 1 - eps), min(x0, 1 - eps) + eps)
            if y1 - y0 < eps:
                y0, y1 = (min(y0, 1 - eps), min(y0, 1 - eps) + eps)
            box = np.array([x0, y0, x1, y1])
        out_t.append(tok)
        out_b.append(box)
    return out_t, np.asarray(out_b, np.float32).reshape(-1, 4), stats


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
