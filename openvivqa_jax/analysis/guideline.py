"""Guideline checker: one rule per row of the OpenViVQA paper's Table 1, plus the price form of §3.2.4.

Each rule takes the QAs of one split (:class:`~openvivqa_jax.analysis.records.QA`) and returns a
:class:`RuleResult`: the violating question ids (in input order), their count, the number of QAs (or images)
checked, and the ids per reason. All rules read lowercase normalized syllables
(:func:`~openvivqa_jax.analysis.records.syllables`) except :func:`rule_prices`, which must see the text before
normalization rewrites its prices.

==================  ===================================================  ============================================
rule                Table 1 row / source                                 violation
==================  ===================================================  ============================================
qas_per_image       Number of QAs: at least 3 QAs for each image         every QA of an image with fewer than 3
answer_complexity   Answer complexity: phrases or sentences, not words   an answer at the word level (linguistic.py)
question_type       Question type: no yes/no or selective questions      a yes/no or selective question
quantities          Quantities: in letters, not digits; at most 10       digits as a count; a count above ten
colours             Colors: only the 12 of :data:`GUIDELINE_COLORS`      a colour outside the list
directions          Directions (left and right)                          not checkable from text: QAs that use
                                                                         left/right are listed for review
prices              §3.2.4: prices written ``#,### đồng``                a price that ``normalize_prices`` rewrites
==================  ===================================================  ============================================

How each rule recognises its case is stated in its docstring; all are lexical heuristics over closed word
lists, so a rule can miss a violation written in an unusual way or flag a scene-text string that happens to
look like one.
"""

from __future__ import annotations

import collections
import dataclasses
import unicodedata
from collections.abc import Callable, Sequence

from openvivqa_jax.analysis.linguistic import level_of_tokens
from openvivqa_jax.analysis.records import QA, syllables
from openvivqa_jax.text.counts import COUNT_NOUNS, NUMBER_WORDS, count_question, number_value, quantities
from openvivqa_jax.text.normalize import normalize_prices

__all__ = [
    "GUIDELINE_COLORS",
    "OFF_LIST_COLORS",
    "COUNT_NOUNS",
    "NUMBER_WORDS",
    "MIN_QAS_PER_IMAGE",
    "MAX_QUANTITY",
    "RuleResult",
    "number_value",
    "rule_qas_per_image",
    "rule_answer_complexity",
    "rule_question_type",
    "rule_quantities",
    "rule_colours",
    "rule_directions",
    "rule_prices",
    "RULES",
    "check",
]

#: The twelve colours of the guideline (paper Table 1), English name -> accepted Vietnamese forms, the
#: standard form first. ``xanh`` alone names no one of them (green, blue or sky blue).
GUIDELINE_COLORS: dict[str, tuple[str, ...]] = {
    "black": ("đen",),
    "white": ("trắng",),
    "red": ("đỏ",),
    "orange": ("cam",),
    "yellow": ("vàng",),
    "green": ("xanh lá", "xanh lá cây"),
    "blue": ("xanh dương",),
    "sky blue": ("xanh da trời",),
    "purple": ("tím",),
    "pink": ("hồng",),
    "brown": ("nâu",),
    "gray": ("xám",),
}

#: Vietnamese colour names outside the twelve (a colour word after ``màu`` that is neither here nor in
#: :data:`GUIDELINE_COLORS` is taken for a noun, as in ``màu áo``, and not judged). ``xanh`` and ``tía`` are
#: also recognised without ``màu``; the others only after it, since alone they are ordinary words
#: (``bạc`` money, ``kem`` ice cream, ``đồng`` the currency).
OFF_LIST_COLORS: tuple[str, ...] = (
    "xanh", "tía", "bạc", "be", "kem", "ghi", "đồng", "cà phê", "xanh lam", "xanh lục", "xanh ngọc", "xanh rêu",
    "xanh lơ", "xanh biển", "xanh nước biển", "xanh than", "xanh navy",
)
_BARE_OFF_LIST = frozenset({"xanh", "tía"})

#: The guideline's minimum number of QAs per image (Table 1, "Number of QAs").
MIN_QAS_PER_IMAGE = 3
#: The guideline's largest quantity (Table 1, "Quantities").
MAX_QUANTITY = 10



@dataclasses.dataclass
class RuleResult:
    """What one rule found in one split.

    Attributes:
      name: the rule's name (``"quantities"``).
      source: the Table 1 row or paper section it checks.
      rule: the rule in words.
      checked: QAs checked (images for ``qas_per_image``; ``unit`` says which).
      violations: violating question ids, in input order, each once.
      reasons: reason -> question ids (a QA may have several reasons).
      examples: up to five ``{"question_id", "text", "why"}`` for the report.
      checkable: False when the rule cannot be checked from the text (then ``violations`` is empty and
        ``review`` lists the QAs to look at) or the source lacks what it needs (e.g. image ids).
      review: question ids to look at by hand (``directions``).
      note: why a rule was not checked, or how to read it.
      unit: what ``checked`` counts (``"QAs"`` or ``"images"``).
      extra: rule-specific counts (``qas_per_image``: ``images_below_minimum``).
    """

    name: str
    source: str
    rule: str
    checked: int = 0
    violations: list[str] = dataclasses.field(default_factory=list)
    reasons: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    examples: list[dict] = dataclasses.field(default_factory=list)
    checkable: bool = True
    review: list[str] = dataclasses.field(default_factory=list)
    note: str = ""
    unit: str = "QAs"
    extra: dict = dataclasses.field(default_factory=dict)

    @property
    def count(self) -> int:
        """The number of violating question ids."""
        return len(self.violations)

    def add(self, qa: QA, reason: str, text: str, why: str) -> None:
        """Records that ``qa`` breaks the rule for ``reason`` (``text``: the string judged; ``why``: the cause)."""
        ids = self.reasons.setdefault(reason, [])
        if not ids or ids[-1] != qa.question_id:
            ids.append(qa.question_id)
        if not self.violations or self.violations[-1] != qa.question_id:
            self.violations.append(qa.question_id)
            if len(self.examples) < 5:
                self.examples.append({"question_id": qa.question_id, "text": text, "why": why})

    def to_json(self) -> dict:
        """A JSON-ready dict (counts per reason, all ids)."""
        return {
            "source": self.source,
            "rule": self.rule,
            "checkable": self.checkable,
            "checked": self.checked,
            "unit": self.unit,
            "count": self.count,
            "reasons": {k: len(v) for k, v in self.reasons.items()},
            "question_ids": list(self.violations),
            "examples": list(self.examples),
            **dict(self.extra),
            **({"review": list(self.review)} if self.review else {}),
            **({"note": self.note} if self.note else {}),
        }


def rule_qas_per_image(qas: Sequence[QA]) -> RuleResult:
    """Table 1, Number of QAs: "Create at least 3 QAs for each image".

    Violations: every question of an image that has fewer than :data:`MIN_QAS_PER_IMAGE` questions in the
    split (reason ``fewer_than_3``); ``checked`` counts images, ``extra["images_below_minimum"]`` those
    violating images. Not checkable when a QA has no image id.
    """
    r = RuleResult("qas_per_image", "Table 1: Number of QAs", f"at least {MIN_QAS_PER_IMAGE} QAs for each image",
                   unit="images")
    if any(q.image_id is None for q in qas):
        r.checkable = False
        r.note = "the source has no image ids"
        return r
    per_image = collections.Counter(q.image_id for q in qas)
    r.checked = len(per_image)
    r.extra["images_below_minimum"] = sum(n < MIN_QAS_PER_IMAGE for n in per_image.values())
    for q in qas:
        n = per_image[q.image_id]
        if n < MIN_QAS_PER_IMAGE:
            r.add(q, f"fewer_than_{MIN_QAS_PER_IMAGE}", q.question, f"image {q.image_id} has {n} QA(s)")
    return r


def rule_answer_complexity(qas: Sequence[QA]) -> RuleResult:
    """Table 1, Answer complexity: "Encouraged answers are in the form of phrases or sentences, not single words".

    Violations: a QA with a reference answer at the word level of :mod:`openvivqa_jax.analysis.linguistic`
    (one syllable), reason ``single_word``. The guideline encourages rather than requires this.
    """
    r = RuleResult("answer_complexity", "Table 1: Answer complexity",
                   "answers are phrases or sentences, not single words",
                   note="the guideline encourages this; a single-word answer is not forbidden")
    for q in qas:
        r.checked += 1
        for a in q.answers:
            if level_of_tokens(syllables(a)) == "word":
                r.add(q, "single_word", a, "one-syllable answer")
                break
    return r


_YES_NO_END = frozenset({"không", "chưa", "chăng", "chứ"})
_YES_NO_PHRASES = (("có", "phải"), ("phải", "không"), ("đúng", "không"), ("phải", "chăng"), ("có", "đúng"))
_SELECTIVE = frozenset({"hay", "hoặc"})


def rule_question_type(qas: Sequence[QA]) -> RuleResult:
    """Table 1, Question type: "Must not be yes/no or selective questions".

    On the question's syllables: *yes/no* when it ends with ``không``, ``chưa``, ``chăng`` or ``chứ``
    (``... có đẹp không?``) or contains ``có phải``, ``phải không``, ``đúng không``, ``phải chăng`` or
    ``có đúng``; *selective* when it contains ``hay`` or ``hoặc`` (``màu đỏ hay màu xanh?``).
    """
    r = RuleResult("question_type", "Table 1: Question type", "no yes/no or selective questions")
    for q in qas:
        r.checked += 1
        toks = syllables(q.question)
        pairs = set(zip(toks, toks[1:]))
        if (toks and toks[-1] in _YES_NO_END) or any(p in pairs for p in _YES_NO_PHRASES):
            r.add(q, "yes_no", q.question, "yes/no question")
        hit = next((t for t in toks if t in _SELECTIVE), None)
        if hit:
            r.add(q, "selective", q.question, f"selective question ({hit!r})")
    return r


def rule_quantities(qas: Sequence[QA]) -> RuleResult:
    """Table 1, Quantities: "Write quantities in alphabet characters rather than numeric characters" and
    "Quantities are not greater than 10".

    Counts are found by :func:`openvivqa_jax.text.counts.quantities` in the question and the answers.
    Reasons: ``digits`` (a count written with digits, ``3 người``) and ``over_ten`` (a count above :data:`MAX_QUANTITY`, in digits or words:
    ``mười hai chiếc xe``, ``hàng chục người``).
    """
    r = RuleResult("quantities", "Table 1: Quantities", "quantities written in words, not greater than 10")
    for q in qas:
        r.checked += 1
        q_toks = syllables(q.question)
        count_q = count_question(q_toks)
        for text, toks, is_answer in [(q.question, q_toks, False)] + [(a, syllables(a), True) for a in q.answers]:
            for kind, value, words in quantities(toks, count_q and is_answer):
                if kind == "digits":
                    r.add(q, "digits", text, f"count in digits ({words!r})")
                if value > MAX_QUANTITY:
                    r.add(q, "over_ten", text, f"count above {MAX_QUANTITY} ({words!r} = {value})")
    return r


def _colour_forms() -> list[tuple[tuple[str, ...], bool]]:
    """Every colour form as syllables with True when it is one of the twelve, longest first."""
    forms = [(tuple(f.split()), True) for fs in GUIDELINE_COLORS.values() for f in fs]
    forms += [(tuple(f.split()), False) for f in OFF_LIST_COLORS]
    return sorted(forms, key=lambda x: -len(x[0]))


_COLOUR_FORMS = _colour_forms()


def _colour_at(tokens: Sequence[str], i: int) -> tuple[str, bool] | None:
    """The longest colour form starting at ``tokens[i]``: ``(form, on_list)``, or None."""
    for form, on_list in _COLOUR_FORMS:
        if tuple(tokens[i:i + len(form)]) == form:
            return " ".join(form), on_list
    return None


def rule_colours(qas: Sequence[QA]) -> RuleResult:
    """Table 1, Colors: "Only from this provided list: black, white, red, orange, yellow, green, blue, sky blue,
    purple, pink, brown, and gray".

    A colour mention is the longest colour form (:data:`GUIDELINE_COLORS` or :data:`OFF_LIST_COLORS`) right
    after ``màu`` (``màu sắc`` skipped), or a bare ``xanh`` / ``tía`` anywhere. Reasons: ``off_list`` (a colour
    outside the twelve, ``màu tía``, ``màu bạc``) and ``ambiguous_xanh`` (``xanh`` without ``lá``, ``dương`` or
    ``da trời``). Shade words after a listed colour (``đỏ đậm``) are accepted.
    """
    r = RuleResult("colours", "Table 1: Colors",
                   "colours only from the list of 12 (" + ", ".join(GUIDELINE_COLORS) + ")")
    for q in qas:
        r.checked += 1
        for text in (q.question, *q.answers):
            toks = syllables(text)
            i = 0
            while i < len(toks):
                start = None
                if toks[i] == "màu":
                    start = i + 2 if i + 1 < len(toks) and toks[i + 1] == "sắc" else i + 1
                elif toks[i] in _BARE_OFF_LIST and (i == 0 or toks[i - 1] not in ("màu", "sắc")):
                    start = i
                found = _colour_at(toks, start) if start is not None and start < len(toks) else None
                if found is not None and not found[1]:
                    reason = "ambiguous_xanh" if found[0] == "xanh" else "off_list"
                    r.add(q, reason, text, f"colour {found[0]!r} is not one of the 12")
                i = max(i + 1, (start or 0) + (len(found[0].split()) if found else 0))
    return r


_DIRECTION_WORDS = frozenset({"trái", "phải"})


def rule_directions(qas: Sequence[QA]) -> RuleResult:
    """Table 1, Directions (left and right): "If following that direction words is an object, then such direction
    is defined based on that object, else using the perspective of the viewer".

    Whether a left/right is right depends on the image, so this rule is not checkable from the text: it lists
    the QAs whose question or answer uses ``trái``/``phải`` after ``bên``, ``phía`` or ``tay`` (``review``) and
    reports no violation.
    """
    r = RuleResult("directions", "Table 1: Directions (left and right)",
                   "left/right relative to the object that follows, else to the viewer", checkable=False,
                   note="needs the image: QAs using left/right are listed under 'review' for a person to check")
    for q in qas:
        r.checked += 1
        for text in (q.question, *q.answers):
            toks = syllables(text)
            if any(t in _DIRECTION_WORDS and i and toks[i - 1] in ("bên", "phía", "tay") for i, t in enumerate(toks)):
                r.review.append(q.question_id)
                break
    return r


def _plain(text: str) -> str:
    return " ".join(unicodedata.normalize("NFC", text).lower().split())


def rule_prices(qas: Sequence[QA]) -> RuleResult:
    """§3.2.4: prices are written ``#,### đồng`` (digits in groups of three separated by commas, then ``đồng``).

    A question or answer breaks the rule when
    :func:`openvivqa_jax.text.normalize.normalize_prices` (the project's normalizer, which rewrites
    ``20.000đ``, ``20000 vnđ``, ``20k`` to ``20,000 đồng``) changes its NFC-lowercased text; reason
    ``price_form``. Text already normalized (every built TFDS dataset) passes by construction.
    """
    r = RuleResult("prices", "§3.2.4: prices", "prices written as #,### đồng")
    for q in qas:
        r.checked += 1
        for text in (q.question, *q.answers):
            plain = _plain(text)
            fixed = normalize_prices(plain)
            if fixed != plain:
                r.add(q, "price_form", text, f"price not in #,### đồng form (normalized: {fixed!r})")
    return r


#: Every rule, in the order of Table 1 (then §3.2.4).
RULES: dict[str, Callable[[Sequence[QA]], RuleResult]] = {
    "qas_per_image": rule_qas_per_image,
    "answer_complexity": rule_answer_complexity,
    "question_type": rule_question_type,
    "quantities": rule_quantities,
    "colours": rule_colours,
    "directions": rule_directions,
    "prices": rule_prices,
}


def check(qas: Sequence[QA]) -> dict[str, RuleResult]:
    """Runs every rule of :data:`RULES` on the QAs of one split."""
    return {name: fn(qas) for name, fn in RULES.items()}
