"""Scenes of the second learnability world (``benchmarks/second_world.py``): flat coloured shapes and one printed
word on a plain, graded or grainy background, drawn with PIL; independent of ``tfds_builders/synthetic_openvivqa``.

A scene is a :class:`Scene`: its canvas size (176-304 pixels wide, height 0.6-1.33 times the width), a
background, 2 to 6 :class:`Shape` objects (one of :data:`COLOURS`, :data:`SHAPES` and :data:`SIZES`; no two
overlap) and, in :data:`WORD_SHARE` of the scenes, one word of :data:`WORDS` printed dark on a light label. Two
kinds of layout:

* ``pair`` (:data:`PAIR_SHARE` of the scenes): exactly two shapes, side by side or one above the other, their
  centres apart by at least a third of the canvas along that axis and within :data:`PAIR_CROSS_OFFSET` of it
  across, so that "left of", "right of", "above" and "below" each have one answer (the other shape, or none);
* ``group``: 3 to 6 shapes placed at random, their colours drawn from 2-3 and their shapes from 2-3 of the
  scene's own choice, so that a scene holds several shapes of one colour or one kind (counting with
  distractors, same-colour and more-than comparisons).

Sizes: a small shape's circumradius is 6.5-8.5% of the canvas's shorter side, a large one's 14-17% (twice as
large at the least; after the model's resize to 128x96 a small shape is still about 12 pixels across). Words are
drawn in DejaVu Sans Bold at 12% of the shorter side (16-34 pixels), on a label padded by a third of the text
height, because the builder's ``detector+tesseract`` OCR reads such words exactly (all 116 words of seed 0's
test pictures; docs/results.md, "A second world"). Every random draw comes from the ``numpy.random.Generator``
given, so a scene is a function of its seed.
"""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np
from PIL import Image, ImageDraw, ImageFont

__all__ = ["COLOURS", "SHAPES", "SIZES", "WORDS", "Shape", "Scene", "sample_scene", "render", "FONT_PATH"]

#: Colour name -> RGB: saturated, far apart, never the light desaturated backgrounds or the dark text.
COLOURS = {"red": (215, 40, 40), "green": (40, 160, 60), "blue": (40, 80, 215), "yellow": (235, 200, 30),
           "purple": (140, 60, 180), "orange": (240, 130, 30)}
#: Shape names (``square`` and ``triangle`` are drawn with a small random rotation, ``star`` has five points).
SHAPES = ("circle", "square", "triangle", "star")
#: Size name -> circumradius range as a fraction of the canvas's shorter side.
SIZES = {"small": (0.065, 0.085), "large": (0.14, 0.17)}
#: The words printed on labels: short English and Vietnamese words that the builder's default OCR engine
#: (``detector+tesseract``, ``vie+eng``) reads exactly at the drawn size.
WORDS = ("cat", "sun", "tree", "book", "fish", "moon", "milk", "rain", "door", "cake", "bird", "lamp", "frog",
         "ship", "king", "phở", "mèo", "trà", "sách", "nhà", "hoa", "bánh", "cơm", "đèn", "sông", "chợ")
#: Share of the scenes with a word, and of the ``pair`` layouts.
WORD_SHARE, PAIR_SHARE = 0.6, 0.4
#: A pair's largest offset across its axis, as a fraction of the canvas along that axis.
PAIR_CROSS_OFFSET = 0.08
#: The font of the words (any TrueType font with Vietnamese glyphs; ``SECOND_WORLD_FONT`` overrides it).
FONT_PATH = os.environ.get("SECOND_WORLD_FONT", "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf")
_MARGIN = 4  # pixels kept free between two things drawn


@dataclasses.dataclass(frozen=True)
class Shape:
    """One drawn shape: ``colour``, ``shape``, ``size`` (names), centre ``(cx, cy)`` and circumradius ``r`` in
    pixels of the canvas, and ``angle`` (degrees) of its rotation."""

    colour: str
    shape: str
    size: str
    cx: float
    cy: float
    r: float
    angle: float = 0.0

    def box(self) -> tuple[float, float, float, float]:
        """The ``(x0, y0, x1, y1)`` pixel box of the shape's circumscribed circle."""
        return self.cx - self.r, self.cy - self.r, self.cx + self.r, self.cy + self.r


@dataclasses.dataclass
class Scene:
    """One picture: ``width`` x ``height`` pixels, ``layout`` (``pair`` or ``group``), ``background`` (kind and
    colours), ``shapes``, and ``word`` (None or the printed word) with its label's pixel box ``label``."""

    width: int
    height: int
    layout: str
    background: dict
    shapes: list[Shape]
    word: str | None = None
    label: tuple[float, float, float, float] | None = None


def _light_colour(rng: np.random.Generator) -> tuple[int, int, int]:
    """A light, desaturated colour: value 0.78-0.95, saturation at most 0.2, any hue."""
    import colorsys

    r, g, b = colorsys.hsv_to_rgb(rng.random(), rng.uniform(0.0, 0.2), rng.uniform(0.78, 0.95))
    return int(r * 255), int(g * 255), int(b * 255)


def _overlaps(box, boxes) -> bool:
    x0, y0, x1, y1 = box
    return any(x0 < b[2] + _MARGIN and b[0] < x1 + _MARGIN and y0 < b[3] + _MARGIN and b[1] < y1 + _MARGIN
               for b in boxes)


def _label_box(rng, width, height, word, taken):
    """A free pixel box for the word's label, or None after 50 tries."""
    font = _font(_font_px(width, height))
    x0, y0, x1, y1 = font.getbbox(word)
    pad = (y1 - y0) / 3 + 2
    w, h = x1 - x0 + 2 * pad, y1 - y0 + 2 * pad
    for _ in range(50):
        x, y = rng.uniform(2, width - w - 2), rng.uniform(2, height - h - 2)
        box = (x, y, x + w, y + h)
        if not _overlaps(box, taken):
            return box
    return None


def _font_px(width: int, height: int) -> int:
    return int(np.clip(round(0.12 * min(width, height)), 16, 34))


def _font(px: int) -> ImageFont.FreeTypeFont:
    if not os.path.isfile(FONT_PATH):
        raise FileNotFoundError(f"second world: font {FONT_PATH!r} not found; install fonts-dejavu-core or set "
                                "SECOND_WORLD_FONT to a TrueType font with Vietnamese glyphs")
    return ImageFont.truetype(FONT_PATH, px)


def _attributes(rng, n: int, layout: str) -> list[tuple[str, str, str]]:
    """``n`` (colour, shape, size) triples; a group draws from 2-3 colours and 2-3 shapes of its own, a pair's
    two differ in colour or shape."""
    names, shapes = list(COLOURS), list(SHAPES)
    if layout == "group":
        names = list(rng.choice(names, size=int(rng.integers(2, 4)), replace=False))
        shapes = list(rng.choice(shapes, size=int(rng.integers(2, 4)), replace=False))
    while True:
        out = [(str(rng.choice(names)), str(rng.choice(shapes)), str(rng.choice(list(SIZES)))) for _ in range(n)]
        if layout == "group" or out[0][:2] != out[1][:2]:  # a pair's two shapes differ in colour or kind
            return out


def _place_pair(rng, width, height, attrs) -> list[Shape] | None:
    """Two shapes along a random axis (module doc), the first one before the second, or None if they do not
    fit."""
    short = min(width, height)
    radii = [short * rng.uniform(*SIZES[a[2]]) for a in attrs]
    horizontal = bool(rng.random() < 0.5)
    along, across = (width, height) if horizontal else (height, width)
    gap = max(along / 3, radii[0] + radii[1] + _MARGIN)
    lo, hi = radii[0] + 2, along - radii[1] - 2  # first centre >= lo, second <= hi
    if hi - lo < gap:
        return None
    a0 = rng.uniform(lo, hi - gap)
    a1 = rng.uniform(a0 + gap, hi)
    rmax = max(radii)
    c0 = rng.uniform(rmax + 2, across - rmax - 2)
    c1 = float(np.clip(c0 + rng.uniform(-1, 1) * PAIR_CROSS_OFFSET * across, rmax + 2, across - rmax - 2))
    centres = [(a0, c0), (a1, c1)] if horizontal else [(c0, a0), (c1, a1)]
    return [Shape(*attrs[k], cx=float(centres[k][0]), cy=float(centres[k][1]), r=float(radii[k]),
                  angle=float(rng.uniform(-8, 8))) for k in range(2)]


def _place_group(rng, width, height, attrs) -> list[Shape] | None:
    """Shapes at random free places, or None if one does not fit after 100 tries."""
    short, out, boxes = min(width, height), [], []
    for colour, shape, size in attrs:
        r = short * rng.uniform(*SIZES[size])
        for _ in range(100):
            cx, cy = rng.uniform(r + 2, width - r - 2), rng.uniform(r + 2, height - r - 2)
            s = Shape(colour, shape, size, float(cx), float(cy), float(r), float(rng.uniform(-8, 8)))
            if not _overlaps(s.box(), boxes):
                out.append(s)
                boxes.append(s.box())
                break
        else:
            return None
    return out


def sample_scene(rng: np.random.Generator) -> Scene:
    """A random :class:`Scene` (module doc), drawn from ``rng`` alone (tries again until everything fits)."""
    while True:
        width = int(rng.integers(176, 305))
        height = int(np.clip(round(width * rng.uniform(0.6, 1.33)), 120, 320))
        layout = "pair" if rng.random() < PAIR_SHARE else "group"
        n = 2 if layout == "pair" else int(rng.integers(3, 7))
        attrs = _attributes(rng, n, layout)
        shapes = (_place_pair if layout == "pair" else _place_group)(rng, width, height, attrs)
        if shapes is None:
            continue
        kind = str(rng.choice(["plain", "gradient", "grain"]))
        background = {"kind": kind, "colours": [_light_colour(rng), _light_colour(rng)],
                      "angle": float(rng.uniform(0, 2 * math.pi)), "seed": int(rng.integers(2 ** 31))}
        scene = Scene(width, height, layout, background, shapes)
        if rng.random() < WORD_SHARE:
            word = str(rng.choice(WORDS))
            label = _label_box(rng, width, height, word, [s.box() for s in shapes])
            if label is None:
                continue
            scene.word, scene.label = word, label
        return scene


def _background(scene: Scene) -> np.ndarray:
    """The background's ``(height, width, 3)`` uint8 pixels: plain, a linear gradient between its two colours
    at its angle, or plain with Gaussian grain (standard deviation 4 grey levels)."""
    h, w, bg = scene.height, scene.width, scene.background
    c0, c1 = (np.array(c, np.float64) for c in bg["colours"])
    if bg["kind"] == "gradient":
        yy, xx = np.mgrid[0:h, 0:w]
        t = (xx / w - 0.5) * math.cos(bg["angle"]) + (yy / h - 0.5) * math.sin(bg["angle"])
        t = (t - t.min()) / max(t.max() - t.min(), 1e-9)
        img = c0[None, None] * (1 - t[..., None]) + c1[None, None] * t[..., None]
    else:
        img = np.broadcast_to(c0, (h, w, 3)).copy()
        if bg["kind"] == "grain":
            img += np.random.default_rng(bg["seed"]).normal(0, 4, img.shape)
    return np.clip(np.round(img), 0, 255).astype(np.uint8)


def _polygon(s: Shape) -> list[tuple[float, float]]:
    """The corners of a square, triangle or five-pointed star of circumradius ``s.r`` rotated by ``s.angle``."""
    if s.shape == "square":
        pts = [(math.cos(math.radians(45 + 90 * k)), math.sin(math.radians(45 + 90 * k))) for k in range(4)]
    elif s.shape == "triangle":
        pts = [(math.cos(math.radians(-90 + 120 * k)), math.sin(math.radians(-90 + 120 * k))) for k in range(3)]
    else:  # star: outer and inner corners alternate, inner radius 0.45
        pts = [(rad * math.cos(math.radians(-90 + 36 * k)), rad * math.sin(math.radians(-90 + 36 * k)))
               for k, rad in zip(range(10), [1.0, 0.45] * 5)]
    a = math.radians(s.angle)
    return [(s.cx + s.r * (x * math.cos(a) - y * math.sin(a)), s.cy + s.r * (x * math.sin(a) + y * math.cos(a)))
            for x, y in pts]


def render(scene: Scene, rng: np.random.Generator) -> Image.Image:
    """The scene's RGB picture; ``rng`` jitters each shape's colour (up to 12 levels per channel) and the
    label's and text's greys."""
    img = Image.fromarray(_background(scene))
    draw = ImageDraw.Draw(img)
    for s in scene.shapes:
        fill = tuple(int(np.clip(v + rng.integers(-12, 13), 0, 255)) for v in COLOURS[s.colour])
        if s.shape == "circle":
            draw.ellipse(s.box(), fill=fill)
        else:
            draw.polygon(_polygon(s), fill=fill)
    if scene.word:
        x0, y0, x1, y1 = scene.label
        draw.rectangle((x0, y0, x1, y1), fill=(int(rng.integers(244, 256)),) * 3)
        font = _font(_font_px(scene.width, scene.height))
        bx0, by0, _, by1 = font.getbbox(scene.word)
        pad = (by1 - by0) / 3 + 2
        draw.text((x0 + pad - bx0, y0 + pad - by0), scene.word, fill=(int(rng.integers(0, 40)),) * 3, font=font)
    return img
