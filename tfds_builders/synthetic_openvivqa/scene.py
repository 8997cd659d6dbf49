"""Scene sampling of the synthetic OpenViVQA generator: vocabulary, colours, shop and object kinds, the
split-disjoint shop-name pools, the config, per-image random generators, and the size-independent scene
specification (:func:`_sample_scene`: signboards, their text lines, street plate, banner, objects, facades,
coordinates as fractions of the image). See :mod:`tfds_builders.synthetic_openvivqa.generator` for the whole.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Sequence

import numpy as np

from openvivqa_jax.text.normalize import normalize_text

__all__ = [
    "BANNER_TEXT",
    "COLORS",
    "COUNT_WORDS",
    "GeneratorConfig",
    "Line",
    "NAME_SYLLABLES",
    "NON_TEXT_KINDS",
    "OBJECT_KINDS",
    "ObjectKind",
    "PHONE_PREFIXES",
    "Piece",
    "REGION_CLASSES",
    "REGION_FEATURE_DIM",
    "REGION_POOL",
    "SHOP_KINDS",
    "SHOP_NAME_POOLS",
    "SLOGANS",
    "SPLITS",
    "SPLIT_CODES",
    "STREETS",
    "ShopKind",
    "TEXT_KINDS",
    "image_rng",
    "split_of_name",
]

SPLITS = ("train", "validation", "test")
#: Integer code of each split, mixed into the per-image seed sequence.
SPLIT_CODES = {"train": 0, "validation": 1, "test": 2}


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


@dataclasses.dataclass(kw_only=True, eq=False)
class GeneratorConfig:
    """Sizes, seed and OCR noise of one synthetic dataset variant.

    Declared once: the TFDS builder's config (``SyntheticOpenVivqaConfig``) is this class plus
    ``tfds.core.BuilderConfig``'s name, version and description. Keyword-only fields, so that the builder
    config's required ``name`` may come first.

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
    """Samples everything about one image except pixels; coordinates are fractions of width/height.

    The draws happen in a fixed order (signboards, their third lines, street plate, banner, objects, facades),
    so one generator state always gives the same scene.

    Raises:
      ValueError: bad ``shop_names`` / ``num_signs`` / ``sign_colors``, or names too long for
        ``max_ocr_tokens``.
    """
    shop_names, n_signs = _sign_count(rng, shop_names, num_signs)
    signs, case, budget = _signboards(rng, split, n_signs, shop_names, sign_colors, max_ocr_tokens)
    budget = _third_lines(rng, signs, budget)
    street, banner, budget = _street_and_banner(rng, budget)
    objects, n_unplaced = _place_objects(rng)
    # Near-neutral facades (beige / grey / cream), never one of the twelve colours.
    facade = []
    for _ in range(4):
        base = int(rng.integers(195, 232))
        tint = rng.integers(-8, 9, size=3)
        facade.append(tuple(int(base + t) for t in tint))
    return {"signs": signs, "street": street, "banner": banner, "objects": objects, "case": case,
            "facade": facade, "n_unplaced": n_unplaced}


def _sign_count(rng: np.random.Generator, shop_names: Sequence[str] | None,
                num_signs: int | None) -> tuple[list[str] | None, int]:
    """The normalized ``shop_names`` (or None) and the number of signboards (drawn when neither is given).

    Raises:
      ValueError: not 1-3 distinct non-empty names, or a ``num_signs`` that disagrees or is not 1-3.
    """
    if shop_names is not None:
        shop_names = [normalize_text(n) for n in shop_names]
        if not 1 <= len(shop_names) <= 3 or any(not n for n in shop_names) or len(set(shop_names)) != len(shop_names):
            raise ValueError(f"render_scene: shop_names must be 1-3 distinct non-empty names, got {shop_names!r}")
        if num_signs is not None and num_signs != len(shop_names):
            raise ValueError(f"render_scene: num_signs={num_signs} but {len(shop_names)} shop_names given")
        return shop_names, len(shop_names)
    if num_signs is not None:
        if not 1 <= num_signs <= 3:
            raise ValueError(f"render_scene: num_signs must be 1, 2 or 3, got {num_signs}")
        return None, num_signs
    return None, int(rng.choice([1, 2, 3], p=[0.3, 0.4, 0.3]))


def _signboards(rng: np.random.Generator, split: str, n_signs: int, shop_names: list[str] | None,
                sign_colors: Sequence[str] | None, max_ocr_tokens: int) -> tuple[list[dict], str, int]:
    """The signboards (kind word and name lines, colour, box, side), their lettering case (``upper`` or
    ``title``) and the OCR token budget left for the other scene text.

    Raises:
      ValueError: ``sign_colors`` not ``n_signs`` guideline colours, or names beyond ``max_ocr_tokens``.
    """
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
    return signs, case, budget


def _third_lines(rng: np.random.Generator, signs: list[dict], budget: int) -> int:
    """Gives each signboard a third line (price, phone or slogan) while the token budget allows; returns the
    budget left."""
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
    return budget


def _street_and_banner(rng: np.random.Generator, budget: int) -> tuple[dict | None, dict | None, int]:
    """The optional street-name plate and "khai trương" banner (while the budget allows) and the budget left."""
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
    return street, banner, budget


def _place_objects(rng: np.random.Generator) -> tuple[list[dict], int]:
    """Objects of 2-4 kinds, per layer on non-overlapping intervals in the left [0.02, 0.44] or right
    [0.56, 0.98] zone; returns them and the number that found no free place (left out of the scene)."""
    color_names = list(COLORS)
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
    return objects, n_unplaced
