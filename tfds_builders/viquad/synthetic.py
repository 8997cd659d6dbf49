"""A synthetic ViQuAD-format set: generated Vietnamese passages with answer spans, in SQuAD v1.1 JSON.

Made in memory (no file, no download) for the builder config ``synthetic``, so the reader trains on a fresh
machine. Every passage describes one invented town (a two-syllable name with tone marks: ``Hòa Lạc``,
``Thuỷ Nguyên``, written in both tone-mark conventions) in five to seven facts, in random order, plus two facts
about a neighbouring town of the same kinds (so a question is answered by matching its town, not its kind):

==============  ====================================================  ======================================
fact            sentence                                              question -> answer variants
==============  ====================================================  ======================================
province        ``X là một thị xã thuộc tỉnh P.``                     ``X thuộc tỉnh nào?`` -> ``tỉnh P``, ``P``
population      ``Dân số của X vào năm Y là N người.``                ``... là bao nhiêu?`` -> ``N người``, ``N``
founded         ``X được thành lập vào năm Y.``                       ``... vào năm nào?`` -> ``năm Y``, ``Y``
river           ``Sông R chảy qua phía D của X.``                     ``Sông nào ...?`` -> ``sông R``, ``R``
side            (the same sentence)                                   ``Sông R chảy qua phía nào của X?`` ->
                                                                      ``phía D``, ``D``
specialty       ``Đặc sản nổi tiếng của X là F.``                     ``... là gì?`` -> ``F``
ticket          ``Vé tham quan bảo tàng X giá 20.000đ.``              ``... giá bao nhiêu?`` -> ``20.000đ``
==============  ====================================================  ======================================

Numbers are written the Vietnamese way (``125.000``); a price is one word that normalization rewrites
(``20.000đ`` → ``20,000 đồng``); one passage in ten is in NFD and some put a line break between sentences, so
the reader's character offsets are exercised. Train, dev and test use disjoint town names (a test town
never occurs in training).

Answers: each question's first answer is one variant drawn at random (its ``answer_start`` where that text
begins in the passage); dev and test questions get three more, drawn the same way, as ViQuAD's Phase 5
collects three more answers per question, so the human-performance protocol applies (the variants differ by
a leading word, which costs EM but not all of F1).
"""

from __future__ import annotations

import random
import unicodedata

__all__ = ["SPLIT_SIZES", "make_split", "synthetic_dataset"]

#: Passages per split (about 4 questions each).
SPLIT_SIZES = {"train": 1500, "dev": 60, "test": 60}
_SEEDS = {"train": 11, "dev": 12, "test": 13}

_SYLLABLES = ("Hòa", "Hoà", "Bình", "Thủy", "Thuỷ", "Nguyên", "Phú", "Lạc", "Đông", "Sơn", "Hải", "Long", "An",
              "Khánh", "Tây", "Ninh", "Quảng", "Thái", "Hưng", "Yên", "Vĩnh", "Phước", "Lâm", "Giang", "Kiên",
              "Trà", "Mỹ", "Bạc", "Cẩm", "Đức", "Tân", "Châu", "Định", "Gò", "Xuân", "Diễn", "Kỳ", "Lộc", "Hội",
              "Nghĩa")
_PROVINCES = ("Hòa Bình", "Quảng Ninh", "Thanh Hóa", "Nghệ An", "Bắc Giang", "Lâm Đồng", "Khánh Hòa",
              "Đắk Lắk", "Tây Ninh", "Bến Tre", "Cà Mau", "Lào Cai", "Phú Thọ", "Hà Tĩnh", "Kiên Giang")
_RIVERS = ("Hồng", "Đà", "Mã", "Cả", "Lam", "Gianh", "Hương", "Thu Bồn", "Đồng Nai", "Tiền", "Hậu", "Lô",
           "Chảy", "Bứa", "Trà Khúc")
_SIDES = ("đông", "tây", "nam", "bắc")
_FOODS = ("bánh cuốn", "phở bò", "cà phê sữa", "bún chả", "chè sen", "nem chua", "cơm tấm", "bánh xèo",
          "gỏi cuốn", "bún bò", "mì Quảng", "cá kho tộ", "bánh đa cua", "xôi gấc")


def _number(n: int) -> str:
    return f"{n:,}".replace(",", ".")


def _facts(rng: random.Random, town: str) -> list[dict]:
    """The facts of one town: ``{"kind", "sentence", "question", "variants": [(answer, sentence offset)]}``."""
    province, river = rng.choice(_PROVINCES), rng.choice(_RIVERS)
    side, food = rng.choice(_SIDES), rng.choice(_FOODS)
    year, founded = rng.randint(1990, 2022), rng.randint(1400, 1980)
    people = rng.randint(8, 900) * 1000 + rng.choice((0, 0, rng.randint(1, 999)))
    price = rng.choice((10, 15, 20, 25, 30, 40, 50, 60)) * 1000

    def fact(kind, sentence, question, *answers, last=False):
        # The province ends its sentence, after the town's name: found from the right.
        return {"kind": kind, "sentence": sentence, "question": question,
                "variants": [(a, sentence.rindex(a) if last else sentence.index(a)) for a in answers]}

    s_pop = f"Dân số của {town} vào năm {year} là {_number(people)} người."
    s_river = f"Sông {river} chảy qua phía {side} của {town}."
    return [
        fact("province", f"{town} là một thị xã thuộc tỉnh {province}.", f"{town} thuộc tỉnh nào?",
             f"tỉnh {province}", province, last=True),
        fact("population", s_pop, f"Dân số của {town} vào năm {year} là bao nhiêu?",
             f"{_number(people)} người", _number(people)),
        fact("founded", f"{town} được thành lập vào năm {founded}.", f"{town} được thành lập vào năm nào?",
             f"năm {founded}", str(founded)),
        fact("river", s_river, f"Sông nào chảy qua phía {side} của {town}?", f"Sông {river}", river),
        fact("side", s_river, f"Sông {river} chảy qua phía nào của {town}?", f"phía {side}", side),
        fact("specialty", f"Đặc sản nổi tiếng của {town} là {food}.", f"Đặc sản nổi tiếng của {town} là gì?", food),
        fact("ticket", f"Vé tham quan bảo tàng {town} giá {_number(price)}đ.",
             f"Vé tham quan bảo tàng {town} giá bao nhiêu?", f"{_number(price)}đ"),
    ]


def _towns(split: str) -> list[str]:
    """The two-syllable town names of ``split``: every ordered pair of different syllables, dealt to the
    splits by a fixed shuffle (train 80%, dev 10%, test 10%; disjoint)."""
    def key(name: str) -> str:  # one key for the two tone-mark conventions (Hoà / Hòa, Thuỷ / Thủy)
        return unicodedata.normalize("NFC", name.lower()).replace("oà", "òa").replace("uỷ", "ủy")

    provinces = {key(p) for p in _PROVINCES}
    by_key: dict[str, str] = {}
    for a in _SYLLABLES:
        for b in _SYLLABLES:
            name = f"{a} {b}"
            if key(a) != key(b) and key(name) not in provinces:
                by_key.setdefault(key(name), name)
    names = sorted(by_key.values())
    random.Random(0).shuffle(names)
    n = len(names)
    cut = {"train": (0, int(0.8 * n)), "dev": (int(0.8 * n), int(0.9 * n)), "test": (int(0.9 * n), n)}[split]
    return names[cut[0]:cut[1]]


def make_split(split: str, num_passages: int | None = None, seed: int | None = None) -> dict:
    """One split in SQuAD v1.1 JSON form (module doc): ``{"version", "data": [{"title", "paragraphs":
    [{"context", "qas": [{"id", "question", "answers": [{"text", "answer_start"}]}]}]}]}``.

    Args:
      split: ``train``, ``dev`` or ``test`` (which town names, how many answers).
      num_passages: passages (default :data:`SPLIT_SIZES`).
      seed: the generator's seed (default fixed per split).
    """
    rng = random.Random(_SEEDS[split] if seed is None else seed)
    towns = _towns(split)
    n_answers = 1 if split == "train" else 4
    articles = []
    for p in range(SPLIT_SIZES[split] if num_passages is None else num_passages):
        town, other = rng.sample(towns, 2)
        facts = _facts(rng, town)
        keep = [f for f in facts if rng.random() < 0.8] or facts[:3]
        sentences = list(dict.fromkeys(f["sentence"] for f in keep))
        distract = list(dict.fromkeys(f["sentence"] for f in rng.sample(_facts(rng, other), 2)))
        order = sentences + [s for s in distract if s not in sentences]
        rng.shuffle(order)
        sep = [rng.choice((" ", " ", " ", "\n")) for _ in order]
        context = "".join(s + (sep[i] if i < len(order) - 1 else "") for i, s in enumerate(order))
        nfd = rng.random() < 0.1
        qas = []
        asked = rng.sample(keep, min(len(keep), rng.randint(3, 5)))
        for qi, f in enumerate(asked):
            base = sum(len(s) + 1 for s in order[:order.index(f["sentence"])])
            answers = []
            for _ in range(n_answers):
                text, off = rng.choice(f["variants"])
                start = base + off
                if nfd:  # offsets count NFD code points
                    start = len(unicodedata.normalize("NFD", context[:start]))
                    text = unicodedata.normalize("NFD", text)
                answers.append({"text": text, "answer_start": start})
            question = unicodedata.normalize("NFD", f["question"]) if nfd else f["question"]
            qas.append({"id": f"syn_{split}_{p:04d}_{qi}", "question": question, "answers": answers})
        if nfd:
            context = unicodedata.normalize("NFD", context)
        articles.append({"title": town, "paragraphs": [{"context": context, "qas": qas}]})
    return {"version": "synthetic-1.0", "data": articles}


def synthetic_dataset(sizes: dict | None = None) -> dict[str, dict]:
    """``{split: make_split(split)}`` for train, dev and test (``sizes`` overrides :data:`SPLIT_SIZES`)."""
    sizes = dict(SPLIT_SIZES, **(sizes or {}))
    return {s: make_split(s, sizes[s]) for s in ("train", "dev", "test")}
