"""Text end to end through the evaluate CLI: normalizer kinds, each benchmark's answer rules, empty
references, the pycocoevalcap text mode, METEOR failure notes, decoded strings and CLI start-up."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from openvivqa_jax import evaluate  # noqa: E402
from openvivqa_jax.evaluation import evaluate_split, score  # noqa: E402
from openvivqa_jax.evaluation import meteor as meteor_lib  # noqa: E402
from openvivqa_jax.evaluation import vqa_accuracy as vqa_lib  # noqa: E402
from openvivqa_jax.text.answer_vocab import AnswerVocab  # noqa: E402
from openvivqa_jax.text.tokenizer import train_sentencepiece  # noqa: E402


def _java_ready() -> bool:
    try:
        meteor_lib.find_java()
        from openvivqa_jax.evaluation.ptb import find_corenlp_jar

        find_corenlp_jar()
        return True
    except meteor_lib.MeteorUnavailable:
        return False


needs_java = pytest.mark.skipif(not _java_ready(), reason="needs Java and pycocoevalcap's CoreNLP jar")


def _write(path: Path, obj) -> str:
    path.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    return str(path)


def _cli(tmp_path, capsys, preds, refs, *extra):
    p = _write(tmp_path / "preds.json", preds)
    r = _write(tmp_path / "refs.json", refs)
    rc = evaluate.run(["--predictions", p, "--references", r, "--per_question", *extra])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


# ---- normalizer kinds, through the CLI ------------------------------------------------------------------


@pytest.mark.parametrize("pred,ref", [
    ("\u00d0\u01af\u1edcNG L\u00ca L\u1ee2I", "đường lê lợi"),  # Ð (eth) for Đ
    ("\u0256\u1ed3ng h\u1ed3", "đồng hồ"),  # ɖ
    ("100.000\u20ab", "100,000 đồng"),  # ₫ suffix without a space
    ("\u20ab 25.000", "25.000đ"),  # ₫ prefix
    ("\ufeffcon mèo", "con mèo"),  # BOM
    ("xe\u200bmáy", "xe máy"),  # zero-width space
    ("cà\u00adphê sữa", "càphê sữa"),  # soft hyphen
])
def test_normalizer_kinds_score_em_1(tmp_path, capsys, pred, ref):
    out = _cli(tmp_path, capsys, {"q": pred}, {"q": [ref]}, "--metrics", "EM", "F1", "BLEU-1")
    assert out["overall"]["EM"] == 1.0 and out["overall"]["F1"] == 1.0 and out["overall"]["BLEU-1"] == pytest.approx(1.0)


# ---- EM/F1: SQuAD deletes punctuation ---------------------------------------------------------------------


def test_em_f1_punctuation_deleted(tmp_path, capsys):
    out = _cli(tmp_path, capsys, {"a": "10000", "b": "năm 1.975"}, {"a": ["10.000"], "b": ["năm 1975"]},
               "--metrics", "EM", "F1")
    assert out["per_question"]["a"] == {"EM": 1.0, "F1": 1.0}
    assert out["per_question"]["b"] == {"EM": 1.0, "F1": 1.0}


# ---- VQA accuracy: English rules for TextVQA / ST-VQA, Vietnamese rules otherwise -------------------------


def _textvqa(answers: dict) -> dict:
    return {"dataset_name": "textvqa", "data": [{"question_id": q, "question": "?", "answers": a}
                                                 for q, a in answers.items()]}


def test_vqa_accuracy_english_rules_from_textvqa_file(tmp_path, capsys):
    preds = {"p": "5.", "n": "two", "a": "a stop sign", "c": "dont know", "w": "stop"}
    refs = {"p": ["5"] * 10, "n": ["2"] * 10, "a": ["stop sign"] * 10, "c": ["don't know"] * 10,
            "w": ["stop sign"] * 10}
    out = _cli(tmp_path, capsys, preds, _textvqa(refs), "--metrics", "VQA-accuracy")
    pq = out["per_question"]
    assert [pq[q]["VQA-accuracy"] for q in "pnacw"] == [1.0, 1.0, 1.0, 1.0, 0.0]
    # The same file scored with Vietnamese rules: only the number with its period matches ("5 ." vs "5" no).
    out = _cli(tmp_path, capsys, preds, _textvqa(refs), "--metrics", "VQA-accuracy", "--answer_rules", "vietnamese")
    assert [out["per_question"][q]["VQA-accuracy"] for q in "pnacw"] == [0.0, 0.0, 0.0, 0.0, 0.0]


def test_vqa_accuracy_leave_one_out_with_english_rules():
    # 3 of 10 annotators wrote "two" / "2" / "Two." and 7 "3": prediction "2" matches 3 -> 0.9 (official table).
    refs = ["two", "2", "Two."] + ["3"] * 7
    acc, fallback = vqa_lib.vqa_accuracy([vqa_lib.english_answer("2")], [[vqa_lib.english_answer(r) for r in refs]])
    assert acc[0] == pytest.approx(0.9) and fallback == 0


@pytest.mark.parametrize("raw,expected", [
    ("5.", "5"), ("Two", "2"), ("a stop sign", "stop sign"), ("The Stop-Sign!", "stop sign"),
    ("dont know", "don't know"), ("1,000", "1000"), ("2.5", "2.5"), ("yes.", "yes"), ("its red", "its red"),
    ("none", "0"), ("hello , world", "hello world"), ("couldnt've", "couldn't've"), ("an apple", "apple"),
    # EvalAI's contraction table as MMF's EvalAIAnswerProcessor applies it (its outputs): only one apostrophe
    # missing is given back, its "Im" entry never matches a lowercased answer, "'s" is split off.
    ("couldntve", "couldntve"), ("im", "im"), ("It's", "it 's"), ("shes", "shes"), ("somebody'd", "somebodyd"),
])
def test_english_answer_processing(raw, expected):
    assert vqa_lib.english_answer(raw) == expected


def test_vietnamese_rules_keep_an_and_number_words():
    # "an" is a Vietnamese word and "hai" is not mapped to "2": only exact (normalized) answers match.
    out = score({"a": "an toàn", "b": "hai"}, {"a": ["toàn"] * 10, "b": ["2"] * 10}, metrics=["VQA-accuracy"],
                per_question=True)
    assert out["per_question"]["a"]["VQA-accuracy"] == 0.0 and out["per_question"]["b"]["VQA-accuracy"] == 0.0
    with pytest.raises(ValueError, match="answer_rules"):
        score({"a": "x"}, {"a": ["x"]}, answer_rules="french")


# ---- empty references -----------------------------------------------------------------------------------


def test_empty_reference_through_cli(tmp_path, capsys):
    out = _cli(tmp_path, capsys, {"e": "", "f": "\f", "x": "con mèo"}, {"e": [""], "f": [" \f "], "x": ["con mèo"]},
               "--metrics", "EM", "F1", "ANLS", "VQA-accuracy", "ROUGE-L", "CIDEr")
    assert out["num_questions"]["overall"] == 3
    for q in ("e", "f"):
        assert out["per_question"][q] == {"EM": 1.0, "F1": 1.0, "ANLS": 1.0, "VQA-accuracy": 1.0, "ROUGE-L": 1.0,
                                          "CIDEr": 10.0}
    assert out["counts"]["empty_references"] == 2
    assert out["overall"]["EM"] == 1.0


# ---- the original toolkit's text mode -------------------------------------------------------------------


RAW_PREDS = {"1": "Toà nhà MÀU XANH.", "2": "Quán cà phê, (ở) Bến Thành!", "3": "hoà bình", "4": "Xe máy màu đỏ",
             "5": "CỬA HÀNG tên là Minh-Châu", "6": "hai người"}
RAW_REFS = {"1": ["Tòa nhà màu xanh", "toà nhà xanh"], "2": ["quán cà phê ở bến thành"], "3": ["Hòa Bình"],
            "4": ["xe máy màu đỏ ."], "5": ["cửa hàng tên minh châu", "Minh Châu"], "6": ["Hai người đang đi"]}


@needs_java
@pytest.mark.slow
def test_pycocoevalcap_mode_matches_the_toolkit():
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.rouge.rouge import Rouge
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    tok = PTBTokenizer()
    gts = tok.tokenize({q: [{"caption": r} for r in rs] for q, rs in RAW_REFS.items()})
    res = tok.tokenize({q: [{"caption": p}] for q, p in RAW_PREDS.items()})
    bleu, _ = Bleu(4).compute_score(gts, res, verbose=0)
    rouge, _ = Rouge().compute_score(gts, res)
    cider, _ = Cider().compute_score(gts, res)
    for mode in ("pycocoevalcap", "official"):  # the official mode scores the caption metrics as the toolkit
        ours = score(RAW_PREDS, RAW_REFS, metrics=["BLEU", "ROUGE-L", "CIDEr"], text_mode=mode)["overall"]
        for k in range(4):
            assert ours[f"BLEU-{k + 1}"] == pytest.approx(bleu[k], abs=1e-9)
        assert ours["ROUGE-L"] == pytest.approx(rouge, abs=1e-9)
        assert ours["CIDEr"] == pytest.approx(cider, abs=1e-9)
    # The default mode rewrites "toà" to "tòa" and "hoà" to "hòa", so its numbers differ from the toolkit's.
    default = score(RAW_PREDS, RAW_REFS, metrics=["CIDEr", "EM"], per_question=True)
    assert default["overall"]["CIDEr"] != pytest.approx(cider, abs=1e-3)
    assert default["per_question"]["3"]["EM"] == 1.0
    coco_mode = score(RAW_PREDS, RAW_REFS, metrics=["EM"], per_question=True, text_mode="pycocoevalcap")
    assert coco_mode["per_question"]["3"]["EM"] == 0.0  # "hoà bình" vs "hòa bình": different letters there


def test_pycocoevalcap_mode_without_java_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("OPENVIVQA_JAVA", raising=False)
    with pytest.raises(ValueError, match="pycocoevalcap.*Java runtime not found"):
        score({"a": "x"}, {"a": ["x"]}, metrics=["BLEU"], text_mode="pycocoevalcap")


def test_official_mode_without_java_names_its_caption_metrics_not_official(tmp_path, monkeypatch):
    """Without Java the official mode still scores: ANLS and EM by their scripts, the caption metrics on the
    normalized text, named not official in the rules and a note (a training run keeps its evaluation)."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("OPENVIVQA_JAVA", raising=False)
    out = score({"a": "The Cat."}, {"a": ["the cat"]}, metrics=["BLEU-1", "ANLS", "EM"], text_mode="official")
    assert out["overall"]["EM"] == 1.0 and out["overall"]["ANLS"] == pytest.approx(1 - 1 / 8)
    assert out["rules"]["ANLS"]["official"] and out["rules"]["EM"]["official"]
    assert not out["rules"]["BLEU-1"]["official"] and "Java runtime not found" in out["rules"]["BLEU-1"]["rule"]
    assert any("PTB tokenizer is unavailable" in n for n in out["notes"])


# ---- METEOR failure notes --------------------------------------------------------------------------------


def test_meteor_failure_note_names_question_and_cause(tmp_path):
    # A stand-in for java: answers two SCORE lines with statistics, then dies of the JVM's out-of-memory error.
    fake = tmp_path / "java"
    fake.write_text("#!/bin/sh\nread a\necho '1 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 1 1'\nread b\n"
                    "echo '1 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 1 1'\nread c\n"
                    "echo 'Exception in thread \"main\" java.lang.OutOfMemoryError: Java heap space' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    jar = tmp_path / "meteor-1.5.jar"
    jar.write_bytes(b"")
    preds = {"q1": "a", "q2": "b", "q3": "c", "q4": "d"}
    out = score(preds, {q: [v] for q, v in preds.items()}, metrics=["METEOR", "EM"], java=str(fake),
                meteor_jar=str(jar), meteor_timeout=30)
    assert out["overall"]["METEOR"] is None and out["overall"]["EM"] == 1.0
    note = next(n for n in out["notes"] if n.startswith("METEOR unavailable"))
    assert "question 'q3'" in note and "(2 of 4 questions)" in note and "out of memory" in note, note


# ---- decoded strings -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    sents = ["mẫu cửa hàng màu đỏ", "người mặc áo màu trắng", "phở bò"] * 30
    return train_sentencepiece(sents, str(tmp_path_factory.mktemp("spm") / "spm.model"), vocab_size=400)


def _byte(tok, b: int) -> int:
    return tok._sp.piece_to_id(f"<0x{b:02X}>")


def test_incomplete_byte_run_is_dropped_and_counted(tok):
    m = tok._sp.piece_to_id("\u2581m")
    assert m != tok.unk_id
    # "ữ" is E1 BB AF in UTF-8: a decode that stops after two of its bytes.
    text, notes = tok.decode_with_notes([m, _byte(tok, 0xE1), _byte(tok, 0xBB), tok.eos_id])
    assert text == "m" and notes.dropped_bytes == 2 and notes.unknown_pieces == 0
    text, notes = tok.decode_with_notes([m, _byte(tok, 0xE1), _byte(tok, 0xBB), _byte(tok, 0xAF)])
    assert text == "mữ" and not notes
    # Control characters from byte pieces are never emitted; unknown pieces are counted.
    text, notes = tok.decode_with_notes([m, _byte(tok, 0x01), tok.unk_id, m])
    assert text == "m m" and notes.dropped_bytes == 1 and notes.unknown_pieces == 1
    assert "\ufffd" not in text


def test_copy_step_inside_a_byte_run(tok):
    vocab = AnswerVocab(tok, num_ocr=2, max_len=8)
    V = tok.vocab_size
    m = tok._sp.piece_to_id("\u2581m")
    ids = [m, _byte(tok, 0xE1), V + 0, _byte(tok, 0xBB), _byte(tok, 0xAF), tok.eos_id]
    text, notes = vocab.decode_with_notes(ids, ["phở", "bò"])
    # E1 before the copy and BB AF after it are incomplete on both sides: all three bytes dropped.
    assert text == "m phở" and notes.dropped_bytes == 3


def test_decode_notes_and_unknown_piece_reach_the_metrics_file(tmp_path):
    records = [
        {"question_id": "1", "prediction": "con mèo", "references": ["con mèo"], "qa_type": 0,
         "decode_notes": {"dropped_bytes": 2, "unknown_pieces": 0}},
        {"question_id": "2", "prediction": "con \u2047", "references": ["con chó"], "qa_type": 0},
        {"question_id": "3", "prediction": "xe", "references": ["xe"], "qa_type": 0},
    ]
    out = evaluate_split(records, tmp_path, "dev", metrics=["EM"])
    assert out["counts"]["decode_dropped_byte_predictions"] == 1
    assert out["counts"]["unknown_piece_predictions"] == 1
    assert any("lost 2 bytes" in n and "'1'" in n for n in out["notes"])
    assert any("unknown piece" in n and "'2'" in n for n in out["notes"])
    # Re-scoring the written predictions file with the CLI keeps the decode notes.
    rc = evaluate.run(["--predictions", str(tmp_path / "dev_predictions.json"), "--metrics", "EM"])
    assert rc == 0


# ---- CLI start-up ----------------------------------------------------------------------------------------


def test_evaluate_cli_imports_no_scipy_jax_or_tensorflow():
    code = ("import sys, openvivqa_jax.evaluate; "
            "print(sorted(m for m in ('scipy', 'jax', 'tensorflow', 'sentencepiece') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"
