"""``python -m openvivqa_jax.evaluate``: input formats, error messages, and equality with evaluate_split."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from conftest import needs_meteor  # noqa: E402
from openvivqa_jax import evaluate  # noqa: E402
from openvivqa_jax.evaluation import evaluate_split, format_table, score  # noqa: E402

DATA = Path("/work/shared/data")
FAST = ["BLEU", "ROUGE-L", "CIDEr", "ANLS", "VQA-accuracy", "EM", "F1"]

# Records in the layout of the OpenViVQA public release (from its README examples).
PUBLIC = {
    "images": {"0": "00000000000.jpg", "1": "00000000001.jpg", "2": "00000000002.jpg"},
    "annotations": {
        "0": {"image_id": 0, "question": "cửa tiệm này tên gì?", "answer": "cửa tiệm này tên mộc"},
        "1": {"image_id": 1, "question": "cửa tiệm cắt tóc nam tên gì?", "answer": "cửa tiệm cắt tóc bầu"},
        "2": {"image_id": 2, "question": "quán bia saigon nằm trên con đường nào?", "answer": "đường tạ hiện"},
    },
}
VIVQA_CSV = (
    ",question,answer,img_id,type\n"
    "0,màu của miếng vá là gì,màu xanh dương,557067,2\n"
    "1,màu của áo là gì,màu cam,436394,2\n"
    "2,màu của áo là gì,màu xanh dương,541050,2\n"
)


def _write(path: Path, obj) -> str:
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    return str(path)


def _cli(capsys, *argv):
    rc = evaluate.run([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if rc == 0 else None), err


def _score(tmp_path, capsys, refs_name: str, refs, preds, *metrics: str, preds_name: str = "p.json") -> dict:
    """Writes ``refs`` to ``tmp_path/refs_name`` and ``preds`` to ``tmp_path/preds_name``, scores them with the
    command line (``--metrics *metrics``), checks that it succeeded and returns its JSON output."""
    refs = _write(tmp_path / refs_name, refs)
    preds = _write(tmp_path / preds_name, preds)
    rc, out, err = _cli(capsys, "--predictions", preds, "--references", refs, "--metrics", *metrics)
    assert rc == 0, err
    return out


# ---- reference formats ------------------------------------------------------------------------------


def _exact_preds(answers: dict) -> dict:
    return {q: a[0] if isinstance(a, list) else a for q, a in answers.items()}


def test_openvivqa_public_format(tmp_path, capsys):
    preds = {q: a["answer"] for q, a in PUBLIC["annotations"].items()}
    out = _score(tmp_path, capsys, "dev.json", PUBLIC, preds, "EM", "F1", "CIDEr")
    assert out["inputs"]["references_format"] == "openvivqa-public"
    assert out["num_questions"]["overall"] == 3
    assert out["overall"]["EM"] == 1.0 and out["overall"]["F1"] == 1.0
    assert "text_qa" not in out  # the public release has no QA type


def test_openvivqa_list_format_with_qa_types(tmp_path, capsys):
    data = {
        "images": [{"id": 0, "filename": "0.jpg"}, {"id": 1, "filename": "1.jpg"}],
        "annotations": [
            {"id": 10, "image_id": 0, "question": "tên gì?", "answers": ["cửa tiệm mộc"], "QA-type": 1},
            {"id": 11, "image_id": 1, "question": "màu gì?", "answers": ["màu đỏ"], "QA-type": 0},
            {"id": 12, "image_id": 1, "question": "ở đâu?", "answers": ["trên bàn"], "QA-type": 0},
        ],
    }
    preds = {"10": "cửa tiệm mộc", "11": "màu xanh", "12": "trên bàn"}
    out = _score(tmp_path, capsys, "dev.json", data, preds, "EM")
    assert out["inputs"]["references_format"] == "openvivqa-list"
    assert out["overall"]["EM"] == pytest.approx(2 / 3)
    assert out["text_qa"]["EM"] == 1.0 and out["non_text_qa"]["EM"] == 0.5
    assert out["num_questions"] == {"overall": 3, "text_qa": 1, "non_text_qa": 2, "unknown_qa_type": 0}


def test_vivqa_csv_uses_row_index(tmp_path, capsys):
    preds = {"0": "màu xanh dương", "1": "màu đỏ", "2": "Màu xanh dương."}
    out = _score(tmp_path, capsys, "test.csv", VIVQA_CSV, preds, "EM")
    assert out["inputs"]["references_format"] == "vivqa-csv"
    assert out["overall"]["EM"] == pytest.approx(2 / 3)


def test_squad_v11_format(tmp_path, capsys):
    data = {
        "version": "1.1",
        "data": [
            {
                "title": "Hà Nội",
                "paragraphs": [
                    {
                        "context": "Hà Nội là thủ đô của Việt Nam.",
                        "qas": [
                            {"id": "s1", "question": "Thủ đô?", "answers": [{"text": "Hà Nội", "answer_start": 0}]},
                            {
                                "id": "s2",
                                "question": "Của nước nào?",
                                "answers": [{"text": "Việt Nam", "answer_start": 21}, {"text": "nước Việt Nam", "answer_start": 17}],
                            },
                        ],
                    }
                ],
            }
        ],
    }
    out = _score(tmp_path, capsys, "squad.json", data, {"s1": "hà nội", "s2": "nước việt"}, "EM", "F1")
    assert out["inputs"]["references_format"] == "squad-v1.1"
    # s2: vs "nước việt nam": P = 1, R = 2/3 -> F1 = 0.8 (max over answers).
    assert out["overall"]["EM"] == 0.5
    assert out["overall"]["F1"] == pytest.approx((1 + 0.8) / 2)
    # Human performance: s2 has two answers; "việt nam" vs "nước việt nam" F1 0.8 both ways, EM 0.
    assert out["human_performance"]["overall"] == {"EM": 0.0, "F1": pytest.approx(0.8), "num_questions": 1}


@pytest.mark.parametrize("name", ["textvqa", "ST-VQA"])
def test_textvqa_and_stvqa_formats(tmp_path, capsys, name):
    answers = ["coca cola"] * 3 + ["coke"] * 7
    data = {
        "dataset_name": name,
        "data": [
            {"question_id": 34602, "question": "what brand?", "image_id": "x", "answers": answers},
            {"question_id": 34603, "question": "what number?", "image_id": "y", "answers": ["12"]},
        ],
    }
    preds = [{"question_id": 34602, "answer": "Coca Cola"}, {"question_id": 34603, "answer": "12"}]
    out = _score(tmp_path, capsys, "val.json", data, preds, "VQA-accuracy", "ANLS")
    assert out["inputs"]["predictions_format"] == "answer-records"
    assert out["overall"]["VQA-accuracy"] == pytest.approx((0.9 + 1.0) / 2)
    assert out["text_qa"]["VQA-accuracy"] == out["overall"]["VQA-accuracy"]


def test_plain_mapping_references_and_codalab_predictions(tmp_path, capsys):
    out = _score(tmp_path, capsys, "r.json", {"a": ["xe máy", "xe"], "b": ["đỏ"]},
                 {"a": "xe", "b": "xanh"}, "EM,ANLS", preds_name="results.json")  # Codalab: {question_id: answer}
    assert out["inputs"]["references_format"] == "mapping"
    assert out["overall"]["EM"] == 0.5


@pytest.mark.skipif(not DATA.exists(), reason="shared sample data not present")
def test_real_sample_files(tmp_path, capsys):
    ex = json.loads((DATA / "openvivqa_examples/examples_data.json").read_text(encoding="utf-8"))
    preds = _write(tmp_path / "p.json", {q: a["answer"] for q, a in ex["annotations"].items()})
    rc, out, _ = _cli(capsys, "--predictions", preds, "--references", DATA / "openvivqa_examples/examples_data.json", "--metrics", "EM")
    assert rc == 0 and out["overall"]["EM"] == 1.0 and out["num_questions"]["overall"] == len(ex["annotations"])
    import csv

    with open(DATA / "vivqa_sample/test.csv", encoding="utf-8") as f:
        rows = list(csv.reader(f))[1:]
    preds = _write(tmp_path / "v.json", {r[0]: r[2] for r in rows})
    rc, out, _ = _cli(capsys, "--predictions", preds, "--references", DATA / "vivqa_sample/test.csv", "--metrics", "EM")
    assert rc == 0 and out["overall"]["EM"] == 1.0 and out["num_questions"]["overall"] == len(rows)


# ---- errors and counts -------------------------------------------------------------------------------


def test_unreadable_files_give_one_line_errors(tmp_path, capsys):
    good = _write(tmp_path / "p.json", {"a": "x"})
    missing = tmp_path / "nope.json"
    rc, _, err = _cli(capsys, "--predictions", missing, "--references", good)
    assert rc == 2 and str(missing) in err and len(err.strip().splitlines()) == 1
    broken = _write(tmp_path / "broken.json", '{"a": ["x"')
    rc, _, err = _cli(capsys, "--predictions", good, "--references", broken)
    assert rc == 2 and "broken.json" in err and "invalid JSON" in err and len(err.strip().splitlines()) == 1
    bad_record = _write(tmp_path / "bad.json", {"images": {}, "annotations": {"q7": {"question": "x"}}})
    rc, _, err = _cli(capsys, "--predictions", good, "--references", bad_record)
    assert rc == 2 and "'q7'" in err and "bad.json" in err and len(err.strip().splitlines()) == 1
    rc, _, err = _cli(capsys, "--predictions", good, "--references", good, "--metrics", "BLEU-9")
    assert rc == 2 and "unknown metric" in err


def test_missing_ids_are_counted_and_reported(tmp_path, capsys):
    refs = _write(tmp_path / "r.json", {"a": ["xe"], "b": ["đỏ"]})
    preds = _write(tmp_path / "p.json", {"a": "xe", "b": "đỏ", "zz1": "x", "zz2": "y"})
    rc, out, err = _cli(capsys, "--predictions", preds, "--references", refs, "--metrics", "EM")
    assert rc == 0
    assert out["counts"]["missing_in_references"] == 2
    assert out["overall"]["EM"] == 1.0 and out["num_questions"]["overall"] == 2
    assert len(err.strip().splitlines()) == 1 and "2 of 4" in err and "r.json" in err and "'zz1'" in err
    none = _write(tmp_path / "none.json", {"zz": "x"})
    rc, _, err = _cli(capsys, "--predictions", none, "--references", refs)
    assert rc == 1 and "none of the 1 prediction ids" in err


def test_module_entry_point_subprocess(tmp_path):
    refs = _write(tmp_path / "r.json", {"a": ["xe máy"], "b": ["đỏ"]})
    preds = _write(tmp_path / "p.json", {"a": "xe máy", "b": "đỏ"})
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-m", "openvivqa_jax.evaluate", "--predictions", preds, "--references", refs, "--metrics", "EM", "ROUGE-L"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["overall"] == {"ROUGE-L": 1.0, "EM": 1.0}
    proc = subprocess.run(
        [sys.executable, "-m", "openvivqa_jax.evaluate", "--predictions", str(tmp_path / "x.json"), "--references", refs],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == "" and "x.json" in proc.stderr


# ---- trainer evaluation == CLI ---------------------------------------------------------------------------


def _records():
    words = "cửa tiệm tên mộc màu xanh đỏ đường tạ hiện quán cà phê xe máy hai người".split()
    recs = []
    for i in range(40):
        ref = " ".join(words[(i + k) % len(words)] for k in range(2 + i % 5))
        pred = " ".join(ref.split()[: 1 + i % 4]) + (" phở" if i % 3 else "")
        refs = [ref] + ([ref + " ạ"] if i % 4 == 0 else [])
        recs.append({"question_id": f"dev_{i}", "question": "?", "prediction": pred, "references": refs, "qa_type": i % 2})
    return recs


def _compare(a, b):
    for group in ("overall", "text_qa", "non_text_qa"):
        assert a[group] == b[group], group
    assert a["num_questions"] == b["num_questions"]
    assert a["notes"] == b["notes"] and a["counts"] == b["counts"]


def test_evaluate_split_equals_cli(tmp_path, capsys):
    recs = _records()
    metrics = evaluate_split(recs, tmp_path, "dev", metrics=FAST)
    assert json.loads((tmp_path / "dev_metrics.json").read_text(encoding="utf-8")) == metrics
    assert evaluate_split(recs, None, "dev", metrics=FAST) == metrics  # other JAX processes: no files
    written = json.loads((tmp_path / "dev_predictions.json").read_text(encoding="utf-8"))
    assert [r["question_id"] for r in written] == [r["question_id"] for r in recs]
    assert set(written[0]) == {"question_id", "question", "prediction", "references", "qa_type"}
    # The predictions file alone (it carries the references) ...
    rc, out, err = _cli(capsys, "--predictions", tmp_path / "dev_predictions.json", "--metrics", *FAST)
    assert rc == 0, err
    _compare(metrics, out)
    # ... and with the references in a separate {question_id: [answers]} file (no QA types there).
    refs = _write(tmp_path / "refs.json", {r["question_id"]: r["references"] for r in recs})
    preds = _write(tmp_path / "preds.json", {r["question_id"]: r["prediction"] for r in recs})
    rc, out2, err = _cli(capsys, "--predictions", preds, "--references", refs, "--metrics", *FAST)
    assert rc == 0, err
    assert out2["overall"] == metrics["overall"]
    assert "text_qa" in metrics and "text_qa" not in out2
    table = format_table(metrics)
    assert "CIDEr" in table and "text_qa" in table


@pytest.mark.slow
@needs_meteor()
def test_evaluate_split_equals_cli_with_meteor(tmp_path, capsys):
    recs = _records()[:12]
    metrics = evaluate_split(recs, tmp_path, "dev", metrics=["METEOR-vi", "CIDEr"])
    assert metrics["overall"]["METEOR-vi"] is not None, metrics["notes"]
    rc, out, err = _cli(capsys, "--predictions", tmp_path / "dev_predictions.json", "--metrics", "METEOR-vi", "CIDEr")
    assert rc == 0, err
    _compare(metrics, out)


def test_score_accepts_int_ids_like_json_loaders():
    a = score({1: "xe"}, {"1": ["xe"]}, metrics=["EM"])
    assert a["overall"]["EM"] == 1.0 and a["num_questions"]["overall"] == 1


def test_wmd_relevance_hand_computed(tmp_path, capsys):
    """WMDRel = 1 - WMD/2 over unit vectors; unknown words are their own orthogonal direction.

    a: "xe máy đỏ" (1/3 each) vs "chiếc xe máy màu đỏ" (1/5 each): xe, máy, đỏ keep 1/5 in place at cost 0;
       the 3 x 2/15 surplus must reach the unknown "chiếc"/"màu" at cost sqrt(2): WMD = 0.4 sqrt(2).
    b: "màu xanh" vs "xanh lá": xanh stays, "màu" -> "lá" (both unknown) at sqrt(2): WMD = 0.5 sqrt(2).
    """
    refs = _write(tmp_path / "r.json", {"a": ["chiếc xe máy màu đỏ"], "b": ["xanh lá"]})
    preds = _write(tmp_path / "p.json", {"a": "xe máy đỏ", "b": "Màu xanh"})
    vec = _write(tmp_path / "v.txt", "3 2\nxe 1 0\nMáy 0.9 0.1\nxanh 0 1\n")
    rc, out, err = _cli(capsys, "--predictions", preds, "--references", refs, "--metrics", "WMDRel", "--vectors", vec)
    assert rc == 0, err
    expected = ((1 - 0.4 * 2**0.5 / 2) + (1 - 0.5 * 2**0.5 / 2)) / 2
    assert out["overall"]["WMDRel"] == pytest.approx(expected, abs=1e-9)
    assert out["counts"]["wmd_unknown_tokens"] == 6
    rc, _, err = _cli(capsys, "--predictions", preds, "--references", refs, "--metrics", "WMDRel", "--vectors", tmp_path / "none.vec")
    assert rc == 2 and "none.vec" in err
    rc, out, _ = _cli(capsys, "--predictions", preds, "--references", refs, "--metrics", "WMDRel")
    assert out["overall"]["WMDRel"] is None and any("WMDRel unavailable" in n for n in out["notes"])
