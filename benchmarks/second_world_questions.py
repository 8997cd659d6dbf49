"""Questions of the second learnability world (``benchmarks/second_world.py``) about one
:class:`second_world_scene.Scene`, in English and Vietnamese, one per kind of :data:`KINDS` where the scene allows.

Kinds (``kind`` column of the CSV files; every yes/no kind also asks the negated form):

=================  =================================================================  ===========================
kind               English / Vietnamese template                                      answers
=================  =================================================================  ===========================
``verify_colour``  is the circle red ? / is the circle not red ?                      yes, no / có, không,
                   hình tròn có màu đỏ không ? / hình tròn không có màu đỏ , đúng     đúng, sai
                   không ?
``verify_shape``   is the red shape a circle ? / hình màu đỏ có phải là hình tròn      as above
                   không ?
``verify_size``    is the red circle large ? / hình tròn màu đỏ có lớn không ?         as above
``verify_text``    is the word milk written in the picture ? / trong ảnh có chữ milk  as above
                   không ?
``exist``          is there a red circle ? / is there no red circle ? / có hình tròn   as above
                   màu đỏ nào không ?
``count``          how many red circles are there ? / có bao nhiêu hình tròn màu      one ... six / một ... sáu
                   đỏ ?  (at least one shape shares a colour or a kind but not both)
``compare_colour`` are the circle and the square the same colour ? / ... different    yes, no / có, không
                   colours ? / hình tròn và hình vuông có cùng màu không ?
``compare_count``  are there more circles than squares ? / ... fewer ... ? / có       as above
                   nhiều hình tròn hơn hình vuông không ? (never equal counts)
``relation``       what is left of the red circle ? / bên trái hình tròn màu đỏ là    blue square, nothing /
                   gì ? (right of, above, below; ``pair`` scenes only)                hình vuông màu xanh dương,
                                                                                      không có gì
=================  =================================================================  ===========================

A shape is named by the fewest of its other attributes that pick it out alone in the scene (``the circle``,
``the small circle``, ``the red shape``); a question whose object cannot be named so is not asked. For each kind
the answer's class (yes or no; for ``relation`` a shape or nothing; for ``count`` the number) is drawn first and
a question with that answer is made when the scene has one, else one with the other class; the splits are then
balanced exactly (``second_world.balance``). Each question is English or Vietnamese with probability 1/2.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from second_world_scene import COLOURS, SHAPES, WORDS, Scene, Shape

__all__ = ["KINDS", "YES_NO_KINDS", "Question", "questions", "COLOUR_VI", "SHAPE_VI", "SIZE_VI", "NUMBERS"]

KINDS = ("verify_colour", "verify_shape", "verify_size", "verify_text", "exist", "count", "compare_colour",
         "compare_count", "relation")
#: Kinds whose answer is yes or no (``relation``: a shape or nothing; ``count``: a number).
YES_NO_KINDS = KINDS[:5] + KINDS[6:8]
COLOUR_VI = {"red": "đỏ", "green": "xanh lá", "blue": "xanh dương", "yellow": "vàng", "purple": "tím",
             "orange": "cam"}
SHAPE_VI = {"circle": "hình tròn", "square": "hình vuông", "triangle": "hình tam giác", "star": "ngôi sao"}
SIZE_VI = {"small": "nhỏ", "large": "lớn"}
#: Count -> (English, Vietnamese) number word.
NUMBERS = {1: ("one", "một"), 2: ("two", "hai"), 3: ("three", "ba"), 4: ("four", "bốn"), 5: ("five", "năm"),
           6: ("six", "sáu")}
_RELATIONS = {"left": ("left of", "bên trái"), "right": ("right of", "bên phải"),
              "above": ("above", "phía trên"), "below": ("below", "phía dưới")}


@dataclasses.dataclass(frozen=True)
class Question:
    """One question: ``kind``, ``language`` (``en`` / ``vi``), the text, the answer, and ``label``: the answer's
    class that the splits are balanced on (``yes`` / ``no``; ``shape`` / ``nothing``; the count)."""

    kind: str
    language: str
    question: str
    answer: str
    label: str


def _en(shape: Shape, attrs: tuple[str, ...]) -> str:
    """``the [size] [colour] shape-or-'shape'`` naming ``shape`` by ``attrs``."""
    words = [shape.size] if "size" in attrs else []
    words += [shape.colour] if "colour" in attrs else []
    return "the " + " ".join(words + [shape.shape if "shape" in attrs else "shape"])


def _vi(shape: Shape, attrs: tuple[str, ...]) -> str:
    """``hình tròn [nhỏ] [màu đỏ]`` (``hình`` when the kind is not named) naming ``shape`` by ``attrs``."""
    words = [SHAPE_VI[shape.shape] if "shape" in attrs else "hình"]
    words += [SIZE_VI[shape.size]] if "size" in attrs else []
    words += ["màu " + COLOUR_VI[shape.colour]] if "colour" in attrs else []
    return " ".join(words)


def _namings(scene: Scene, shape: Shape, options: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """The attribute sets of ``options`` that pick ``shape`` out alone among the scene's shapes."""
    out = []
    for attrs in options:
        same = [s for s in scene.shapes if all(getattr(s, a) == getattr(shape, a) for a in attrs)]
        if same == [shape]:
            out.append(attrs)
    return out


def _yes_no(lang: str, yes: bool, negated: bool) -> str:
    if lang == "en":
        return "yes" if yes else "no"
    if negated:
        return "đúng" if yes else "sai"
    return "có" if yes else "không"


class _Asker:
    """Makes the questions of one scene from one ``numpy.random.Generator`` (module doc)."""

    def __init__(self, scene: Scene, rng: np.random.Generator):
        self.scene, self.rng = scene, rng

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def named(self, excluded: str, options: list[tuple[str, ...]]):
        """A random (shape, attrs) whose ``attrs`` name it alone, or None; ``excluded`` is the asked attribute."""
        pairs = [(s, a) for s in self.scene.shapes for a in _namings(self.scene, s, options) if excluded not in a]
        return self.pick(pairs) if pairs else None

    def verify(self, kind: str, want_yes: bool, lang: str) -> Question | None:
        """``verify_colour`` / ``verify_shape`` / ``verify_size``: the named shape has the asked value?"""
        attr = kind.split("_")[1]
        options = {"colour": [("shape",), ("size", "shape")], "shape": [("colour",), ("size", "colour")],
                   "size": [("shape",), ("colour", "shape")]}[attr]
        found = self.named(attr, options)
        if found is None:
            return None
        shape, attrs = found
        negated = bool(self.rng.random() < 0.5)
        truth = want_yes != negated
        values = {"colour": list(COLOURS), "shape": list(SHAPES), "size": ["small", "large"]}[attr]
        value = getattr(shape, attr) if truth else self.pick([v for v in values if v != getattr(shape, attr)])
        if lang == "en":
            ref, not_ = _en(shape, attrs), " not" if negated else ""
            text = {"colour": f"is {ref}{not_} {value} ?", "size": f"is {ref}{not_} {value} ?",
                    "shape": f"is {ref}{not_} a {value} ?"}[attr]
        else:
            ref = _vi(shape, attrs)
            v = {"colour": "màu " + COLOUR_VI.get(value, ""), "shape": "là " + SHAPE_VI.get(value, ""),
                 "size": SIZE_VI.get(value, "")}[attr]
            if negated:
                text = {"colour": f"{ref} không có {v} , đúng không ?",
                        "shape": f"{ref} không phải {v} , đúng không ?",
                        "size": f"{ref} không {v} , đúng không ?"}[attr]
            else:
                text = {"colour": f"{ref} có {v} không ?", "shape": f"{ref} có phải {v} không ?",
                        "size": f"{ref} có {v} không ?"}[attr]
        return Question(kind, lang, text, _yes_no(lang, want_yes, negated), "yes" if want_yes else "no")

    def verify_text(self, want_yes: bool, lang: str) -> Question:
        """Is the word written in the picture? (a word of another scene when the answer is false)"""
        negated = bool(self.rng.random() < 0.5)
        truth = want_yes != negated
        if truth and self.scene.word is None:
            truth, want_yes = False, not want_yes
        word = self.scene.word if truth else self.pick([w for w in WORDS if w != self.scene.word])
        if lang == "en":
            text = f"is the word {word}{' not' if negated else ''} written in the picture ?"
        else:
            text = f"trong ảnh {'không có' if negated else 'có'} chữ {word}{' , đúng' if negated else ''} không ?"
        return Question("verify_text", lang, text, _yes_no(lang, want_yes, negated), "yes" if want_yes else "no")

    def _description(self, attrs: tuple[str, ...], values: tuple[str, ...], lang: str, plural: bool) -> str:
        v = dict(zip(attrs, values))
        if lang == "en":
            noun = v.get("shape", "shape") + ("s" if plural else "")
            return " ".join(([v["colour"]] if "colour" in v else []) + [noun])
        return " ".join([SHAPE_VI[v["shape"]] if "shape" in v else "hình"]
                        + (["màu " + COLOUR_VI[v["colour"]]] if "colour" in v else []))

    def exist(self, want_yes: bool, lang: str) -> Question | None:
        """Is there a shape of the described colour and/or kind (a present one, or an absent mix of present
        values: a distractor)?"""
        attrs = self.pick([("colour", "shape"), ("colour", "shape"), ("shape",), ("colour",)])
        present = {tuple(getattr(s, a) for a in attrs) for s in self.scene.shapes}
        pool = {"colour": list(COLOURS), "shape": list(SHAPES)}
        everything = [(c, s) for c in pool["colour"] for s in pool["shape"]] if len(attrs) == 2 else [
            (x,) for x in pool[attrs[0]]]
        negated = bool(self.rng.random() < 0.5)
        truth = want_yes != negated
        if truth:
            values = self.pick(sorted(present))
        else:
            absent = [v for v in everything if v not in present]
            near = [v for v in absent if len(v) == 2 and any(v[0] == p[0] or v[1] == p[1] for p in present)]
            values = self.pick(near or absent)
        desc = self._description(attrs, values, lang, plural=False)
        if lang == "en":
            text = f"is there {'no' if negated else ('an' if desc[0] in 'aeiou' else 'a')} {desc} ?"
        else:
            text = f"không có {desc} nào , đúng không ?" if negated else f"có {desc} nào không ?"
        return Question("exist", lang, text, _yes_no(lang, want_yes, negated), "yes" if want_yes else "no")

    def count(self, lang: str) -> Question | None:
        """How many shapes of a described colour and/or kind, with at least one shape that is not one of them
        but shares a value with them (two values described) or differs (one described)."""
        options = []
        for attrs in (("colour", "shape"), ("shape",), ("colour",)):
            for values in sorted({tuple(getattr(s, a) for a in attrs) for s in self.scene.shapes}):
                match = [s for s in self.scene.shapes if tuple(getattr(s, a) for a in attrs) == values]
                others = [s for s in self.scene.shapes if s not in match]
                near = [s for s in others if len(attrs) == 1 or s.colour == values[0] or s.shape == values[1]]
                if near:
                    options.append((len(match), attrs, values))
        if not options:
            return None
        # The count first, larger ones favoured (weight n^2), so that counts are as even as the scenes allow.
        ns = np.array(sorted({o[0] for o in options}))
        n = int(self.rng.choice(ns, p=ns ** 2 / np.sum(ns ** 2)))
        _, attrs, values = self.pick([o for o in options if o[0] == n])
        desc = self._description(attrs, values, lang, plural=True)
        text = f"how many {desc} are there ?" if lang == "en" else f"có bao nhiêu {desc} ?"
        return Question("count", lang, text, NUMBERS[n][lang == "vi"], str(n))

    def compare_colour(self, want_yes: bool, lang: str) -> Question | None:
        """Are two named shapes the same colour (or: different colours)?"""
        options = [("shape",), ("size", "shape")]
        named = [(s, a) for s in self.scene.shapes for a in _namings(self.scene, s, options)]
        pairs = [(p, q) for i, p in enumerate(named) for q in named[i + 1:] if p[0] is not q[0]]
        if not pairs:
            return None
        different = bool(self.rng.random() < 0.5)
        truth = want_yes != different  # truth: the same colour
        fitting = [(p, q) for p, q in pairs if (p[0].colour == q[0].colour) == truth]
        if not fitting:
            return None
        (a, aa), (b, ba) = self.pick(fitting)
        if lang == "en":
            text = f"are {_en(a, aa)} and {_en(b, ba)} {'different colours' if different else 'the same colour'} ?"
        else:
            text = f"{_vi(a, aa)} và {_vi(b, ba)} có {'khác màu' if different else 'cùng màu'} không ?"
        return Question("compare_colour", lang, text, _yes_no(lang, want_yes, False), "yes" if want_yes else "no")

    def compare_count(self, want_yes: bool, lang: str) -> Question | None:
        """Are there more (or: fewer) shapes of one kind (or colour) than of another? Never equal counts."""
        attr = self.pick(["shape", "colour"])
        values = list(SHAPES) if attr == "shape" else list(COLOURS)
        counts = {v: sum(getattr(s, attr) == v for s in self.scene.shapes) for v in values}
        fewer = bool(self.rng.random() < 0.5)
        pairs = [(x, y) for x in values for y in values if counts[x] != counts[y] and counts[x] + counts[y] > 0
                 and ((counts[x] > counts[y]) != fewer) == want_yes]
        if not pairs:
            return None
        x, y = self.pick(pairs)
        dx, dy = (self._description((attr,), (v,), lang, plural=True) for v in (x, y))
        if lang == "en":
            text = f"are there {'fewer' if fewer else 'more'} {dx} than {dy} ?"
        else:
            text = f"có {'ít' if fewer else 'nhiều'} {dx} hơn {dy} không ?"
        return Question("compare_count", lang, text, _yes_no(lang, want_yes, False), "yes" if want_yes else "no")

    def relation(self, want_shape: bool, lang: str) -> Question | None:
        """What is left of / right of / above / below a named shape of a pair: the other shape, or nothing."""
        if self.scene.layout != "pair":
            return None
        a, b = self.scene.shapes  # a before b along the pair's axis
        horizontal = abs(b.cx - a.cx) > abs(b.cy - a.cy)
        anchor, other = (a, b) if self.rng.random() < 0.5 else (b, a)
        toward = ("left" if other is a else "right") if horizontal else ("above" if other is a else "below")
        attrs = self.pick(_namings(self.scene, anchor, [("shape",), ("colour", "shape"), ("colour",)]))
        relation = toward if want_shape else self.pick([r for r in _RELATIONS if r != toward])
        if lang == "en":
            text = f"what is {_RELATIONS[relation][0]} {_en(anchor, attrs)} ?"
            answer = f"{other.colour} {other.shape}" if want_shape else "nothing"
        else:
            text = f"{_RELATIONS[relation][1]} {_vi(anchor, attrs)} là gì ?"
            answer = f"{SHAPE_VI[other.shape]} màu {COLOUR_VI[other.colour]}" if want_shape else "không có gì"
        return Question("relation", lang, text, answer, "shape" if want_shape else "nothing")


def questions(scene: Scene, rng: np.random.Generator) -> list[Question]:
    """At most one question per kind of :data:`KINDS` about ``scene`` (module doc), drawn from ``rng``; two of
    ``relation``, one of each answer class, in the two languages."""
    ask = _Asker(scene, rng)
    out = []
    for kind in KINDS:
        lang = "vi" if rng.random() < 0.5 else "en"
        want = bool(rng.random() < 0.5)
        if kind in ("verify_colour", "verify_shape", "verify_size"):
            q = ask.verify(kind, want, lang) or None
        elif kind == "verify_text":
            q = ask.verify_text(want, lang)
        elif kind == "exist":
            q = ask.exist(want, lang)
        elif kind == "count":
            q = ask.count(lang)
        elif kind == "compare_colour":
            q = ask.compare_colour(want, lang) or ask.compare_colour(not want, lang)
        elif kind == "compare_count":
            q = ask.compare_count(want, lang) or ask.compare_count(not want, lang)
        else:  # both answer classes, in the two languages
            q = ask.relation(want, lang)
            if q is not None:
                out.append(q)
                q = ask.relation(not want, "vi" if lang == "en" else "en")
        if q is not None:
            out.append(q)
    return out
