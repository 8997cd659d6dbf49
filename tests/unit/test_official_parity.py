"""The official text mode and the EVJVQA metrics against the official scorers' own outputs on real public files.

The expected values are what the official scripts printed or returned when run on the same inputs (outside the
project, in a scratch environment): the EVJVQA challenge's ``evaluate_metrics.py``, MMF's ``STVQAANLSEvaluator``,
``TextVQAAccuracyEvaluator`` and ``STVQAAccuracyEvaluator``, GT-Vision-Lab's ``vqaEval.py`` and SQuAD v1.1's
``evaluate-v1.1.py``. tests/data/official_parity/README.md names every input's source and the script and commit
that produced each fixture. Tolerances: 1e-9 (EVJVQA 1e-6, the challenge's required precision; measured 0).

Tests on the real public files read them from ``../shared/data/real`` and are skipped, saying why, where that
folder is missing; the crafted inputs are in the tree and always run.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import SHARED
from openvivqa_jax import evaluate
from openvivqa_jax.evaluation import evaluator

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "official_parity"
REAL = Path(SHARED) / "data" / "real"
EVJVQA_BASELINE = REAL / "evjvqa" / "public_test_baseline"
TEXTVQA_VAL = REAL / "textvqa" / "TextVQA_v0.1_val.json"
VIQUAD = REAL / "viquad"


def _load(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def _needs(path: Path):
    return pytest.mark.skipif(not path.exists(), reason=f"real public file {path} not present (../shared/data/real)")


def _evaluate_cli(capsys, *argv: str) -> dict:
    rc = evaluate.run(list(argv))
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


# ---- EVJVQA: the challenge's scorer ----------------------------------------------------------------------------


def _check_evjvqa(out: dict, scorer: dict, ids: list[str], per_f1, per_bleu) -> None:
    assert abs(out["overall"]["EVJVQA-F1"] - scorer["F1"]) <= 1e-6
    assert abs(out["overall"]["EVJVQA-BLEU"] - scorer["BLEU"]) <= 1e-6
    # The scorer prints six decimals: ours prints the same line.
    assert "F1: {:f}\nBLEU: {:f}".format(out["overall"]["EVJVQA-F1"], out["overall"]["EVJVQA-BLEU"]) \
        == scorer["scorer_printed"]
    ours_f1 = np.array([out["per_question"][q]["EVJVQA-F1"] for q in ids])
    ours_bleu = np.array([out["per_question"][q]["EVJVQA-BLEU"] for q in ids])
    assert np.abs(ours_f1 - np.asarray(per_f1, np.float64)).max() <= 1e-6
    assert np.abs(ours_bleu - np.asarray(per_bleu, np.float64)).max() <= 1e-6
    assert out["rules"]["EVJVQA-F1"]["official"] and out["rules"]["EVJVQA-BLEU"]["official"]


@_needs(EVJVQA_BASELINE)
def test_evjvqa_baseline_submission_equals_challenge_scorer(capsys):
    """The published baseline's public-test submission (English, Vietnamese, Japanese answers) with the CLI's
    default options: F1 0.276348 and BLEU 0.193907, as the challenge's scorer printed (scores.txt)."""
    out = _evaluate_cli(capsys, "--predictions", str(EVJVQA_BASELINE / "results.json"), "--references",
                        str(EVJVQA_BASELINE / "ground_truth.json"), "--metrics", "EVJVQA", "--per_question")
    scorer = _load(FIXTURES / "evjvqa_public_test_baseline_scorer.json")
    assert (EVJVQA_BASELINE / "scores.txt").read_text(encoding="utf-8").strip() == scorer["scorer_printed"]
    ids = list(_load(EVJVQA_BASELINE / "ground_truth.json"))
    assert out["num_questions"]["overall"] == len(ids) == 5015
    _check_evjvqa(out, scorer, ids, scorer["per_question_F1"], scorer["per_question_BLEU"])


@_needs(REAL / "evjvqa" / "evjvqa_public_test-lang-qtype-answer.json")
def test_evjvqa_baseline_against_the_released_public_test_file(capsys):
    """The same submission against the public-test file as released (raw answers, with ``language`` fields, which
    the scorer's rule does not read): the scorer run on those answers (as its id -> answer ground truth) gives
    F1 0.276080, BLEU 0.193711; the baseline's own ground_truth.json holds them pre-tokenized (``t - shirt``)."""
    out = _evaluate_cli(capsys, "--predictions", str(EVJVQA_BASELINE / "results.json"), "--references",
                        str(REAL / "evjvqa" / "evjvqa_public_test-lang-qtype-answer.json"), "--metrics", "EVJVQA")
    scorer = _load(FIXTURES / "evjvqa_public_test_file_scorer.json")
    assert abs(out["overall"]["EVJVQA-F1"] - scorer["F1"]) <= 1e-6
    assert abs(out["overall"]["EVJVQA-BLEU"] - scorer["BLEU"]) <= 1e-6
    assert set(out["by_field"]["language"]) == {"en", "ja", "vi"}


@pytest.mark.parametrize("text_mode", ["openvivqa", "official"])
def test_evjvqa_crafted_submission_equals_challenge_scorer(capsys, text_mode):
    """A crafted submission in the challenge's id -> answer form (case, articles, hyphens, possessives, number
    words, trailing punctuation, spaces, empty strings; Japanese with spaces, full-width letters, a Latin word):
    the challenge's rule in every text mode."""
    d = FIXTURES / "evjvqa_crafted"
    out = _evaluate_cli(capsys, "--predictions", str(d / "results.json"), "--references", str(d / "ground_truth.json"),
                        "--metrics", "EVJVQA", "--per_question", "--text_mode", text_mode)
    scorer = _load(d / "scorer.json")
    ids = list(_load(d / "ground_truth.json"))
    _check_evjvqa(out, scorer, ids, [scorer["per_question_F1"][q] for q in ids],
                  [scorer["per_question_BLEU"][q] for q in ids])


# ---- ANLS, VQA accuracy, EM/F1 on crafted answer sets -------------------------------------------------------------


def _crafted():
    recs = _load(FIXTURES / "crafted_answer_sets.json")
    preds = {r["question_id"]: r["prediction"] for r in recs}
    refs = {r["question_id"]: r["answers"] for r in recs}
    return recs, preds, refs


def test_crafted_answer_sets_official_mode():
    """Ten-answer (TextVQA) and one-or-two-answer (ST-VQA) sets with case, articles, hyphens, possessives, number
    words, contractions, trailing punctuation, spaces, tabs, empty predictions: each metric equals its script."""
    recs, preds, refs = _crafted()
    fx = _load(FIXTURES / "crafted_answer_sets_official.json")
    out = evaluator.score(preds, refs, metrics=["ANLS", "VQA-accuracy", "EM", "F1"], text_mode="official",
                          per_question=True)
    pq = out["per_question"]
    for key, metric in [("anls_mmf", "ANLS"), ("vqa_accuracy_mmf_textvqa", "VQA-accuracy"),
                        ("vqa_accuracy_mmf_stvqa", "VQA-accuracy"), ("squad_em", "EM"), ("squad_f1", "F1")]:
        bad = {q: (pq[q][metric], v) for q, v in fx[key].items() if abs(pq[q][metric] - v) > 1e-9}
        assert not bad, (key, bad)
    # vqaEval.py runs the same leave-one-out loop on any answer count, but processes the answers only when the
    # humans disagree: equal wherever they do (and a question has the 3 answers the rule needs).
    disagree = [r["question_id"] for r in recs if len(set(r["answers"])) > 1 and len(r["answers"]) >= 3]
    assert len(disagree) >= 12
    for q in disagree:
        assert abs(pq[q]["VQA-accuracy"] - fx["vqa_accuracy_vqaeval"][q]) <= 1e-9, q
    assert all(out["rules"][m]["official"] for m in ("ANLS", "VQA-accuracy", "EM", "F1"))
    assert out["counts"]["vqa_exact_match_fallback"] == sum(len(r["answers"]) < 3 for r in recs)


def test_crafted_answer_sets_other_modes_are_named_not_official():
    _, preds, refs = _crafted()
    out = evaluator.score(preds, refs, metrics=["ANLS", "EM"], per_question=True)
    assert out["text_mode"] == "openvivqa"
    assert not out["rules"]["ANLS"]["official"] and "Vietnamese-normalized" in out["rules"]["ANLS"]["rule"]
    assert not out["rules"]["EM"]["official"]
    table = evaluator.format_table(out)
    assert "rule (not official): ANLS: Vietnamese-normalized" in table


# ---- real public files: TextVQA answer sets, ViQuAD answers --------------------------------------------------------


@_needs(TEXTVQA_VAL)
def test_textvqa_val_anls_and_vqa_accuracy():
    """TextVQA v0.1 val (4,000 questions, 6-22 human answers) with realistic predictions (perturbed human answers):
    ANLS equals MMF's ST-VQA ANLS evaluator on every question; VQA accuracy equals MMF's TextVQA evaluator on the
    ten-answer questions and vqaEval.py on every question whose answers disagree (any count)."""
    data = _load(TEXTVQA_VAL)["data"]
    fx = _load(FIXTURES / "textvqa_v0.1_val_official.json")
    refs = {str(i): x["answers"] for i, x in enumerate(data)}
    preds = {str(i): p for i, p in enumerate(fx["predictions"])}
    out = evaluator.score(preds, refs, metrics=["ANLS", "VQA-accuracy"], text_mode="official", per_question=True)
    pq = out["per_question"]
    anls = np.array([pq[str(i)]["ANLS"] for i in range(len(data))])
    assert np.abs(anls - np.asarray(fx["anls_mmf"], np.float64)).max() <= 1e-9
    assert abs(out["overall"]["ANLS"] - fx["corpus"]["anls_mmf"]) <= 1e-9
    acc = np.array([pq[str(i)]["VQA-accuracy"] for i in range(len(data))])
    ten = np.array([v is not None for v in fx["vqa_accuracy_mmf"]])
    assert ten.sum() == 655
    mmf = np.array([v if v is not None else np.nan for v in fx["vqa_accuracy_mmf"]])
    assert np.abs(acc[ten] - mmf[ten]).max() <= 1e-9
    assert abs(acc[ten].mean() - fx["corpus"]["vqa_accuracy_mmf_ten_answers"]) <= 1e-9
    disagree = np.array([len(set(a.strip() for a in x["answers"])) > 1 for x in data])
    vqaeval = np.asarray(fx["vqa_accuracy_vqaeval"], np.float64)
    assert np.abs(acc[disagree] - vqaeval[disagree]).max() <= 1e-9
    # The Vietnamese-normalized ANLS is another number (spaced punctuation changes the edit distance).
    viet = evaluator.score(preds, refs, metrics=["ANLS"])["overall"]["ANLS"]
    assert out["overall"]["ANLS"] - viet > 0.02


@_needs(VIQUAD / "dev_ViQuAD.json")
def test_viquad_dev_em_f1_equal_squad_script():
    """UIT-ViQuAD 1.0 dev (2,285 questions, four answers each) with crafted predictions: EM/F1 of the official mode
    equal SQuAD v1.1's evaluate-v1.1.py per question and as a whole."""
    qas = [qa for a in _load(VIQUAD / "dev_ViQuAD.json")["data"] for p in a["paragraphs"] for qa in p["qas"]]
    fx = _load(FIXTURES / "viquad_dev_squad_v1.1.json")
    refs = {str(i): [x["text"] for x in qa["answers"]] for i, qa in enumerate(qas)}
    preds = {str(i): p for i, p in enumerate(fx["predictions"])}
    out = evaluator.score(preds, refs, metrics=["EM", "F1"], text_mode="official", per_question=True)
    em = np.array([out["per_question"][str(i)]["EM"] for i in range(len(qas))])
    f1 = np.array([out["per_question"][str(i)]["F1"] for i in range(len(qas))])
    assert np.abs(em - np.asarray(fx["EM"], np.float64)).max() == 0
    assert np.abs(f1 - np.asarray(fx["F1"], np.float64)).max() <= 1e-9
    assert abs(100 * out["overall"]["EM"] - fx["corpus"]["exact_match"]) <= 1e-9
    assert abs(100 * out["overall"]["F1"] - fx["corpus"]["f1"]) <= 1e-9


@pytest.mark.parametrize("split,em,f1", [("dev", 85.65, 95.19), ("test", 85.59, 94.69)])
@pytest.mark.parametrize("text_mode", ["official", "openvivqa"])
def test_viquad_human_performance_reproduces_table_5(split, em, f1, text_mode):
    """The paper's Table 5 human performance on the official files, every question counted: both EM/F1 rules give
    it to the paper's two decimals; the official one equals the SQuAD script's functions run on the protocol."""
    path = VIQUAD / f"{split}_ViQuAD.json"
    if not path.exists():
        pytest.skip(f"real public file {path} not present (../shared/data/real)")
    qas = [qa for a in _load(path)["data"] for p in a["paragraphs"] for qa in p["qas"]]
    refs = {str(i): [x["text"] for x in qa["answers"]] for i, qa in enumerate(qas)}
    out = evaluator.score({q: r[0] for q, r in refs.items()}, refs, metrics=["EM", "F1"], text_mode=text_mode)
    hp = out["human_performance"]["overall"]
    assert hp["num_questions"] == len(qas)
    assert (round(100 * hp["EM"], 2), round(100 * hp["F1"], 2)) == (em, f1)
    if text_mode == "official":
        script = _load(FIXTURES / "viquad_dev_squad_v1.1.json")["human_performance"][split]
        assert abs(100 * hp["EM"] - script["EM"]) <= 1e-9 and abs(100 * hp["F1"] - script["F1"]) <= 1e-9
        assert out["human_performance"]["rule"] == "SQuAD v1.1 evaluate-v1.1.py"


def test_official_mode_reads_references_as_given():
    """Empty references count as the scripts count them: an empty prediction matches an empty reference in EM and
    ANLS, SQuAD v1.1 gives two empty answers F1 0, and a tenth empty answer keeps the leave-one-out rule."""
    out = evaluator.score({"a": "", "b": "x"}, {"a": ["", "yes"], "b": ["x"] * 9 + [""]},
                          metrics=["ANLS", "EM", "F1", "VQA-accuracy"], text_mode="official", per_question=True)
    assert out["per_question"]["a"] == {"ANLS": 1.0, "EM": 1.0, "F1": 0.0, "VQA-accuracy": 1.0}
    assert out["per_question"]["b"]["VQA-accuracy"] == 1.0 and out["counts"]["vqa_exact_match_fallback"] == 1


def test_dataset_configs_score_with_their_official_rules():
    """TextVQA, ST-VQA and ViQuAD runs score with the official scripts' rules; EVJVQA's metrics are the
    challenge's in every mode, its config keeps the Vietnamese-normalized text for EM and ROUGE-L."""
    from openvivqa_jax.config_files import load_config

    root = Path(__file__).resolve().parents[2] / "configs"
    assert load_config(str(root / "textvqa/m4c.py")).eval.text_mode == "official"
    assert load_config(str(root / "stvqa/m4c.py")).eval.text_mode == "official"
    assert load_config(str(root / "viquad/reader.py"), "viquad").eval.text_mode == "official"
    assert load_config(str(root / "evjvqa/mlpag.py")).eval.text_mode == "openvivqa"
    assert load_config(str(root / "openvivqa/mlpag.py")).eval.text_mode == "openvivqa"


@_needs(VIQUAD / "dev_ViQuAD.json")
def test_viquad_dev_as_published_scores_every_record_as_squad_script(capsys, tmp_path):
    """The 1.0 dev file repeats 7 ids with other questions. As SQuAD's evaluate-v1.1.py does, every one of its
    2,285 records is scored, a repeat with the prediction of its id: with each id's prediction the first answer of
    its first record, each first record is an exact match and each repeat (whose answers differ) is not."""
    data = _load(VIQUAD / "dev_ViQuAD.json")
    records = [qa for article in data["data"] for para in article["paragraphs"] for qa in para["qas"]]
    first: dict[str, dict] = {}
    for qa in records:
        first.setdefault(qa["id"], qa)
    preds = {qid: qa["answers"][0]["text"] for qid, qa in first.items()}
    misses = sum(preds[qa["id"]] not in [a["text"] for a in qa["answers"]] for qa in records)
    assert (len(records), len(preds), misses) == (2285, 2278, 7)
    (tmp_path / "p.json").write_text(json.dumps(preds, ensure_ascii=False), encoding="utf-8")
    out = _evaluate_cli(capsys, "--predictions", str(tmp_path / "p.json"), "--references",
                        str(VIQUAD / "dev_ViQuAD.json"), "--metrics", "EM,F1", "--text_mode", "official",
                        "--per_question")
    assert out["num_questions"]["overall"] == 2285
    assert abs(out["overall"]["EM"] - (2285 - 7) / 2285) <= 1e-12
    renamed = [q for q in out["per_question"] if "#" in q]
    assert len(renamed) == 7 and all(out["per_question"][q]["EM"] == 0 for q in renamed)


@_needs(TEXTVQA_VAL)
def test_textvqa_v01_file_as_published_is_scored_by_position(capsys, tmp_path):
    """TextVQA v0.1 val has no question ids: `evaluate --references` on the file as published names each question
    by its 0-based position, says so in one note, and gives MMF's ANLS (the corpus value of the fixture) for a
    submission keyed by position."""
    fx = _load(FIXTURES / "textvqa_v0.1_val_official.json")
    (tmp_path / "p.json").write_text(json.dumps({str(i): p for i, p in enumerate(fx["predictions"])}),
                                     encoding="utf-8")
    rc = evaluate.run(["--predictions", str(tmp_path / "p.json"), "--references", str(TEXTVQA_VAL),
                       "--metrics", "ANLS", "--text_mode", "official"])
    stdout, stderr = capsys.readouterr()
    assert rc == 0, stderr
    out = json.loads(stdout)
    assert out["num_questions"]["overall"] == 4000
    assert abs(out["overall"]["ANLS"] - fx["corpus"]["anls_mmf"]) <= 1e-9
    notes = [ln for ln in stderr.splitlines() if "named by its 0-based position" in ln]
    assert len(notes) == 1 and "4000 x" in notes[0]


def test_a_textvqa_file_where_some_ids_are_missing_is_one_error(tmp_path):
    """Position ids only for a file with none: a record without an id among records with ids is an error naming
    the record."""
    from openvivqa_jax.evaluation.formats import InputError, load_references

    path = tmp_path / "refs.json"
    path.write_text(json.dumps({"data": [{"question_id": 7, "answers": ["a"]}, {"answers": ["b"]}]}), encoding="utf-8")
    with pytest.raises(InputError, match=r"data\[1\]: no 'question_id' field"):
        load_references(str(path))
