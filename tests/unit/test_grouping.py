"""Scores per value of qa_type / kind / language (openvivqa_jax/evaluation/grouping.py) in the metrics files,
the evaluate CLI and its --table."""

from __future__ import annotations

import json
import re

import pytest

from openvivqa_jax import evaluate
from openvivqa_jax.evaluation import evaluator, grouping

RECORDS = [
    dict(question_id="q1", question="có bao nhiêu xe máy ?", prediction="có hai xe máy", references=["có hai xe máy"],
         qa_type=0, kind="count", language="vi"),
    dict(question_id="q2", question="có mấy ô ?", prediction="có ba cái ô", references=["có hai cái ô"],
         qa_type=0, kind="count", language="vi"),
    dict(question_id="q3", question="xe máy màu gì ?", prediction="xe máy có màu đỏ", references=["xe máy có màu đỏ"],
         qa_type=0, kind="colour", language="vi"),
    dict(question_id="q4", question="ô tô màu gì ?", prediction="ô tô có màu xanh", references=["ô tô có màu vàng"],
         qa_type=0, kind="colour", language="vi"),
    # Punctuation and case differ only: an exact match.
    dict(question_id="q5", question="cửa hàng này tên gì ?", prediction="cửa hàng tên là an",
         references=["Cửa hàng tên là An."], qa_type=1, kind="name", language="vi"),
    # No kind, no language (as a real dataset's record): in no part of those fields.
    dict(question_id="q6", question="đây là đường nào ?", prediction="đường lê lợi", references=["đường hai bà trưng"],
         qa_type=1),
]
METRICS = ["BLEU", "ROUGE-L", "CIDEr", "EM", "F1"]


def test_scores_per_kind_language_and_qa_type(tmp_path):
    result = evaluator.evaluate_split(RECORDS, tmp_path, "dev", metrics=METRICS)
    by = result["by_field"]
    assert set(by) == {"qa_type", "kind", "language"}
    # Counted by hand from RECORDS.
    assert {v: (r["num_questions"], r["exact_match"]) for v, r in by["kind"].items()} == {
        "colour": (2, 0.5), "count": (2, 0.5), "name": (1, 1.0)}
    assert {v: (r["num_questions"], r["exact_match"]) for v, r in by["qa_type"].items()} == {
        "non_text": (4, 0.5), "text": (2, 0.5)}
    assert by["language"]["vi"]["num_questions"] == 5 and by["language"]["vi"]["exact_match"] == pytest.approx(0.6)
    # A one-question part has no CIDEr (log(1) IDF); the others are scored as if they were the whole corpus.
    assert by["kind"]["name"]["CIDEr"] is None
    for kind, qids in (("count", ("q1", "q2")), ("colour", ("q3", "q4"))):
        alone = evaluator.score({q: r["prediction"] for r in RECORDS for q in [r["question_id"]] if q in qids},
                                {r["question_id"]: r["references"] for r in RECORDS if r["question_id"] in qids},
                                metrics=["CIDEr", "ROUGE-L", "BLEU-4"])["overall"]
        assert by["kind"][kind]["CIDEr"] == pytest.approx(alone["CIDEr"])
        assert by["kind"][kind]["ROUGE-L"] == pytest.approx(alone["ROUGE-L"])
        assert by["kind"][kind]["BLEU-4"] == pytest.approx(alone["BLEU-4"])
    # ROUGE-L of q3 (identical) is 1 and of q4 ("ô tô có màu xanh" vs "ô tô có màu vàng": LCS 4 of 5 tokens both
    # ways, so precision = recall = F = 0.8) is 0.8.
    assert by["kind"]["colour"]["ROUGE-L"] == pytest.approx((1.0 + 0.8) / 2)
    written = json.loads((tmp_path / "dev_metrics.json").read_text(encoding="utf-8"))
    assert written["by_field"]["kind"]["count"]["num_questions"] == 2
    preds = {r["question_id"]: r for r in json.loads((tmp_path / "dev_predictions.json").read_text(encoding="utf-8"))}
    assert preds["q1"]["kind"] == "count" and preds["q1"]["language"] == "vi"
    assert "kind" not in preds["q6"] and "language" not in preds["q6"]
    table = evaluator.format_table(result)
    assert re.search(r"^count\s+2\s+50\.0% \(1/2\)\s+\d+\.\d{3}$", table, re.M), table
    assert re.search(r"^name\s+1\s+100\.0% \(1/1\)\s+n/a$", table, re.M), table


def test_real_dataset_records_keep_the_text_non_text_split(tmp_path):
    recs = [{k: v for k, v in r.items() if k not in ("kind", "language")} for r in RECORDS]
    result = evaluator.evaluate_split(recs, None, "test", metrics=["CIDEr"])
    assert set(result["by_field"]) == {"qa_type"}
    assert result["num_questions"]["text_qa"] == 2 and result["num_questions"]["non_text_qa"] == 4


def test_unknown_qa_types_only_give_no_parts():
    out = grouping.field_scores(["a b"], [["a b"]], {"qa_type": grouping.qa_type_labels([-1]), "kind": [""]},
                                ["CIDEr"])
    assert out == {}


def test_exact_match_ignores_punctuation_tokens_only():
    assert grouping.exact_match(["có hai xe máy", "có hai xe", "a , b"], [["có hai xe máy ."], ["có hai xe máy"],
                                                                         ["a b"]]).tolist() == [1.0, 0.0, 1.0]


def test_evaluate_cli_reports_per_kind(tmp_path, capsys):
    path = tmp_path / "dev_predictions.json"
    path.write_text(json.dumps(RECORDS, ensure_ascii=False), encoding="utf-8")
    out_json = tmp_path / "result.json"
    assert evaluate.run(["--predictions", str(path), "--metrics", "CIDEr,EM", "--table", "--json", str(out_json)]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out_json.read_text(encoding="utf-8"))
    colour = result["by_field"]["kind"]["colour"]
    assert set(colour) == {"num_questions", "exact_match", "CIDEr", "EM"}  # METEOR etc. not requested
    assert (colour["num_questions"], colour["exact_match"], colour["EM"]) == (2, 0.5, 0.5)
    # --table: the table is the command's output (stdout), not JSON; stderr stays empty
    assert re.search(r"^by kind\s+questions\s+exact match\s+CIDEr$", out, re.M), out
    assert re.search(r"^colour\s+2\s+50\.0% \(1/2\)", out, re.M), out
    assert not out.lstrip().startswith("{") and err == ""


def test_evaluate_cli_table_and_json_on_stdout(tmp_path, capsys):
    """``--json -`` with ``--table``: the JSON first, then the table, both on stdout."""
    path = tmp_path / "dev_predictions.json"
    path.write_text(json.dumps(RECORDS, ensure_ascii=False), encoding="utf-8")
    assert evaluate.run(["--predictions", str(path), "--metrics", "EM", "--table", "--json", "-"]) == 0
    out, _ = capsys.readouterr()
    decoded, end = json.JSONDecoder().raw_decode(out)
    assert decoded["by_field"]["kind"]["colour"]["EM"] == 0.5
    assert re.search(r"^by kind\s+questions\s+exact match", out[end:], re.M), out[end:]


def test_field_scalars_name_every_part_by_field_and_value(tmp_path):
    result = evaluator.evaluate_split(RECORDS, tmp_path, "dev", metrics=["EM"])
    scalars = grouping.field_scalars(result["by_field"], "dev")
    # Exact match counted by hand from RECORDS (as in the test above).
    assert scalars == pytest.approx({
        "dev/qa_type/non_text/exact_match": 0.5, "dev/qa_type/text/exact_match": 0.5,
        "dev/kind/count/exact_match": 0.5, "dev/kind/colour/exact_match": 0.5, "dev/kind/name/exact_match": 1.0,
        "dev/language/vi/exact_match": 0.6})
    assert grouping.field_scalars({}, "dev") == {}


def test_the_rules_are_logged_once_per_process_and_again_when_they_change(caplog, absl_info):
    import logging

    evaluator._LOGGED_RULES.clear()
    refs = {"1": ["a red sign"], "2": ["two"]}
    preds = {"1": "a red sign", "2": "three"}

    def headers():
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith("evaluation rules")]

    with caplog.at_level(logging.INFO, logger="absl"):
        for _ in range(3):  # a training run scores dev at each evaluation with the same rules
            out = evaluator.score(preds, refs, metrics=["EM", "F1"])
        assert headers() == ["evaluation rules (text mode openvivqa):"]
        assert out["rules"], out  # every result still carries its rules
        evaluator.score(preds, refs, metrics=["EM", "F1"], text_mode="official")
    assert headers() == ["evaluation rules (text mode openvivqa):", "evaluation rules (text mode official):"]
