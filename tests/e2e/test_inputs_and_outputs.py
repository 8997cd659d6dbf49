"""What a careful user tries with a run's inputs and outputs, each run as a process: an output path that is an
input (refused before any work), a model name the config was not made for, ``--mode evaluate`` on a folder with
nothing to score, a setting the run's files fix changed on a resume (one line each, exit status 1 or 2); a
question cut to ``model.max_question_len`` or in a language the run never trained on, a ``--skip_bad`` batch of the
real EVJVQA public test (a few counted lines, not one per question); a number where an answer's text goes; NFD
predictions against NFC references in a mode that compares characters as written; a folder whose CSV has a
column the builder does not store (counted per row)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import unicodedata

import pytest
from PIL import Image

from conftest import ROOT, SHARED, build_once, message_lines, run_main_cli, subprocess_env
from openvivqa_jax.locks import RUN_LOCK

PY = sys.executable
EVJVQA = os.path.join(SHARED, "data", "real", "evjvqa")


def _run(*argv, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([PY, *map(str, argv)], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                          timeout=timeout)


def _one_line(res, code: int) -> str:
    lines = message_lines(res.stderr)
    assert res.returncode == code, (res.returncode, res.stderr[-3000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    return lines[0]


def _tree(folder) -> dict[str, bytes | None]:
    out = {}
    for d, dirs, files in os.walk(folder):
        for n in dirs:
            out[os.path.relpath(os.path.join(d, n), folder)] = None
        for n in files:
            with open(os.path.join(d, n), "rb") as f:
                out[os.path.relpath(os.path.join(d, n), folder)] = f.read()
    return out


def _run_folder(tmp_path):
    """A folder laid out as a run (its config.json, spm.model, metrics.jsonl): the path checks come first."""
    wd = tmp_path / "run"
    wd.mkdir()
    (wd / "config.json").write_text('{"model": {"name": "mlpag", "vision": {"kind": "cnn"}}}')
    (wd / "spm.model").write_bytes(b"x")
    (wd / "metrics.jsonl").write_text('{"kind": "train", "step": 1, "loss": 1.0}\n')
    return wd


# ----------------------------------------------------------------------------- an output path that is an input
def _output_cases(t):
    """(command line, output flag, input flag) of each case, made under ``t``."""
    for name, text in (("p.json", '{"1": "a"}'), ("r.json", '{"1": ["a"]}'), ("q.json", '{"images": {}, '
                                                                                           '"annotations": {}}')):
        (t / name).write_text(text)
    Image.new("RGB", (64, 48), (200, 30, 30)).save(t / "photo.png")
    os.symlink(t / "r.json", t / "r_link.json")
    os.link(t / "photo.png", t / "photo_hardlink.png")
    wd = _run_folder(t)
    (t / "manual").mkdir()
    e, p = ("-m", "openvivqa_jax.evaluate"), ("-m", "openvivqa_jax.predict", "--workdir", wd)
    return {
        "evaluate --json = --predictions": ([*e, "--predictions", t / "p.json", "--references", t / "r.json",
                                             "--json", t / "p.json"], "--json", "--predictions"),
        "evaluate --json = a link to --references": ([*e, "--predictions", t / "p.json", "--references",
                                                      t / "r.json", "--json", t / "r_link.json"], "--json",
                                                     "--references"),
        "predict --output = ./--questions": ([*p, "--questions", t / "q.json", "--output", f"{t}/./q.json"],
                                             "--output", "--questions"),
        "predict --plot = a hard link to --image": ([*p, "--image", t / "photo.png", "--question", "gì?", "--plot",
                                                    t / "photo_hardlink.png"], "--plot", "--image"),
        "predict --output = the run's config.json": ([*p, "--questions", t / "q.json", "--output",
                                                      wd / "config.json"], "--output", "the run's config.json"),
        "predict --plot_dir = the folder of --questions": ([*p, "--questions", t / "q.json", "--plot_dir", t],
                                                           "--plot_dir", "the image folder"),
        "plot --output = the run's metrics.jsonl": (["-m", "openvivqa_jax.plot", "--workdir", wd, "--output",
                                                     wd / "metrics.jsonl"], "--output", "the run's metrics.jsonl"),
        "main --workdir = --config.data.manual_dir": (["-m", "openvivqa_jax.main", "--config", "configs/tiny.py",
                                                       "--workdir", t / "manual",
                                                       f"--config.data.manual_dir={t / 'manual'}"], "--workdir",
                                                      "--config.data.manual_dir"),
    }


@pytest.mark.parametrize("case", ["evaluate --json = --predictions", "evaluate --json = a link to --references",
                                  "predict --output = ./--questions", "predict --plot = a hard link to --image",
                                  "predict --output = the run's config.json",
                                  "predict --plot_dir = the folder of --questions",
                                  "plot --output = the run's metrics.jsonl", "main --workdir = --config.data.manual_dir"])
def test_an_output_that_is_an_input_is_refused_before_any_work(tmp_path, case):
    argv, out_flag, in_what = _output_cases(tmp_path)[case]
    before = _tree(tmp_path)
    line = _one_line(_run(*argv), 2)
    assert f"{out_flag} " in line and f"is the same {'folder' if out_flag in ('--plot_dir', '--workdir') else 'file'} " \
        f"as {in_what}" in line and "an input of this command" in line, line
    assert _tree(tmp_path) == before, "nothing written, the input as it was"


# ------------------------------------------------------------------------ a model the config was not made for
def _model_keys(path: str) -> set[str]:
    from conftest import load_config

    def flat(d, prefix=""):
        out = set()
        for k, v in d.items():
            out |= flat(v, f"{prefix}{k}.") if hasattr(v, "items") else {prefix + k}
        return out

    return flat(load_config(path).model)


@pytest.mark.parametrize("name", ["fst", "m4c", "saaa", "mcan", "lorra"])
def test_a_model_name_the_config_was_not_made_for_is_one_line_before_any_work(tmp_path, name):
    res = run_main_cli("--config", "configs/tiny.py", "--workdir", tmp_path / "w", f"--config.model.name={name}",
                       f"--config.data.data_dir={tmp_path / 'tfds'}")
    line = _one_line(res, 1)
    head = f"error: ConfigError: config value model.name={name!r} needs model fields this config does not have: "
    assert line.startswith(head), line
    named = line[len(head):].split(" (the config was made for another model)")[0].split(", ")
    # The fields its own config has and the tiny (MLPAG) config lacks; classifier_loss is read with a default.
    lacking = _model_keys(f"configs/synthetic/{name}.py") - _model_keys("configs/tiny.py") - {"classifier_loss"}
    assert sorted(f.removeprefix("model.") for f in named) == sorted(lacking)
    assert f"start from configs/synthetic/{name}.py, which has them (or configs/openvivqa/{name}.py" in line
    assert sorted(os.listdir(tmp_path)) == []  # no workdir, no dataset, no spm.model


def test_evaluate_on_a_folder_with_nothing_to_score_is_one_line(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    line = _one_line(run_main_cli("--config", "configs/tiny.py", "--workdir", empty, "--mode=evaluate"), 1)
    assert line == f"error: RunFolderError: workdir {empty}: no config.json (the run's config); is it a training " \
                   "run folder?"
    assert [n for n in os.listdir(empty) if n != RUN_LOCK] == []  # no tokenizer made (the run's lock is kept)
    wd = _run_folder(tmp_path)
    (wd / "checkpoints").mkdir()
    before = _tree(wd)
    line = _one_line(run_main_cli("--config", "configs/tiny.py", "--workdir", wd, "--mode=evaluate"), 1)
    assert line == f"error: RunFolderError: workdir {wd}: no checkpoint (best/ and checkpoints/ hold no saved step); " \
                   "train first"
    assert {k: v for k, v in _tree(wd).items() if k != RUN_LOCK} == before


# ------------------------------------------------------------------ a setting the run's files fix, changed
RUN_ARGS = ("--config.train.num_train_steps=4", "--config.train.checkpoint_every_steps=4",
            "--config.train.eval_every_steps=0", "--config.eval.decoding=greedy", "--config.eval.ocr_ablation=False")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """configs/tiny.py trained for 4 steps (built once per session): ``(run folder, data dir)``."""
    def build(root):
        res = run_main_cli("--config", "configs/tiny.py", "--workdir", root / "run",
                           f"--config.data.data_dir={root / 'tfds'}", *RUN_ARGS)
        assert res.returncode == 0, res.stderr[-3000:]

    root = build_once(tmp_path_factory, "tiny_four_steps", build)
    return root / "run", root / "tfds"


def _resume(run, data, *extra):
    return run_main_cli("--config", "configs/tiny.py", "--workdir", run, f"--config.data.data_dir={data}", *RUN_ARGS,
                        *extra)


#: (override, key, file that fixes it).
CHANGES = [("--config.tokenizer.vocab_size=500", "tokenizer.vocab_size", "spm.model was"),
           ("--config.tokenizer.model_type=unigram", "tokenizer.model_type", "spm.model was"),
           ("--config.data.image_size=(32,24)", "data.image_size", "checkpoints were"),
           ("--config.data.max_ocr_pieces=4", "data.max_ocr_pieces", "checkpoints were"),
           ("--config.model.num_ocr=8", "model.num_ocr", "checkpoints were"),
           ("--config.model.fusion=concat", "model.fusion", "checkpoints were")]


def _shown(v) -> str:
    return "(" + ", ".join(map(str, v)) + ")" if isinstance(v, list) else repr(v)


@pytest.mark.slow  # a process that imports JAX per case, on a shared 4-step run
@pytest.mark.parametrize("override, key, fixed_by", CHANGES, ids=[c[1] for c in CHANGES])
def test_a_changed_setting_the_run_fixed_is_one_line_on_resume(tiny_run, tmp_path, override, key, fixed_by):
    run, data = tmp_path / "run", tiny_run[1]
    shutil.copytree(tiny_run[0], run)  # a copy per case: each holds the run folder's lock while it runs
    before = _tree(run)
    saved = json.loads((run / "config.json").read_text())
    section, field = key.split(".")
    now = override.split("=", 1)[1]
    now = _shown([int(x) for x in now.strip("()").split(",")]) if now.startswith("(") else (
        now if now.isdigit() else repr(now))
    mode = "--mode=evaluate" if key == "data.image_size" else "--mode=train"
    line = _one_line(_resume(run, data, override, mode), 1)
    assert line == (f"error: CheckpointMismatchError: config value {key}={now} differs from the run's "
                    f"{_shown(saved[section][field])} ({run / 'config.json'}), with which its {fixed_by} made: resume "
                    "with the run's setting, or start a fresh run with the new one in another --workdir")
    assert {k: v for k, v in _tree(run).items() if not k.startswith(RUN_LOCK)} == {
        k: v for k, v in before.items() if not k.startswith(RUN_LOCK)}, "config.json and the run's files as they were"


@pytest.mark.slow  # trains 2 more steps of the tiny run
def test_a_resume_with_free_settings_goes_on_and_config_json_says_them(tiny_run, tmp_path):
    run, data = tiny_run
    shutil.copytree(run, tmp_path / "run")
    res = _resume(tmp_path / "run", data, "--config.train.num_train_steps=6", "--config.model.dropout=0.2",
                  "--config.eval.batch_size=4")
    assert res.returncode == 0, res.stderr[-3000:]
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (saved["train"]["num_train_steps"], saved["model"]["dropout"], saved["eval"]["batch_size"]) == (6, 0.2, 4)
    # A run stopped after its tokenizer, before any checkpoint: the tokenizer settings are fixed already.
    for folder in ("checkpoints", "best"):
        shutil.rmtree(tmp_path / "run" / folder, ignore_errors=True)
    line = _one_line(_resume(tmp_path / "run", data, "--config.tokenizer.vocab_size=500"), 1)
    assert "tokenizer.vocab_size=500 differs from the run's 400" in line and "its spm.model was made" in line


# ---------------------------------------------------------------- what predict cuts, and in which language
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from test_predict import _train_predict_model

    return build_once(tmp_path_factory, "predict_trained", _train_predict_model) / "run"


LONG = ("cửa hàng có biển hiệu màu đỏ ở bên trái của bức ảnh này, cạnh chiếc xe máy màu xanh và người đàn ông đội mũ "
        "bảo hiểm đang đứng chờ, tên là gì vậy?")


@pytest.mark.slow
def test_predict_warns_of_cut_questions_and_other_languages(tmp_path, trained):
    import sentencepiece as spm

    Image.new("RGB", (128, 96), (200, 30, 30)).save(tmp_path / "a.png")
    questions = {"1": LONG, "2": "what is the name of this shop?", "3": "この店の名前は何ですか", "4": "cửa hàng này tên gì?"}
    q = tmp_path / "q.json"
    q.write_text(json.dumps({"images": {"1": "a.png"}, "annotations": {k: {"image_id": 1, "question": v} for k, v in
                                                                      questions.items()}}, ensure_ascii=False))
    res = _run("-m", "openvivqa_jax.predict", "--workdir", trained, "--questions", q, "--output", tmp_path / "s.json",
               "--ocr", "none", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    cfg = json.loads((trained / "config.json").read_text())
    limit = cfg["model"]["max_question_len"]
    sp = spm.SentencePieceProcessor(model_file=str(trained / "spm.model"))
    from openvivqa_jax.text.normalize import normalize_text

    pieces = {k: len(sp.encode(normalize_text(v))) for k, v in questions.items()}
    cut = [k for k in questions if pieces[k] > limit]
    assert "1" in cut and "4" not in cut
    out = {r["question_id"]: r for r in json.loads(res.stdout)}
    assert {k: out[k]["question_truncated"] for k in questions} == {k: max(0, pieces[k] - limit) for k in questions}
    assert {k: out[k].get("language_not_trained", False) for k in questions} == {"1": False, "2": True, "3": True,
                                                                                 "4": False}
    lines = message_lines(res.stderr)
    assert len(lines) == 2, res.stderr[-3000:]
    assert lines[0].startswith(f"warning: {len(cut)} of 4 question(s) are longer than the {limit} pieces the model "
                               "reads (model.max_question_len) and were cut") and f"'1' ({pieces['1']} pieces)" in lines[0]
    assert lines[1].startswith("warning: 2 of 4 question(s) are in a language the run was not trained on (its training "
                               "questions are in vi): question '2' (en), '3' (ja);"), lines[1]


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir(EVJVQA), reason="needs ../shared/data/real/evjvqa (the EVJVQA public test)")
def test_skip_bad_on_the_evjvqa_public_test_is_a_few_counted_lines(tmp_path, trained):
    """The real release file (5,015 questions in English, Vietnamese and Japanese) with the six photos at hand:
    the questions without a photo are counted in two lines, not listed one per line, and the English and Japanese
    ones among the answered are counted in one warning, from the file's own ``language`` field."""
    path = os.path.join(EVJVQA, "evjvqa_public_test-lang-qtype-answer.json")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    have = set(os.listdir(os.path.join(EVJVQA, "images")))
    files = {str(i["id"]): i["filename"] for i in data["images"]}
    answered = [a for a in data["annotations"] if files[str(a["image_id"])] in have]
    res = _run("-m", "openvivqa_jax.predict", "--workdir", trained, "--questions", path, "--image_dir",
               os.path.join(EVJVQA, "images"), "--skip_bad", "--ocr", "none", "--output", tmp_path / "s.json")
    assert res.returncode == 0, res.stderr[-3000:]
    lines = message_lines(res.stderr)
    assert len(lines) <= 6, res.stderr[-3000:]
    n_skipped = len(data["annotations"]) - len(answered)
    assert f"skipped {n_skipped} of {len(data['annotations'])} questions whose question or image could not be used, " \
           f"by reason (each with its reason: {tmp_path / 's.skipped.json'}):" in lines
    assert f"  {n_skipped} x image …: file not found (e.g. question " in res.stderr
    assert len(json.loads((tmp_path / "s.skipped.json").read_text())) == n_skipped
    other = [a for a in answered if a["language"] != "vi"]
    assert [ln for ln in lines if "not trained on" in ln][0].startswith(
        f"warning: {len(other)} of {len(answered)} question(s) are in a language the run was not trained on (its "
        f"training questions are in vi): question {str(other[0]['id'])!r} ({other[0]['language']})")


# ---------------------------------------------------------------------------------- what evaluate reads
@pytest.mark.parametrize("value, shown", [("1e2", "a number (100.0)"), ("100", "a number (100)"),
                                          ("true", "true/false (true)")])
def test_a_number_or_true_where_an_answer_goes_names_the_file(tmp_path, value, shown):
    (tmp_path / "r.json").write_text('{"1": ["100"], "2": ["con mèo"]}')
    (tmp_path / "p.json").write_text('{"1": %s, "2": "con mèo"}' % value)
    line = _one_line(_run("-m", "openvivqa_jax.evaluate", "--predictions", tmp_path / "p.json", "--references",
                          tmp_path / "r.json"), 2)
    assert line.startswith(f"error: {tmp_path / 'p.json'}: question '1': prediction is {shown}, expected a string"), line
    (tmp_path / "p.json").write_text('{"1": "100", "2": "con mèo"}')
    (tmp_path / "r.json").write_text('{"1": [%s], "2": ["con mèo"]}' % value)
    line = _one_line(_run("-m", "openvivqa_jax.evaluate", "--predictions", tmp_path / "p.json", "--references",
                          tmp_path / "r.json"), 2)
    assert line.startswith(f"error: {tmp_path / 'r.json'}: question '1': answer 0 is {shown}, expected a string"), line


@pytest.mark.parametrize("value, kind", [('["a"]', "a list"), ('{"a": 1}', "an object")])
def test_a_list_or_object_prediction_speaks_json(tmp_path, value, kind):
    (tmp_path / "r.json").write_text('{"1": ["a"]}')
    (tmp_path / "p.json").write_text('{"1": %s}' % value)
    line = _one_line(_run("-m", "openvivqa_jax.evaluate", "--predictions", tmp_path / "p.json", "--references",
                          tmp_path / "r.json"), 2)
    assert line == (f"error: {tmp_path / 'p.json'}: question '1': prediction must be a string, got {kind} (a file of "
                    "{question_id: [answers]} holds references: give it as --references)")


@pytest.mark.skipif(shutil.which("java") is None, reason="the pycocoevalcap text mode's PTB tokenizer needs Java")
def test_nfd_predictions_against_nfc_references_get_a_note(tmp_path):
    refs = {"1": ["cửa hàng bán phở"], "2": ["màu đỏ"], "3": ["hai người"], "4": ["ok"]}
    preds = {k: unicodedata.normalize("NFD", v[0]) for k, v in refs.items()}
    (tmp_path / "r.json").write_text(json.dumps(refs, ensure_ascii=False), encoding="utf-8")
    (tmp_path / "p.json").write_text(json.dumps(preds, ensure_ascii=False), encoding="utf-8")
    res = _run("-m", "openvivqa_jax.evaluate", "--predictions", tmp_path / "p.json", "--references",
               tmp_path / "r.json", "--text_mode", "pycocoevalcap", "--metrics", "BLEU-1")
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["counts"]["unicode_form_mismatch"] == 3  # "ok" is the same in both forms
    (note,) = [n for n in out["notes"] if "normalization form" in n]
    assert "text mode 'pycocoevalcap'" in note and "(ids: '1', '2', '3')" in note
    res = _run("-m", "openvivqa_jax.evaluate", "--predictions", tmp_path / "p.json", "--references",
               tmp_path / "r.json", "--metrics", "BLEU-1")
    assert res.returncode == 0 and json.loads(res.stdout)["overall"]["BLEU-1"] > 0.99  # composed, they match


@pytest.mark.slow  # builds a folder dataset (TensorFlow's import and the build)
def test_extra_csv_columns_are_counted_per_row(tmp_path):
    m = tmp_path / "photos"
    m.mkdir()
    rows = []
    for i, colour in enumerate([(200, 30, 30), (30, 200, 30), (30, 30, 200), (200, 200, 30)]):
        Image.new("RGB", (64, 48), colour).save(m / f"p{i}.png")
        rows.append(f"p{i}.png,màu gì {i}?,màu {i},ghi chú {i}")
    (m / "train.csv").write_text("image,question,answer,note\n" + "\n".join(rows) + "\n", encoding="utf-8")
    (m / "validation.json").write_text(json.dumps([{"image": "p0.png", "question": "màu gì?", "answer": "đỏ"}],
                                                  ensure_ascii=False), encoding="utf-8")
    (m / "test.json").write_text((m / "validation.json").read_text(encoding="utf-8"), encoding="utf-8")
    res = run_main_cli("--config", "configs/folder/mlpag.py", "--mode=prepare", f"--config.data.manual_dir={m}",
                       f"--config.data.data_dir={tmp_path / 'tfds'}")
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"{m / 'train.csv'}: columns not stored by this builder (rows carrying each): {{'note': 4}}" in res.stderr
