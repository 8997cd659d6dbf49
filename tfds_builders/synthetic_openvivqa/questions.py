"""Question templates of the synthetic OpenViVQA generator (OpenViVQA guideline, paper Table 1 and
§3.2.4): text QAs about scene text, non-text QAs about object colours, counts and sides, each with its
template ``kind``; answers are a deterministic function of (scene, question).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

import numpy as np

from openvivqa_jax.text.normalize import normalize_text
from tfds_builders.synthetic_openvivqa.scene import COUNT_WORDS, SHOP_KINDS, _OBJECT_BY_KEY

__all__ = []

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
