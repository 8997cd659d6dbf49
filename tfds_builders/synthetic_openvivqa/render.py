"""Drawing of the synthetic OpenViVQA generator: fonts, signboard text lines, objects and the whole scene
(:func:`_draw_scene`: pixels plus the word-level ground-truth OCR boxes of every rendered piece).
"""

from __future__ import annotations

import functools
import os

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from openvivqa_jax.text.normalize import normalize_text
from tfds_builders.synthetic_openvivqa.scene import COLORS, Line, _OBJECT_BY_KEY, _line_text, _line_tokens

__all__ = ["FONT_PATH", "SIGN_TEXT_COLORS"]

#: Font with Vietnamese glyphs (DejaVu Sans Bold). Override with the ``OPENVIVQA_FONT`` environment variable.
FONT_PATH = os.environ.get("OPENVIVQA_FONT", "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf")
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
