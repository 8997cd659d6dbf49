"""The builders on the real public files as published, flaws included (``../shared/data/real/`` and
``../shared/data/``, see their READMEs; skipped, saying why, where a folder is missing).

- UIT-ViQuAD 1.0 dev/test (``HySonLab/ViDeBERTa``, ``fine-tuning/ORQA/data/``) and the UIT-ViQuAD 2.0 fold files
  (``phanxuanphucnd/MRC`` at ``8c6c480``, ``data/uit-visquad/dev-*.json``);
- the EVJVQA public test with language tags (``phanxuanphucnd/EVJVQA``, ``data/test/``) and six of its photos;
- the first 300/100 rows of ViVQA's train/test CSVs (``kh4nh12/ViVQA``);
- seven OpenViVQA examples in the public release's schema (``hieunghia-pat/OpenViVQA-dataset``).

Every expected count is recounted here from the JSON/CSV with plain Python, not with the builders' code.
"""

from __future__ import annotations

import collections
import csv
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import SHARED, build_tfds, read_examples, write_jpeg
from openvivqa_jax.data import build_check
from openvivqa_jax.evaluation import squad
from tfds_builders import readers
from tfds_builders.evjvqa import Builder as EvjvqaBuilder
from tfds_builders.evjvqa import EvjvqaConfig
from tfds_builders.openvivqa import Builder as OpenVivqaBuilder
from tfds_builders.openvivqa import OpenVivqaConfig
from tfds_builders.viquad import Builder as ViquadBuilder
from tfds_builders.viquad import ViquadConfig
from tfds_builders.vivqa import Builder as VivqaBuilder
from tfds_builders.vivqa import VivqaConfig

REAL = Path(SHARED) / "data" / "real"
VIQUAD = REAL / "viquad"
EVJVQA = REAL / "evjvqa"
VIVQA_SAMPLE = Path(SHARED) / "data" / "vivqa_sample"
OPENVIVQA_EXAMPLES = Path(SHARED) / "data" / "openvivqa_examples"


def _need(folder: Path):
    if not folder.is_dir():
        pytest.skip(f"{folder} not present (the real public files of ../shared/data)")


def _text(v) -> str:
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


def _spans(builder, split) -> dict[str, dict]:
    """{question_id: {passage, texts, starts, ends, answers}} of a built ViQuAD split."""
    out = {}
    for ex in builder.as_data_source()[split]:
        out[_text(ex["question_id"])] = {
            "passage": _text(ex["passage"]), "texts": [_text(t) for t in ex["answer_texts"]],
            "starts": [int(s) for s in ex["answer_starts"]], "ends": [int(e) for e in ex["answer_ends"]]}
    return out


# ============================================================================================== UIT-ViQuAD


def _squad_records(path: Path) -> list[tuple[str, dict, str]]:
    """(id, qa, passage) of a SQuAD-form file, in file order (plain json)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return [(qa["id"], qa, p["context"]) for a in data["data"] for p in a["paragraphs"] for qa in p["qas"]]


def _expected_v1(path: Path) -> dict:
    """What the official file should build to, recounted: the stored id of every question (a repeat ``<id>#<k>``
    for its k-th occurrence), and every answer's start (the file's where its text is there, else the nearest
    occurrence of the text)."""
    records = _squad_records(path)
    seen: collections.Counter = collections.Counter()
    out, moved, renamed = {}, 0, 0
    for qid, qa, passage in records:
        assert "#" not in qid
        seen[qid] += 1
        new = qid if seen[qid] == 1 else f"{qid}#{seen[qid]}"
        renamed += seen[qid] > 1
        starts = []
        for a in qa["answers"]:
            text, start = a["text"], a["answer_start"]
            if passage[start:start + len(text)] != text:
                hits = [i for i in range(len(passage)) if passage.startswith(text, i)]
                start = min(hits, key=lambda i: abs(i - start))
                moved += 1
            starts.append(start)
        out[new] = {"passage": passage, "texts": [a["text"] for a in qa["answers"]], "starts": starts}
    return {"questions": out, "moved": moved, "renamed": renamed, "records": len(records)}


@pytest.fixture(scope="module")
def viquad_v1(tmp_path_factory):
    _need(VIQUAD)
    return build_tfds(ViquadBuilder, VIQUAD, tmp_path_factory.mktemp("viquad_v1"), "default")


@pytest.mark.parametrize("split, name, questions, renamed, moved", [
    ("dev", "dev_ViQuAD.json", 2285, 7, 32),
    ("test", "test_ViQuAD.json", 2210, 2, 48),
])
def test_viquad_official_files_build_with_every_question(viquad_v1, split, name, questions, renamed, moved):
    """The official 1.0 dev/test build as published: every question kept (repeated ids renamed ``<id>#<k>``),
    every answer where its text is (re-anchored to the nearest occurrence where ``answer_start`` is off), each
    repair counted per file, logged and written to the notes."""
    path = VIQUAD / name
    expected = _expected_v1(path)
    assert (expected["records"], expected["renamed"], expected["moved"]) == (questions, renamed, moved)
    got = _spans(viquad_v1, split)
    assert len(got) == questions and set(got) == set(expected["questions"])
    for qid, exp in expected["questions"].items():
        g = got[qid]
        assert (g["passage"], g["texts"], g["starts"]) == (exp["passage"], exp["texts"], exp["starts"]), qid
        assert [g["passage"][s:e] for s, e in zip(g["starts"], g["ends"])] == exp["texts"], qid
    totals = viquad_v1.repairs[split].totals()
    assert totals == {"answer_start_reanchored": moved, "repeated_id_renamed": renamed}
    assert viquad_v1.skip_counts[split] == {}
    notes = build_check.read_notes(viquad_v1.data_dir)[split]["repairs"]
    assert {k: v["count"] for k, v in notes.items()} == totals
    assert set(notes["answer_start_reanchored"]["files"]) == {str(path)}


def test_viquad_official_files_give_the_papers_human_performance(viquad_v1):
    """Every question kept, with its four answers: the ViQuAD human protocol on the built splits is the paper's
    Table 5 human row (EM 85.65 / F1 95.19 dev, 85.59 / 94.69 test)."""
    for split, (em_want, f1_want) in (("dev", (85.65, 95.19)), ("test", (85.59, 94.69))):
        refs = [v["texts"] for v in _spans(viquad_v1, split).values()]
        em, f1, several = squad.human_performance(refs)
        assert several.all()
        assert (round(100 * em.mean(), 2), round(100 * f1.mean(), 2)) == (em_want, f1_want)


def _first_flaw(path: Path) -> tuple[str, str]:
    """The first question of a file with a flaw, and what the strict error says of it."""
    seen = set()
    for qid, qa, passage in _squad_records(path):
        if qid in seen:
            return qid, "question id repeated with another question"
        seen.add(qid)
        for a in qa["answers"]:
            if passage[a["answer_start"]:a["answer_start"] + len(a["text"])] != a["text"]:
                return qid, f"does not match its answer_start {a['answer_start']}"
    raise AssertionError("no flaw")


def test_viquad_strict_refuses_the_first_flaw_in_one_line(tmp_path):
    _need(VIQUAD)
    manual = tmp_path / "m"
    manual.mkdir()
    shutil.copy(VIQUAD / "dev_ViQuAD.json", manual / "dev_ViQuAD.json")
    qid, what = _first_flaw(manual / "dev_ViQuAD.json")
    with pytest.raises(readers.DatasetInputError) as e:
        build_tfds(ViquadBuilder, manual, tmp_path / "d", ViquadConfig(name="strict", strict=True))
    msg = str(e.value)
    assert msg.startswith(f"{manual / 'dev_ViQuAD.json'}: question {qid}: ") and what in msg, msg
    assert "refused by the builder option strict" in msg and "\n" not in msg


def _expected_v2_train() -> dict:
    """The 2.0 folds read as a SQuAD v1.1 train split, recounted: records deduplicated (same id, same content,
    same passage) across the folds, unanswerable ones left out, answers off their start counted."""
    total, distinct, moved = 0, {}, 0
    for path in sorted((VIQUAD / "v2").glob("dev-*.json")):
        for qid, qa, passage in _squad_records(path):
            total += 1
            distinct.setdefault((qid, json.dumps(qa, sort_keys=True), passage), (qa, passage))
    train = {}
    for (qid, _, _), (qa, passage) in distinct.items():
        if qa["is_impossible"]:
            continue
        train[qid] = (qa["question"], passage)
        moved += sum(passage[a["answer_start"]:a["answer_start"] + len(a["text"])] != a["text"] for a in qa["answers"])
    return {"total": total, "distinct": len(distinct), "train": train, "moved": moved}


@pytest.mark.slow
def test_viquad_v1_eval_v2_train_layout(tmp_path):
    """The layout the public files allow (config v1_eval_v2_train): 1.0 dev/test, the 2.0 folds' answerable
    questions as train, fold repeats dropped and unanswerable questions left out, both counted (about 30 s)."""
    _need(VIQUAD / "v2")
    exp = _expected_v2_train()
    assert (exp["total"], exp["distinct"], len(exp["train"]), exp["moved"]) == (27461, 17266, 11626, 80)
    b = build_tfds(ViquadBuilder, VIQUAD, tmp_path / "d", "v1_eval_v2_train")
    assert {k: v.num_examples for k, v in b.info.splits.items()} == {"train": 11626, "dev": 2285, "test": 2210}
    assert b.repairs["train"].totals() == {
        "fold_duplicate_dropped": exp["total"] - exp["distinct"], "unanswerable_left_out": exp["distinct"] - 11626,
        "answer_start_reanchored": 80, "same_content_other_id": 1}
    train = _spans(b, "train")
    assert set(train) == set(exp["train"])
    for qid, g in train.items():
        assert [g["passage"][s:e] for s, e in zip(g["starts"], g["ends"])] == g["texts"], qid
    # None of the train questions is in the 1.0 dev or test files.
    evaluation = {(qa["question"], p) for name in ("dev_ViQuAD.json", "test_ViQuAD.json")
                  for _, qa, p in _squad_records(VIQUAD / name)}
    assert not set(exp["train"].values()) & evaluation


# ================================================================================================== EVJVQA


def _evjvqa_expected() -> dict:
    data = json.loads((EVJVQA / "evjvqa_public_test-lang-qtype-answer.json").read_text(encoding="utf-8"))
    by_content = collections.Counter(
        json.dumps({k: v for k, v in a.items() if k != "id"}, sort_keys=True) for a in data["annotations"])
    return {"data": data, "same_content": sum(n - 1 for n in by_content.values()),
            "languages": collections.Counter(a["language"] for a in data["annotations"])}


def test_evjvqa_public_test_as_published_with_its_six_photos(tmp_path):
    """The real folder as is: the public-test file and six of its photos. The questions on other photos are
    skipped for their missing image (counted; the first ones logged), the ones with the same content as another
    id counted and kept, the unstored fields counted."""
    _need(EVJVQA)
    exp = _evjvqa_expected()
    assert exp["same_content"] == 31
    photos = {p.name for p in (EVJVQA / "images").iterdir()}
    filenames = {im["id"]: im["filename"] for im in exp["data"]["images"]}
    on_photos = {str(a["id"]): a for a in exp["data"]["annotations"] if filenames[a["image_id"]] in photos}
    b = build_tfds(EvjvqaBuilder, EVJVQA, tmp_path / "d", EvjvqaConfig(name="six", skip_missing_images=True))
    got = read_examples(b.as_data_source()["test"])
    assert set(got) == set(on_photos) and len(got) == 9
    for qid, a in on_photos.items():
        assert (_text(got[qid]["language"]), got[qid]["image_id"]) == (a["language"], str(a["image_id"]))
    assert b.skip_counts["test"] == {"missing_or_corrupt_image": 5015 - 9}
    assert b.repairs["test"].totals() == {"same_content_other_id": 31}
    path = str(EVJVQA / "evjvqa_public_test-lang-qtype-answer.json")
    assert b.unknown_fields["test"] == {path: {"img_path": 5015, "question_type": 5015}}
    notes = build_check.read_notes(b.data_dir)["test"]
    assert notes["skipped"] == {"missing_or_corrupt_image": 5006}
    assert notes["repairs"]["same_content_other_id"]["count"] == 31


def test_evjvqa_public_test_builds_every_question(tmp_path):
    """The public-test file as published, with a stand-in photo for each of its 558 images: all 5,015
    questions in their three languages; nothing to repair, so strict builds the same."""
    _need(EVJVQA)
    exp = _evjvqa_expected()
    manual = tmp_path / "m"
    manual.mkdir()
    shutil.copy(EVJVQA / "evjvqa_public_test-lang-qtype-answer.json", manual)
    for im in exp["data"]["images"]:
        write_jpeg(manual / "public-test-images" / im["filename"], (16, 12))
    b = build_tfds(EvjvqaBuilder, manual, tmp_path / "d", EvjvqaConfig(name="strict", strict=True, ocr_engine="none"))
    assert b.info.splits["test"].num_examples == 5015
    assert b.language_counts["test"] == dict(exp["languages"]) == {"en": 1686, "vi": 1678, "ja": 1651}
    assert b.repairs["test"].totals() == {"same_content_other_id": 31}


# =================================================================================== ViVQA and OpenViVQA


def test_vivqa_sample_rows_repeated_under_other_indices_are_counted(tmp_path):
    _need(VIVQA_SAMPLE)
    manual = tmp_path / "m"
    manual.mkdir()
    repeats = {}
    for name in ("train.csv", "test.csv"):
        shutil.copy(VIVQA_SAMPLE / name, manual / name)
        with (VIVQA_SAMPLE / name).open(encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
        for r in rows:
            write_jpeg(manual / "val2014" / f"COCO_val2014_{int(r['img_id']):012d}.jpg", (16, 12))
        content = collections.Counter((r["img_id"], r["question"], r["answer"], r["type"]) for r in rows)
        repeats[name.split(".")[0]] = sum(n - 1 for n in content.values())
    assert repeats == {"train": 3, "test": 0}
    b = build_tfds(VivqaBuilder, manual, tmp_path / "d", VivqaConfig(name="strict", strict=True, ocr_engine="none"))
    assert {k: v.num_examples for k, v in b.info.splits.items()} == {"train": 300, "test": 100}
    assert b.repairs["train"].totals() == {"same_content_other_id": 3} and b.repairs["test"].totals() == {}
    assert build_check.read_notes(b.data_dir)["train"]["repairs"]["same_content_other_id"]["count"] == 3


def test_openvivqa_examples_build_clean_and_say_so(tmp_path):
    """The seven real examples hold no flaw: nothing repaired or skipped, and the notes say so."""
    _need(OPENVIVQA_EXAMPLES)
    data = json.loads((OPENVIVQA_EXAMPLES / "examples_data.json").read_text(encoding="utf-8"))
    b = build_tfds(OpenVivqaBuilder, OPENVIVQA_EXAMPLES, tmp_path / "d",
                   OpenVivqaConfig(name="strict", strict=True, ocr_engine="none"))
    got = read_examples(b.as_data_source()["train"])
    assert set(got) == set(data["annotations"]) and len(got) == 7
    notes = build_check.read_notes(b.data_dir)
    assert notes == {"train": {"repairs": {}, "skipped": {}, "fields_not_stored": {}}}
    assert build_check.notes_summary(notes) == []
    assert os.path.isfile(os.path.join(b.data_dir, build_check.SOURCES_FILE))
    assert np.all([ex["language"] == b"vi" for ex in b.as_data_source()["train"]])
