"""In-process checks of what a run's files fix (``vqa/run_settings.py``), a question's language
(``text/language.py``), the counted skip reasons of ``predict --skip_bad`` and JSON's names for its kinds."""

from __future__ import annotations

import json
import os

import pytest

from conftest import SHARED, load_config
from openvivqa_jax import jsonio
from openvivqa_jax.text import language
from openvivqa_jax.training.checkpoints import CheckpointMismatchError
from openvivqa_jax.vqa import run_settings
from openvivqa_jax.vqa.report import skipped_summary


def _run_folder(tmp_path, cfg, files=("spm.model", "checkpoints")):
    wd = tmp_path / "run"
    wd.mkdir(parents=True)
    (wd / "config.json").write_text(cfg.to_json_best_effort(indent=2))
    for f in files:
        if f == "checkpoints":
            (wd / "checkpoints" / "4").mkdir(parents=True)
        elif f == "answers.json":
            (wd / f).write_text(json.dumps({"answers": ["a", "b", "c"], "distinct_answers": 3}))
        else:
            (wd / f).write_bytes(b"x")
    return wd


def _changed(cfg, **changes):
    cfg = cfg.copy_and_resolve_references()
    with cfg.unlocked():
        for dotted, value in changes.items():
            node = cfg
            *parents, last = dotted.split("__")
            for p in parents:
                node = node[p]
            node[last] = value
    return cfg


def test_each_fixed_setting_names_itself_and_the_file_that_fixed_it(tmp_path):
    cfg = load_config("configs/tiny.py")
    wd = _run_folder(tmp_path, cfg)
    cases = {"tokenizer__vocab_size": (500, "tokenizer.vocab_size=500 differs from the run's 400", "spm.model was"),
             "model__fusion": ("concat", "model.fusion='concat' differs from the run's 'sum'", "checkpoints were"),
             "data__image_size": ((32, 24), "data.image_size=(32, 24) differs from the run's (64, 48)",
                                  "checkpoints were"),
             "seed": (3, "seed=3 differs from the run's 0", "checkpoints were")}
    for key, (value, said, fixed_by) in cases.items():
        with pytest.raises(CheckpointMismatchError) as e:
            run_settings.check_settings(_changed(cfg, **{key: value}), str(wd))
        assert str(e.value) == (f"config value {said} ({wd}/config.json), with which its {fixed_by} made: resume "
                                "with the run's setting, or start a fresh run with the new one in another --workdir")
    with pytest.raises(CheckpointMismatchError, match=r"^config values model\.num_ocr=8 \(the run's: 16\), "
                                                      r"tokenizer\.model_type='unigram' \(the run's: 'bpe'\) differ "
                                                      r".*its checkpoints and spm\.model were made"):
        run_settings.check_settings(_changed(cfg, model__num_ocr=8, tokenizer__model_type="unigram"), str(wd))


def test_free_settings_and_settings_no_file_fixed_yet_pass(tmp_path):
    cfg = load_config("configs/tiny.py")
    free = _changed(cfg, train__num_train_steps=99, train__learning_rate=0.5, model__dropout=0.3,
                    model__dtype="bfloat16", model__remat=True, eval__beam_size=5, mesh__shape=(2, 1),
                    data__num_threads=4, data__data_dir="/elsewhere")
    run_settings.check_settings(free, str(_run_folder(tmp_path / "a", cfg)))
    only_tokenizer = _run_folder(tmp_path / "b", cfg, files=("spm.model",))
    run_settings.check_settings(_changed(cfg, model__d_model=64, seed=5), str(only_tokenizer))  # no checkpoint
    with pytest.raises(CheckpointMismatchError, match="tokenizer.vocab_size=500"):
        run_settings.check_settings(_changed(cfg, tokenizer__vocab_size=500), str(only_tokenizer))
    run_settings.check_settings(_changed(cfg, seed=5), str(_run_folder(tmp_path / "c", cfg)), mode="evaluate")
    run_settings.check_settings(_changed(cfg, tokenizer__vocab_size=500), str(tmp_path))  # no config.json: a new run


def test_a_key_added_since_a_run_was_made_is_compared_with_the_value_that_run_had(tmp_path):
    cfg = load_config("configs/folder/mlpag.py")
    assert cfg.model.verifier.decay_start == 0.5
    old = json.loads(cfg.to_json_best_effort())
    del old["model"]["verifier"]["decay_start"]  # a folder run made before the key existed: a constant rate
    wd = _run_folder(tmp_path, cfg)
    (wd / "config.json").write_text(json.dumps(old))
    with pytest.raises(CheckpointMismatchError, match=r"^config value model\.verifier\.decay_start=0\.5 differs from "
                                                      r"the run's 1\.0 .*its checkpoints were made"):
        run_settings.check_settings(cfg, str(wd))
    run_settings.check_settings(_changed(cfg, model__verifier__decay_start=1.0), str(wd))  # the run's own setting
    run_settings.check_settings(cfg, str(wd), mode="evaluate")  # scoring reads the parameters only
    # a config without the section (no verifier at all) is not given the key
    del old["model"]["verifier"]
    (wd / "config.json").write_text(json.dumps(old))
    no_verifier = cfg.copy_and_resolve_references()
    with no_verifier.unlocked():
        del no_verifier.model["verifier"]
    run_settings.check_settings(no_verifier, str(wd))


def test_the_answer_list_is_fixed_where_another_k_would_change_it(tmp_path):
    cfg = load_config("configs/synthetic/saaa.py")
    with cfg.unlocked():
        cfg.model.num_answers = 3  # what the run's config.json holds: the list's length
    wd = _run_folder(tmp_path, cfg, files=("answers.json",))
    run_settings.check_settings(_changed(cfg, model__num_answers=1000), str(wd))  # 3 distinct answers: the same list
    with pytest.raises(CheckpointMismatchError, match=r"model\.num_answers=2 differs from the run's 3 .* answers\.json"):
        run_settings.check_settings(_changed(cfg, model__num_answers=2), str(wd))


def test_the_initial_config_is_written_until_a_file_fixes_it(tmp_path):
    cfg = load_config("configs/tiny.py")
    wd = tmp_path / "run"
    run_settings.write_initial_config(cfg, str(wd))
    assert json.loads((wd / "config.json").read_text())["tokenizer"]["vocab_size"] == 400
    run_settings.write_initial_config(_changed(cfg, tokenizer__vocab_size=500), str(wd))  # nothing made yet
    assert json.loads((wd / "config.json").read_text())["tokenizer"]["vocab_size"] == 500
    (wd / "spm.model").write_bytes(b"x")
    run_settings.write_initial_config(_changed(cfg, tokenizer__vocab_size=600), str(wd))
    assert json.loads((wd / "config.json").read_text())["tokenizer"]["vocab_size"] == 500
    assert sorted(os.listdir(wd)) == ["config.json", "spm.model"]


@pytest.mark.parametrize("text, lang", [("cửa hàng này tên gì?", "vi"), ("Patel là ai?", "vi"),
                                        ("what colour is the car?", "en"), ("この店の名前は何ですか", "ja"),
                                        ("这是什么", "zh"), ("이것은 무엇입니까", "ko"), ("cua hang nay ten gi", None),
                                        ("name?", None), ("12345", None),
                                        # English around a Vietnamese name; Vietnamese around English words
                                        ("is the word phở written in the picture ?", "en"),
                                        ("what is the name of the cửa hàng bánh mì ?", "en"),
                                        ("the coffee house có tên là gì ?", "vi"),
                                        ("trong ảnh có chữ milk không ?", "vi")])
def test_detect_language(text, lang):
    assert language.detect_language(text) == lang


@pytest.mark.skipif(not os.path.isdir(os.path.join(SHARED, "data", "real", "evjvqa")),
                    reason="needs ../shared/data/real/evjvqa (the EVJVQA public test)")
def test_detect_language_on_the_evjvqa_public_test_never_contradicts_its_field():
    with open(os.path.join(SHARED, "data", "real", "evjvqa", "evjvqa_public_test-lang-qtype-answer.json"),
              encoding="utf-8") as f:
        anns = json.load(f)["annotations"]
    found = [(a["language"], language.detect_language(a["question"])) for a in anns]
    assert not [f for f in found if f[1] is not None and f[1] != f[0]]
    assert sum(f[1] is None for f in found) <= 5 and len(found) == 5015


@pytest.mark.skipif(not os.path.isfile(os.path.join(SHARED, "data", "real", "viquad", "dev_ViQuAD.json")),
                    reason="needs ../shared/data/real/viquad (the UIT-ViQuAD 1.0 release)")
def test_detect_language_calls_every_viquad_dev_question_vietnamese():
    with open(os.path.join(SHARED, "data", "real", "viquad", "dev_ViQuAD.json"), encoding="utf-8") as f:
        data = json.load(f)["data"]
    found = [language.detect_language(q["question"]) for a in data for p in a["paragraphs"] for q in p["qas"]]
    assert len(found) == 2285 and found.count("vi") == 2285


def test_training_languages_keep_those_of_one_percent(tmp_path):
    class R:
        def __init__(self, q, lang=None):
            self.question, self.extra = q, ({"language": lang} if lang else {})

    records = [R("cửa hàng này tên gì?")] * 200 + [R("what is it?", "en")] + [R("x y z")] * 3
    assert language.write_training_languages(records, str(tmp_path), "train") == {"vi": 200, "?": 3, "en": 1}
    assert language.training_languages(str(tmp_path)) == {"vi"}  # 1 of 204 is under 1%
    assert language.training_languages(str(tmp_path / "none")) is None


def test_skipped_summary_counts_per_reason():
    skipped = {str(i): f"image /data/images/{i:05d}.jpg: file not found" for i in range(5000)}
    skipped.update({"9001": "question '9001' refers to image '77', which is not in 'images'",
                    "image 3 (repeat 2)": "image id '3' repeated as a key of 'images' (a repeated JSON key; the first "
                                          "entry is kept)"})
    lines = skipped_summary(skipped, 5009, "out.skipped.json")
    assert lines == [
        "skipped 5001 of 5008 questions whose question or image could not be used and 1 image entry, by reason (each "
        "with its reason: out.skipped.json):",
        "  5000 x image …: file not found (e.g. question '0': image /data/images/00000.jpg: file not found)",
        "  1 x question … refers to image …, which is not in … (e.g. question '9001': question '9001' refers to image "
        "'77', which is not in 'images')",
        "  1 x image id … repeated as a key of … (a repeated JSON key; the first entry is kept) (e.g. question 'image 3 "
        "(repeat 2)': image id '3' repeated as a key of 'images' (a repeated JSON key; the first entry is kept))"]
    assert skipped_summary({}, 3, None) == []


def test_json_kind_speaks_json():
    obj = jsonio.loads('{"a": {"b": 1}}')
    assert type(obj["a"]).__name__ == "JsonObject"
    assert [jsonio.json_kind(v) for v in (obj["a"], [1], "s", 1.5, 2, True, None)] == [
        "an object", "a list", "a string", "a number", "a number", "true/false", "null"]
