"""The evaluate CLI on a partial submission: missing answers are scored as empty answers by default, the answered
subset's scores are kept beside under their own name, and both counts are in the metrics JSON and the table."""

from __future__ import annotations

import json
import os

from openvivqa_jax import evaluate

REFS = {"1": ["xe đạp"], "2": ["màu đỏ"], "3": ["hai người"], "4": ["phở"], "5": ["hà nội"], "6": ["ba"],
        "7": ["quán cà phê"]}


def _cli(capsys, *argv):
    """Runs the evaluate CLI; returns its exit code, the metrics JSON (written with ``--json``) and stdout +
    stderr with ``--table`` (which prints the tables on stdout), else stderr."""
    argv = [str(a) for a in argv]
    out_file = None
    if "--table" in argv:
        out_file = os.path.join(os.path.dirname(argv[argv.index("--predictions") + 1]), "metrics_out.json")
        argv += ["--json", out_file]
    rc = evaluate.run(argv)
    out, err = capsys.readouterr()
    if rc != 0:
        return rc, None, out + err
    if out_file:
        with open(out_file, encoding="utf-8") as f:
            return rc, json.load(f), out + err
    return rc, json.loads(out), err


def test_two_of_seven_answered_scores_two_sevenths(tmp_path, capsys):
    (tmp_path / "r.json").write_text(json.dumps(REFS, ensure_ascii=False), encoding="utf-8")
    (tmp_path / "p.json").write_text(json.dumps({"1": "xe đạp", "2": "màu đỏ"}, ensure_ascii=False), encoding="utf-8")
    rc, out, err = _cli(capsys, "--predictions", tmp_path / "p.json", "--references", tmp_path / "r.json",
                        "--metrics", "EM,F1,CIDEr", "--table")
    assert rc == 0
    # 2 exact answers of 7 questions; an empty answer has EM 0 and F1 0 against a non-empty reference.
    assert abs(out["overall"]["EM"] - 2 / 7) < 1e-9 and abs(out["overall"]["F1"] - 2 / 7) < 1e-9
    assert out["overall"]["CIDEr"] < 10.0 * 2 / 7 + 1e-6  # at most 2 of 7 questions score, each at most 10
    assert out["num_questions"]["overall"] == 7
    assert out["answered_subset"]["overall"]["EM"] == 1.0 and out["answered_subset"]["num_questions"]["overall"] == 2
    assert out["coverage"] == {"reference_questions": 7, "answered": 2, "missing_scored_empty": 5,
                               "missing_not_scored": 0,
                               "scores": "all reference questions (missing answers scored as empty)"}
    assert "warning: 5 of 7 reference questions have no prediction" in err
    assert "coverage: 7 reference questions, 2 answered, 5 missing (scored as empty answers)" in err
    assert "answered subset only (2 questions):" in err


def test_missing_skip_scores_the_answered_questions_only(tmp_path, capsys):
    (tmp_path / "r.json").write_text(json.dumps(REFS, ensure_ascii=False), encoding="utf-8")
    (tmp_path / "p.json").write_text(json.dumps({"1": "xe đạp", "2": "sai"}, ensure_ascii=False), encoding="utf-8")
    rc, out, err = _cli(capsys, "--predictions", tmp_path / "p.json", "--references", tmp_path / "r.json",
                        "--metrics", "EM", "--missing", "skip", "--table")
    assert rc == 0 and out["overall"]["EM"] == 0.5 and "answered_subset" not in out
    assert out["coverage"]["missing_not_scored"] == 5 and out["coverage"]["answered"] == 2
    assert "coverage: 7 reference questions, 2 answered, 5 missing (not scored: --missing skip)" in err


def test_complete_submission_has_no_subset(tmp_path, capsys):
    (tmp_path / "r.json").write_text(json.dumps({"1": ["a"]}), encoding="utf-8")
    (tmp_path / "p.json").write_text(json.dumps({"1": "a"}), encoding="utf-8")
    rc, out, err = _cli(capsys, "--predictions", tmp_path / "p.json", "--references", tmp_path / "r.json",
                        "--metrics", "EM")
    assert rc == 0 and out["overall"]["EM"] == 1.0 and "answered_subset" not in out
    assert out["coverage"]["missing_scored_empty"] == 0 and err == ""
