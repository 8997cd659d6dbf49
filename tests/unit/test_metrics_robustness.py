"""Robustness of the evaluator (docs/design.md §9): bad items neither crash, hang, nor move other items' scores.

Each case puts one bad item into a corpus of normal ones and checks that (a) scoring finishes,
(b) every other question's per-question scores are exactly those obtained when the bad item is
replaced by a clean counterpart (or removed, for an empty reference list) and (c) the bad item gets
the value worked out by hand, with a counted note where the input was changed.
"""

from __future__ import annotations

import os
import sys
import time
import unicodedata
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from conftest import needs_meteor  # noqa: E402
from openvivqa_jax.evaluation import score  # noqa: E402
from openvivqa_jax.evaluation import meteor as meteor_lib  # noqa: E402
from openvivqa_jax.evaluation.sanitize import MAX_TOKENS, sanitize_text  # noqa: E402

NO_METEOR = ["BLEU", "ROUGE-L", "CIDEr", "ANLS", "VQA-accuracy", "EM", "F1", "WMDRel"]
ZERO_FOR_EMPTY = ["BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "ROUGE-L", "CIDEr", "ANLS", "VQA-accuracy", "EM", "F1", "WMDRel"]


needs_java = needs_meteor()

BASE_PREDS = {
    "q1": "cửa tiệm tên mộc",
    "q2": "đường tạ hiện",
    "q3": "màu xanh dương",
    "q4": "có hai người đang đi bộ",
    "q5": "quán cà phê",
    "q6": "chiếc xe máy màu đỏ",
}
BASE_REFS = {
    "q1": ["cửa tiệm này tên mộc"],
    "q2": ["đường tạ hiện", "phố tạ hiện"],
    "q3": ["màu xanh"],
    "q4": ["hai người đi bộ trên đường"],
    "q5": ["quán cà phê ở bến thành", "quán cà phê"],
    "q6": ["xe máy màu đỏ"],
}
BASE_TYPES = {"q1": 1, "q2": 1, "q3": 0, "q4": 0, "q5": 1, "q6": 0}


@pytest.fixture(scope="module")
def vectors(tmp_path_factory):
    """A small word2vec text file (random unit-ish vectors) for the base vocabulary."""
    words = sorted({t for s in [*BASE_PREDS.values(), *(r for rs in BASE_REFS.values() for r in rs)] for t in s.split()})
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("vec") / "vectors.txt"
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"{len(words)} 8\n")
        for w in words:
            f.write(w + " " + " ".join(f"{x:.4f}" for x in rng.standard_normal(8)) + "\n")
    return str(path)


def _score(preds, refs, vectors, metrics=NO_METEOR, **kw):
    return score(preds, refs, {q: BASE_TYPES.get(q, -1) for q in preds}, metrics, vectors=vectors, per_question=True, **kw)


def _assert_others_unchanged(bad, clean, skip=("bad",)):
    for qid, values in clean["per_question"].items():
        if qid in skip:
            continue
        assert bad["per_question"][qid] == values, qid


def _with(extra_pred, extra_refs):
    preds = dict(BASE_PREDS, bad=extra_pred)
    refs = dict(BASE_REFS, bad=extra_refs)
    return preds, refs


def test_empty_hypothesis_scores_zero(vectors):
    bad = _score(*_with("", ["quán cà phê"]), vectors)
    clean = _score(*_with("quán phở", ["quán cà phê"]), vectors)
    _assert_others_unchanged(bad, clean)
    assert all(bad["per_question"]["bad"][m] == 0.0 for m in ZERO_FOR_EMPTY)
    assert bad["counts"]["empty_predictions"] == 1
    none_pred = _score(*_with(None, ["quán cà phê"]), vectors)
    assert none_pred["per_question"]["bad"] == bad["per_question"]["bad"]
    assert none_pred["counts"]["none_predictions"] == 1


def test_empty_reference_list_is_excluded_with_note(vectors):
    for empty in ([], None):
        bad = _score(*_with("quán cà phê", empty), vectors)
        base = _score(BASE_PREDS, BASE_REFS, vectors)
        assert "bad" not in bad["per_question"]
        assert bad["overall"] == base["overall"]
        assert bad["num_questions"]["overall"] == len(BASE_PREDS)
        assert bad["counts"]["excluded_empty_references"] == 1
        assert any("empty reference list" in n and "'bad'" in n for n in bad["notes"])


ALL_PER_QUESTION = ["BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "ROUGE-L", "CIDEr", "ANLS", "VQA-accuracy", "EM", "F1",
                    "WMDRel"]


@pytest.mark.parametrize("empty", [[""], ["   "], ["\f"], ["  ", "\n", "\u2028"]])
def test_empty_reference_is_an_answer(vectors, empty):
    # "" against [""] is an exact match: the maximum on every per-question score (CIDEr's is 10); the
    # question stays in the corpus (7 questions), counted in the notes.
    hit = _score(*_with("", empty), vectors)
    assert hit["num_questions"]["overall"] == len(BASE_PREDS) + 1
    assert hit["per_question"]["bad"] == {m: (10.0 if m == "CIDEr" else 1.0) for m in ALL_PER_QUESTION}
    assert hit["counts"]["empty_references"] == 1 and hit["counts"]["excluded_empty_references"] == 0
    assert any("only empty references" in n and "'bad'" in n for n in hit["notes"])
    miss = _score(*_with("quán cà phê", empty), vectors)
    assert miss["per_question"]["bad"] == {m: 0.0 for m in ALL_PER_QUESTION}
    # The mean over the 7 questions includes the empty-reference one.
    base = _score(BASE_PREDS, BASE_REFS, vectors)
    em = [v["EM"] for q, v in base["per_question"].items()]
    assert hit["overall"]["EM"] == pytest.approx((sum(em) + 1.0) / 7)
    assert miss["overall"]["EM"] == pytest.approx(sum(em) / 7)


def test_punctuation_only_hypothesis(vectors):
    bad = _score(*_with("?!...", ["quán cà phê ."]), vectors)
    clean = _score(*_with("quán phở", ["quán cà phê ."]), vectors)
    _assert_others_unchanged(bad, clean)
    # ". . ." shares only "." with the reference: not an exact match, ANLS below threshold.
    assert bad["per_question"]["bad"]["EM"] == 0.0 and bad["per_question"]["bad"]["ANLS"] == 0.0
    # SQuAD normalization removes all punctuation: empty prediction -> F1 0.
    assert bad["per_question"]["bad"]["F1"] == 0.0


@pytest.mark.parametrize("sep", ["\n", "\r", "\r\n", "\u2028", "|||", " ||| "])
def test_line_breaks_and_separator_inside_strings(vectors, sep):
    dirty_pred = f"quán{sep}cà phê"
    dirty_refs = [f"quán cà{sep}phê", f"quán{sep}phở"]
    bad = _score(*_with(dirty_pred, dirty_refs), vectors)
    clean = _score(*_with("quán cà phê", ["quán cà phê", "quán phở"]), vectors)
    assert bad["per_question"] == clean["per_question"]
    assert bad["per_question"]["bad"]["EM"] == 1.0
    if "|||" in sep:
        assert bad["counts"]["separator_strings"] == 3
        assert any("'|||'" in n for n in bad["notes"])


def test_three_thousand_word_hypothesis_is_capped_and_fast(vectors):
    long_pred = " ".join(["quán cà phê"] * 1000)  # 3,000 words
    t0 = time.perf_counter()
    bad = _score(*_with(long_pred, ["quán cà phê"]), vectors)
    assert time.perf_counter() - t0 < 10.0
    clean = _score(*_with("quán phở", ["quán cà phê"]), vectors)
    _assert_others_unchanged(bad, clean)
    capped = _score(*_with(" ".join(long_pred.split()[:MAX_TOKENS]), ["quán cà phê"]), vectors)
    assert bad["per_question"]["bad"] == capped["per_question"]["bad"]
    assert bad["counts"]["capped_strings"] == 1
    assert any(f"capped at {MAX_TOKENS} tokens" in n for n in bad["notes"])
    # Precision-heavy metrics punish the long answer; ROUGE-L recall alone would be 1.
    assert 0.0 < bad["per_question"]["bad"]["ROUGE-L"] < 0.05


def test_nfd_against_nfc(vectors):
    nfc = "cửa tiệm bánh mì"
    nfd = unicodedata.normalize("NFD", nfc)
    assert nfd != nfc
    bad = _score(*_with(nfd, [nfc]), vectors)
    clean = _score(*_with(nfc, [nfc]), vectors)
    assert bad["per_question"] == clean["per_question"]
    assert bad["per_question"]["bad"]["EM"] == 1.0 and bad["per_question"]["bad"]["ANLS"] == 1.0
    reverse = _score(*_with(nfc, [nfd]), vectors)
    assert reverse["per_question"]["bad"] == clean["per_question"]["bad"]


@pytest.mark.parametrize("old,new", [("hoà bình", "hòa bình"), ("khoẻ", "khỏe"), ("thuỷ", "thủy")])
def test_old_against_new_tone_marks(vectors, old, new):
    a = _score(*_with(old, [new]), vectors)
    b = _score(*_with(new, [old]), vectors)
    same = _score(*_with(new, [new]), vectors)
    assert a["per_question"] == same["per_question"] == b["per_question"]
    assert a["per_question"]["bad"]["EM"] == 1.0


def test_one_question_corpus_notes_degenerate_idf(vectors):
    res = _score({"q1": "cửa tiệm tên mộc"}, {"q1": ["cửa tiệm tên mộc"]}, vectors)
    assert res["overall"]["CIDEr"] == 0.0
    assert any("CIDEr" in n and "degenerate" in n for n in res["notes"])
    assert res["overall"]["EM"] == 1.0 and res["overall"]["ROUGE-L"] == 1.0
    assert res["overall"]["BLEU-1"] == pytest.approx(1.0)


def test_no_java_reports_meteor_unavailable(vectors, monkeypatch):
    expected = _score(BASE_PREDS, BASE_REFS, vectors)["overall"]
    for how in ("arg", "env"):
        kw = {}
        if how == "arg":
            kw["java"] = "/nonexistent/bin/java"
        else:
            monkeypatch.setenv("OPENVIVQA_JAVA", "/nonexistent/bin/java")
        t0 = time.perf_counter()
        res = _score(BASE_PREDS, BASE_REFS, vectors, metrics=None, **kw)  # the defaults include METEOR
        assert "METEOR" in res["metrics"] and "METEOR-vi" in res["metrics"]
        assert time.perf_counter() - t0 < 10.0
        for group in ("overall", "text_qa", "non_text_qa"):
            assert res[group]["METEOR"] is None and res[group]["METEOR-vi"] is None
        assert sum("unavailable" in n and "Java" in n for n in res["notes"]) == 2
        # Everything else is computed as usual.
        assert {m: v for m, v in res["overall"].items() if not m.startswith("METEOR")} == expected


def test_missing_jar_reports_meteor_unavailable(vectors, tmp_path):
    res = _score(BASE_PREDS, BASE_REFS, vectors, metrics=["METEOR", "EM"], meteor_jar=str(tmp_path / "none.jar"),
                 java="/nonexistent/java")
    assert res["overall"]["METEOR"] is None and res["overall"]["EM"] is not None


@needs_java
@pytest.mark.slow
def test_meteor_timeout_does_not_hang(vectors):
    t0 = time.perf_counter()
    res = _score(BASE_PREDS, BASE_REFS, vectors, metrics=["METEOR", "EM"], meteor_timeout=0.2)
    assert time.perf_counter() - t0 < 15.0
    assert res["overall"]["METEOR"] is None
    assert any("timed out" in n for n in res["notes"])
    assert res["overall"]["EM"] is not None


@needs_java
@pytest.mark.slow
def test_meteor_bad_items_do_not_shift_other_items(vectors):
    """All bad strings in one corpus: the jar stays in step and other questions keep their scores."""
    preds = dict(BASE_PREDS)
    refs = dict(BASE_REFS)
    bad = {
        "b_empty": ("", ["quán cà phê"]),
        "b_punct": ("?!...", ["quán cà phê"]),
        "b_newline": ("quán\ncà\rphê\u2028ngon", ["quán ||| cà phê", "a|||b"]),
        "b_long": (" ".join(["đường phố"] * 1500), ["đường phố"]),
        "b_nfd": (unicodedata.normalize("NFD", "cửa tiệm"), ["cửa tiệm"]),
    }
    for k, (p, r) in bad.items():
        preds[k], refs[k] = p, r
    # One mode keeps the test at two JVM starts; both modes share the protocol code under test.
    with_bad = score(preds, refs, metrics=["METEOR"], per_question=True)
    clean = score(BASE_PREDS, BASE_REFS, metrics=["METEOR"], per_question=True)
    assert with_bad["overall"]["METEOR"] is not None, with_bad["notes"]
    for qid in BASE_PREDS:
        assert with_bad["per_question"][qid] == clean["per_question"][qid], qid
    assert with_bad["per_question"]["b_empty"]["METEOR"] == 0.0
    assert with_bad["per_question"]["b_nfd"]["METEOR"] == pytest.approx(1.0)
    assert with_bad["counts"]["capped_strings"] == 1 and with_bad["counts"]["separator_strings"] == 2


def test_sanitize_text_contract():
    assert sanitize_text("A\nB\rC\u2028D\u2029E\x85F") == "a b c d e f"
    assert sanitize_text("x ||| y") == "x y"
    assert sanitize_text("x\x00y\x1bz") == "x y z"
    assert len(sanitize_text("a " * 5000).split()) == MAX_TOKENS
    assert sanitize_text("") == ""
    with pytest.raises(TypeError, match="'q9'"):
        sanitize_text(3, qid="q9")


def test_bad_types_name_the_question():
    with pytest.raises(TypeError, match="'q1'"):
        score({"q1": {"answer": "x"}}, {"q1": ["x"]}, metrics=["EM"])
    with pytest.raises(ValueError, match="unknown metric"):
        score({"q1": "x"}, {"q1": ["x"]}, metrics=["BLEU-5"])
    # Numbers are answers too (TextVQA has numeric answers).
    assert score({"q1": 12}, {"q1": [12]}, metrics=["EM"])["overall"]["EM"] == 1.0


def test_nothing_to_score_gives_none_and_note():
    res = score({"q1": "x"}, {"q1": []}, metrics=["EM", "CIDEr"])
    assert res["overall"] == {"EM": None, "CIDEr": None}
    assert any("no question could be scored" in n for n in res["notes"])


def test_env_var_names_java(monkeypatch):
    monkeypatch.setenv("OPENVIVQA_JAVA", "/nonexistent/java")
    with pytest.raises(meteor_lib.MeteorUnavailable, match="/nonexistent/java"):
        meteor_lib.find_java()
    monkeypatch.delenv("OPENVIVQA_JAVA")
    if os.path.exists("/usr/bin/java"):
        assert meteor_lib.find_java("/usr/bin/java") == "/usr/bin/java"


@needs_java
def test_crashing_jar_reports_meteor_unavailable(vectors, tmp_path):
    fake = tmp_path / "meteor-1.5.jar"
    fake.write_bytes(b"not a jar")
    t0 = time.perf_counter()
    res = _score(BASE_PREDS, BASE_REFS, vectors, metrics=["METEOR", "EM"], meteor_jar=str(fake))
    assert time.perf_counter() - t0 < 30.0
    assert res["overall"]["METEOR"] is None and res["overall"]["EM"] is not None
    assert any("METEOR unavailable" in n and "exit" in n for n in res["notes"]), res["notes"]
