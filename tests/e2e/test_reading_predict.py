"""``python -m openvivqa_jax.reading.predict``: a reader trained a few steps answers another SQuAD-form file;
the answers are cut from their passages, the scores are those of ``python -m openvivqa_jax.evaluate`` on the same
predictions, repeated ids of the official ViQuAD dev file are renamed as the builder and the scorer rename them, and
bad input or an output folder that is an input stop with one ``error:`` line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import ROOT, message_lines, run_main_cli, subprocess_env

from tfds_builders.viquad import synthetic

REAL_DEV = Path(ROOT).parent / "shared" / "data" / "real" / "viquad" / "dev_ViQuAD.json"


def _cli(module: str, *args, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=ROOT, env=subprocess_env(),
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny DrQA reader trained 4 steps on the synthetic set (12 train questions): its run folder."""
    tmp = tmp_path_factory.mktemp("reader")
    tiny = json.dumps({"name": "synthetic_tiny", "synthetic": True,
                       "synthetic_sizes": {"train": 12, "dev": 3, "test": 3}})
    res = run_main_cli("--config", "configs/viquad/reader.py:drqa_synthetic", "--workdir", tmp / "run",
                       f"--config.data.data_dir={tmp / 'tfds'}", f"--config.data.builder_config={tiny}",
                       "--config.model.word_dim=8", "--config.model.char_channels=4", "--config.model.char_dim=4",
                       "--config.model.num_layers=1", "--config.model.hidden=4", "--config.model.max_seq_len=96",
                       "--config.train.batch_size=4", "--config.train.num_train_steps=4",
                       "--config.train.checkpoint_every_steps=2", "--config.train.eval_every_steps=2",
                       "--config.eval.batch_size=8", "--config.train.warmup_steps=2")
    assert res.returncode == 0, res.stderr[-3000:]
    return tmp / "run"


def _evaluate(preds: Path, refs: Path) -> dict:
    res = _cli("openvivqa_jax.evaluate", "--predictions", preds, "--references", refs, "--text_mode", "official",
               "--metrics", "EM,F1")
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout)["overall"]


@pytest.mark.slow  # trains a reader in a subprocess: about a minute on two loaded cores
def test_predict_answers_from_the_passages_and_scores_as_evaluate(run, tmp_path):
    data = synthetic.make_split("dev", 4, seed=7)
    # SQuAD 2.0's unanswerable form: answered, not scored.
    para = data["data"][0]["paragraphs"][0]
    para["qas"].append({"id": "no-answer", "question": "Ai là người đầu tiên?", "answers": [],
                        "is_impossible": True})
    src = tmp_path / "other.json"
    src.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    res = _cli("openvivqa_jax.reading.predict", "--workdir", run, "--input", src, "--output", tmp_path / "out")
    assert res.returncode == 0, res.stderr[-3000:]
    preds = json.loads((tmp_path / "out" / "predictions.json").read_text(encoding="utf-8"))
    passages = {qa["id"]: p["context"] for a in data["data"] for p in a["paragraphs"] for qa in p["qas"]}
    assert sorted(preds) == sorted(passages)
    for qid, answer in preds.items():
        assert answer and answer in passages[qid], (qid, answer)
    spans = json.loads((tmp_path / "out" / "spans.json").read_text(encoding="utf-8"))
    for qid, sp in spans.items():
        assert passages[qid][sp["start"]:sp["end"]] == preds[qid]
    metrics = json.loads((tmp_path / "out" / "input_metrics.json").read_text(encoding="utf-8"))
    # The scorer reads the unanswerable question as an empty reference list: score the answered ones only.
    scored = {k: v for k, v in preds.items() if k != "no-answer"}
    (tmp_path / "scored.json").write_text(json.dumps(scored, ensure_ascii=False), encoding="utf-8")
    want = _evaluate(tmp_path / "scored.json", src)
    assert metrics["overall"]["EM"] == pytest.approx(want["EM"], abs=1e-9)
    assert metrics["overall"]["F1"] == pytest.approx(want["F1"], abs=1e-9)
    assert metrics["decoding"]["counts"]["without_answers"] == 1
    assert "1 questions without answers answered, not scored" in res.stdout
    # An output that is the run folder or the input itself is refused before any work.
    for out in (run, src):
        bad = _cli("openvivqa_jax.reading.predict", "--workdir", run, "--input", src, "--output", out)
        lines = message_lines(bad.stderr)
        assert bad.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), bad.stderr[-2000:]


def _squad_questions(path: Path) -> list[tuple[str, str, str]]:
    """``(id, question, passage)`` of every question, in file order (read here, apart from the code under test)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return [(str(qa["id"]), qa["question"], p["context"]) for a in data["data"] for p in a["paragraphs"]
            for qa in p["qas"]]


@pytest.mark.skipif(not REAL_DEV.exists(), reason=f"{REAL_DEV} missing (the official UIT-ViQuAD 1.0 dev file)")
def test_official_dev_file_repeated_ids_are_renamed_as_the_builder_does():
    """The official dev file repeats 3 ids (10 questions), each time with another question: the n-th question of an
    id (n >= 2, file order) is ``<id>#<n>``, as the builder and the scorer name it (7 renamed); the 2,285 questions
    are all kept, in file order."""
    from openvivqa_jax.reading.predict import read_squad_file

    questions = _squad_questions(REAL_DEV)
    seen = defaultdict(list)
    want = []
    for qid, q, p in questions:
        seen[qid].append((q, p))
        want.append(qid if len(seen[qid]) == 1 else f"{qid}#{len(seen[qid])}")
    repeated = {k: v for k, v in seen.items() if len(v) > 1}
    assert len(questions) == 2285 and len(repeated) == 3 and sum(map(len, repeated.values())) == 10
    assert all(len(set(v)) == len(v) for v in repeated.values())  # another question each time: none dropped
    records, counts = read_squad_file(str(REAL_DEV))
    assert [r["question_id"] for r in records] == want
    assert counts["questions"] == 2285 and counts["repairs"] == {"repeated_id_renamed": 7}


@pytest.mark.slow  # the trained reader of the fixture
@pytest.mark.skipif(not REAL_DEV.exists(), reason=f"{REAL_DEV} missing (the official UIT-ViQuAD 1.0 dev file)")
def test_official_dev_paragraphs_with_repeated_ids_score_as_evaluate(run, tmp_path):
    """The paragraphs of the official dev file that hold its repeated ids, answered by the reader: every question
    (renamed ones included) has an answer, and EM/F1 are those of ``openvivqa_jax.evaluate`` on the same files."""
    data = json.loads(REAL_DEV.read_text(encoding="utf-8"))
    count = defaultdict(int)
    for a in data["data"]:
        for p in a["paragraphs"]:
            for qa in p["qas"]:
                count[str(qa["id"])] += 1
    keep = [{"title": a["title"], "paragraphs": [p for p in a["paragraphs"]
                                                 if any(count[str(qa["id"])] > 1 for qa in p["qas"])]}
            for a in data["data"]]
    keep = [a for a in keep if a["paragraphs"]]
    src = tmp_path / "dev_repeats.json"
    src.write_text(json.dumps({"version": "1.1", "data": keep}, ensure_ascii=False), encoding="utf-8")
    res = _cli("openvivqa_jax.reading.predict", "--workdir", run, "--input", src, "--output", tmp_path / "out")
    assert res.returncode == 0, res.stderr[-3000:]
    preds = json.loads((tmp_path / "out" / "predictions.json").read_text(encoding="utf-8"))
    n = sum(len(p["qas"]) for a in keep for p in a["paragraphs"])
    assert len(preds) == n and sum("#" in k for k in preds) == 7
    metrics = json.loads((tmp_path / "out" / "input_metrics.json").read_text(encoding="utf-8"))["overall"]
    want = _evaluate(tmp_path / "out" / "predictions.json", src)
    assert (metrics["EM"], metrics["F1"]) == (pytest.approx(want["EM"], abs=1e-9), pytest.approx(want["F1"], abs=1e-9))


@pytest.mark.parametrize("link", ["same", "hardlink"])
def test_an_input_that_is_a_file_the_command_writes_is_refused(tmp_path, link):
    """``--input OUT/predictions.json --output OUT`` (or a hard link to it there) would be replaced by the answers:
    refused in one line before the run folder is read, the file left as it was."""
    from openvivqa_jax.reading import ReadingError
    from openvivqa_jax.reading.predict import predict_file

    out = tmp_path / "out"
    out.mkdir()
    src = tmp_path / "other.json"
    src.write_text(json.dumps(synthetic.make_split("dev", 1, seed=3), ensure_ascii=False), encoding="utf-8")
    before = src.read_bytes()
    if link == "same":
        src = src.rename(out / "predictions.json")
    else:
        os.link(src, out / "spans.json")
    with pytest.raises(ReadingError, match=r"^--input .*: is the file .*(predictions|spans)\.json this command "
                                           r"writes") as e:
        predict_file(str(tmp_path / "no_run"), str(src), str(out))
    assert "\n" not in str(e.value) and src.read_bytes() == before
