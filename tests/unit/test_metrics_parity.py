"""Parity of openvivqa_jax.evaluation with the reference toolkits.

- BLEU-1..4, ROUGE-L, CIDEr-D and METEOR (``-norm``) against pycocoevalcap 1.2's scorers, called
  directly on identical whitespace-tokenized strings (its PTBTokenizer needs Java and strips
  punctuation), on a corpus of >= 200 Vietnamese hypothesis/reference sets: corpus and per-question
  values, overall and per QA-type group, within 1e-6.
- METEOR-vi: the jar's own token counts show that ``-norm`` splits Vietnamese letters and that the
  Vietnamese-safe mode keeps whitespace tokens.
- ANLS (RRC boundary rule), VQA accuracy (official leave-one-out: 0.9/0.6/0.3), EM/F1 (SQuAD v1.1)
  and the ViQuAD human-performance protocol against values worked out by hand.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from conftest import needs_meteor  # noqa: E402
from openvivqa_jax.evaluation import score  # noqa: E402
from openvivqa_jax.evaluation import anls as anls_lib  # noqa: E402
from openvivqa_jax.evaluation import meteor as meteor_lib  # noqa: E402
from openvivqa_jax.evaluation import squad as squad_lib  # noqa: E402
from openvivqa_jax.evaluation import vqa_accuracy as vqa_lib  # noqa: E402
from openvivqa_jax.evaluation.sanitize import sanitize_text  # noqa: E402

pycoco = pytest.importorskip("pycocoevalcap")
from pycocoevalcap.bleu.bleu import Bleu  # noqa: E402
from pycocoevalcap.cider.cider import Cider  # noqa: E402
from pycocoevalcap.rouge.rouge import Rouge  # noqa: E402

DATA = Path("/work/shared/data")
TOL = 1e-6
FAST = ["BLEU", "ROUGE-L", "CIDEr"]

_WORDS = (
    "cửa tiệm này tên là mộc màu xanh dương đỏ trắng ở đường tạ hiện có hai ba một người chiếc xe máy quán "
    "cà phê bán bánh mì phở trên bàn biển hiệu chữ cây bên trái phải trước nhà thờ chợ bến thành hòa bình "
    "khỏe thủy giá đồng cô gái đang đi bộ cầm ô mặc áo dài nón lá ơi ưa mười sáu tám ngõ số"
).split()


needs_java = needs_meteor()


def _real_strings() -> list[str]:
    out = []
    ex = json.loads((DATA / "openvivqa_examples/examples_data.json").read_text(encoding="utf-8"))
    for ann in ex["annotations"].values():
        out += [ann["question"], ann["answer"]]
    import csv

    with open(DATA / "vivqa_sample/train.csv", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            out += [row["question"], row["answer"]]
    return out


def _corpus(num: int = 240, seed: int = 1234):
    """>= 200 sanitized Vietnamese (hypothesis, references, qa_type) sets, some sharing n-grams."""
    rng = random.Random(seed)
    real = _real_strings()

    def sent(lo, hi):
        if rng.random() < 0.35:
            return rng.choice(real)
        return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(lo, hi)))

    preds, refs, types = {}, {}, {}
    for i in range(num):
        item_refs = [sent(1, 16) for _ in range(rng.randint(1, 5))]
        r = rng.random()
        if r < 0.15:
            hyp = rng.choice(item_refs)
        elif r < 0.6:
            words = rng.choice(item_refs).split()
            hyp = " ".join([w for w in words if rng.random() < 0.75] + [rng.choice(_WORDS) for _ in range(rng.randint(0, 3))])
        else:
            hyp = sent(1, 14)
        if i in (7, 99):
            hyp = ""
        qid = f"q{i}"
        # Sanitize once so both toolkits see the same tokens; score() leaves them unchanged.
        preds[qid] = sanitize_text(hyp)
        refs[qid] = [s for s in (sanitize_text(x) for x in item_refs) if s]
        types[qid] = i % 3 % 2  # 0, 1, 0, 0, 1, 0, ...
    assert all(sanitize_text(p) == p for p in preds.values())
    return preds, refs, types


@pytest.fixture(scope="module")
def corpus():
    return _corpus()


def _coco(preds, refs, ids):
    gts = {q: refs[q] for q in ids}
    res = {q: [preds[q]] for q in ids}
    bleu, bleu_list = Bleu(4).compute_score(gts, res, verbose=0)
    rouge, rouge_list = Rouge().compute_score(gts, res)
    cider, cider_list = Cider().compute_score(gts, res)
    out = {f"BLEU-{k + 1}": bleu[k] for k in range(4)}
    out.update({"ROUGE-L": rouge, "CIDEr": cider})
    per = {f"BLEU-{k + 1}": np.asarray(bleu_list[k]) for k in range(4)}
    per.update({"ROUGE-L": np.asarray(rouge_list), "CIDEr": np.asarray(cider_list)})
    return out, per


def test_corpus_is_big_and_vietnamese(corpus):
    preds, refs, _ = corpus
    assert len(preds) >= 200
    text = " ".join(preds.values())
    assert any("\u1ea0" <= ch <= "\u1ef9" for ch in text) and "ơ" in text


def test_bleu_rouge_cider_equal_pycocoevalcap(corpus):
    preds, refs, types = corpus
    ours = score(preds, refs, types, FAST, per_question=True)
    ids = list(preds)
    coco, coco_per = _coco(preds, refs, ids)
    for name, value in coco.items():
        assert abs(ours["overall"][name] - value) <= TOL, name
        mine = np.array([ours["per_question"][q][name] for q in ids])
        np.testing.assert_allclose(mine, coco_per[name], rtol=0, atol=TOL, err_msg=name)
    # Per-group numbers equal the toolkit run on that group alone.
    for group, t in (("text_qa", 1), ("non_text_qa", 0)):
        sub = [q for q in ids if types[q] == t]
        coco_g, _ = _coco(preds, refs, sub)
        assert ours["num_questions"][group] == len(sub)
        for name, value in coco_g.items():
            assert abs(ours[group][name] - value) <= TOL, (group, name)


def test_small_corpora_and_ties_match(corpus):
    """Closest-reference-length ties, one/two questions and single-token strings."""
    preds = {"a": "một hai ba", "b": "xe", "c": "đỏ"}
    refs = {"a": ["một hai", "một hai ba bốn"], "b": ["xe máy", "xe"], "c": ["xanh"]}
    for ids in (["a"], ["a", "b"], ["a", "b", "c"]):
        p = {q: preds[q] for q in ids}
        r = {q: refs[q] for q in ids}
        ours = score(p, r, metrics=FAST)
        coco, _ = _coco(p, r, ids)
        for name, value in coco.items():
            assert abs(ours["overall"][name] - value) <= TOL, (ids, name)


@needs_java
@pytest.mark.slow
def test_meteor_equals_pycocoevalcap(corpus):
    from pycocoevalcap.meteor.meteor import Meteor

    preds, refs, types = corpus
    ids = list(preds)
    ours = score(preds, refs, types, ["METEOR"], per_question=True)
    assert ours["overall"]["METEOR"] is not None, ours["notes"]
    m = Meteor()
    try:
        value, per = m.compute_score({q: refs[q] for q in ids}, {q: [preds[q]] for q in ids})
        sub = [q for q in ids if types[q] == 1]
        value_text, _ = m.compute_score({q: refs[q] for q in sub}, {q: [preds[q]] for q in sub})
    finally:
        del m
    assert abs(ours["overall"]["METEOR"] - value) <= TOL
    np.testing.assert_allclose([ours["per_question"][q]["METEOR"] for q in ids], per, rtol=0, atol=TOL)
    assert abs(ours["text_qa"]["METEOR"] - value_text) <= TOL


@needs_java
@pytest.mark.slow
def test_meteor_vi_keeps_vietnamese_tokens():
    hyps = ["cửa tiệm tên mộc", "đường tạ hiện", "mưa ơi"]
    refs = [["cửa tiệm này tên mộc"], ["đường tạ hiền"], ["mưa ơi"]]
    _, _, stats_norm = meteor_lib.meteor_scores(hyps, refs, {}, mode="METEOR")
    per_vi, overall_vi, stats_vi = meteor_lib.meteor_scores(hyps, refs, {}, mode="METEOR-vi")
    # Field 0 of Meteor's statistics is the hypothesis length in Meteor's own tokens.
    assert [s[0] for s in stats_vi] == [4.0, 3.0, 2.0]
    assert all(n > v for n, v in zip([s[0] for s in stats_norm], [s[0] for s in stats_vi]))
    # Field 1 is the reference length: "cửa tiệm này tên mộc" is 5 whitespace tokens.
    assert stats_vi[0][1] == 5.0
    assert per_vi[2] == pytest.approx(1.0)  # identical strings
    assert 0.0 < overall_vi["overall"] < 1.0


# ---- ANLS, VQA accuracy, EM/F1: hand-computed values -------------------------------------------


def test_anls_rrc_boundary_rule():
    # "abcd" vs "abef": distance 2, length 4 -> NL 0.5 -> similarity 0.5, kept (RRC: zeroed only if < 0.5).
    assert anls_lib.anls(["abcd"], [["abef"]])[0] == pytest.approx(0.5)
    # "abcde" vs "abxyz": NL 3/5 = 0.6 -> similarity 0.4 < 0.5 -> 0.
    assert anls_lib.anls(["abcde"], [["abxyz"]])[0] == 0.0
    # One substitution in ten characters -> 0.9; max over references.
    assert anls_lib.anls(["abcdefghij"], [["zzz", "abcdefghiX"]])[0] == pytest.approx(0.9)
    # Vietnamese letters are single characters (NFC): "hòa" vs "hoa" is one substitution in 3.
    assert anls_lib.anls(["hòa"], [["hoa"]])[0] == pytest.approx(2 / 3)
    assert anls_lib.anls([""], [["abc"]])[0] == 0.0
    assert "0.5" in anls_lib.__doc__ and "RRC" in anls_lib.__doc__
    ours = score({"1": "abcd", "2": "abcde"}, {"1": ["abef"], "2": ["abxyz"]}, metrics=["ANLS"])
    assert ours["overall"]["ANLS"] == pytest.approx(0.25)


@pytest.mark.parametrize("agree,expected", [(0, 0.0), (1, 0.3), (2, 0.6), (3, 0.9), (4, 1.0), (10, 1.0)])
def test_vqa_accuracy_leave_one_out(agree, expected):
    answers = ["cửa hàng"] * agree + [f"khác {i}" for i in range(10 - agree)]
    acc, fallback = vqa_lib.vqa_accuracy(["cửa hàng"], [answers])
    assert acc[0] == pytest.approx(expected)
    assert fallback == 0
    ours = score({"q": "Cửa hàng"}, {"q": answers}, metrics=["VQA-accuracy"])
    assert ours["overall"]["VQA-accuracy"] == pytest.approx(expected)


def test_vqa_accuracy_few_answers_is_exact_match_and_noted():
    ours = score({"a": "xe", "b": "đỏ"}, {"a": ["xe", "xe máy"], "b": ["xanh"]}, metrics=["VQA-accuracy"])
    assert ours["overall"]["VQA-accuracy"] == pytest.approx(0.5)
    assert ours["counts"]["vqa_exact_match_fallback"] == 2
    assert any("exact match" in n for n in ours["notes"])


def test_em_f1_squad_style():
    # Unicode punctuation is removed; "an" (a Vietnamese word) is not an article here.
    assert squad_lib.exact_match("«Hà Nội»!", "hà nội") == 1.0
    assert squad_lib.exact_match("an toàn", "toàn") == 0.0
    # pred "xe máy màu đỏ" vs gold "chiếc xe máy": common {xe, máy} = 2, P = 2/4, R = 2/3 -> F1 = 4/7.
    assert squad_lib.f1("xe máy màu đỏ", "chiếc xe máy") == pytest.approx(4 / 7)
    em, f1 = squad_lib.em_f1(["xe máy màu đỏ"], [["chiếc xe máy", "xe máy màu đỏ ."]])
    assert em[0] == 1.0 and f1[0] == 1.0
    # Repeated tokens count with multiplicity: pred "a a b", gold "a b b": common a1 b1 = 2 -> 2/3.
    assert squad_lib.f1("a a b", "a b b") == pytest.approx(2 / 3)
    # Two empty answers: EM 1 and F1 1 (SQuAD v2.0's no-answer rule; v1.1 gave F1 0).
    assert squad_lib.f1("", "") == 1.0 and squad_lib.exact_match("", "") == 1.0
    assert squad_lib.f1("", "xe") == 0.0


def test_em_f1_delete_punctuation():
    # SQuAD v1.1 deletes punctuation without a space: "10.000" is "10000", "1.975" is "1975".
    assert squad_lib.exact_match("10000", "10.000") == 1.0
    assert squad_lib.f1("năm 1.975", "năm 1975") == 1.0
    assert squad_lib.normalize_answer("Don't!") == "dont"
    # Through the evaluator (prices and tone marks normalized first, punctuation kept in place, then deleted).
    out = score({"a": "10000", "b": "năm 1.975", "c": "hoà bình", "d": "an toàn"},
                {"a": ["10.000"], "b": ["năm 1975"], "c": ["Hòa Bình."], "d": ["toàn"]}, metrics=["EM", "F1"],
                per_question=True)
    pq = out["per_question"]
    assert [pq[q]["EM"] for q in "abcd"] == [1.0, 1.0, 1.0, 0.0]
    # "an toàn" vs "toàn": common 1, P 1/2, R 1 -> 2/3 ("an" is a word, not an article).
    assert pq["d"]["F1"] == pytest.approx(2 / 3)


def test_human_performance_viquad_protocol():
    # Answers A="xe máy", B="xe máy đỏ", C="xe máy":
    #  A vs {B, C}: EM 1, F1 1;  B vs {A, C}: EM 0, F1 = 2*(2/3*1)/(2/3+1) = 0.8;  C vs {A, B}: EM 1, F1 1.
    em, f1, several = squad_lib.human_performance([["xe máy", "xe máy đỏ", "xe máy"], ["một"]])
    assert several.tolist() == [True, False]
    assert em[0] == pytest.approx(2 / 3)
    assert f1[0] == pytest.approx((1 + 0.8 + 1) / 3)
    ours = score({"a": "xe", "b": "một"}, {"a": ["xe máy", "xe máy đỏ", "xe máy"], "b": ["một"]}, metrics=["EM", "F1"])
    hp = ours["human_performance"]["overall"]
    assert hp["num_questions"] == 1
    assert hp["EM"] == pytest.approx(2 / 3) and hp["F1"] == pytest.approx(2.8 / 3)


def test_java_on_path_is_what_pycocoevalcap_uses():
    """pycocoevalcap's wrapper runs plain `java`; our default resolves the same binary."""
    if shutil.which("java") is None:
        pytest.skip("no java on PATH")
    assert meteor_lib.find_java() == shutil.which("java")


def test_wmd_exact_transport_matches_linear_program():
    """Our WMD (closed form / assignment / LP paths) equals the transport LP solved directly."""
    from scipy.optimize import linprog

    from openvivqa_jax.evaluation import wmd as wmd_lib

    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(12)]
    vecs = rng.standard_normal((len(words), 5))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    wv = wmd_lib.WordVectors(index={w: i for i, w in enumerate(words[:10])}, vectors=vecs[:10], path="mem", file_words=10)
    for n, m in [(1, 4), (3, 1), (2, 3), (4, 6), (7, 9), (13, 17), (20, 3)]:
        h = [words[i] for i in rng.integers(0, 12, n)]  # w10, w11 are unknown
        r = [words[i] for i in rng.integers(0, 12, m)]
        hw, rw = sorted(set(h)), sorted(set(r))
        a = np.array([h.count(w) for w in hw]) / n
        b = np.array([r.count(w) for w in rw]) / m

        def dist(u, v):
            if u == v:
                return 0.0
            if u in wv.index and v in wv.index:
                return float(np.linalg.norm(vecs[wv.index[u]] - vecs[wv.index[v]]))
            return float(np.sqrt(2.0))

        cost = np.array([[dist(u, v) for v in rw] for u in hw])
        a_eq = np.vstack([np.kron(np.eye(len(hw)), np.ones(len(rw))), np.kron(np.ones(len(hw)), np.eye(len(rw)))])
        lp = linprog(cost.ravel(), A_eq=a_eq, b_eq=np.concatenate([a, b]), bounds=(0, None), method="highs")
        assert wmd_lib.wmd(h, r, wv) == pytest.approx(lp.fun, abs=1e-9), (n, m)
