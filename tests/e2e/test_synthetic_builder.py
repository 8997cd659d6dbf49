"""Tests of the synthetic OpenViVQA builder and generator (tfds_builders/synthetic_openvivqa).

The guideline checks use rules written out here from the OpenViVQA paper (Table 1: the twelve colours,
quantities in words up to ten, phrase answers; §3.2.4: lowercase, prices as ``#,### đồng``), not the generator's
own tables.
"""

from __future__ import annotations

import itertools
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

try:
    import tfds_builders  # noqa: F401
except ImportError:  # running from a checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from openvivqa_jax.text.normalize import normalize_text  # noqa: E402
from tfds_builders.synthetic_openvivqa import Builder  # noqa: E402
from tfds_builders.synthetic_openvivqa import generator as gen  # noqa: E402

SPLITS = ("train", "validation", "test")
# Paper Table 1 colours (black, white, red, orange, yellow, green, blue, sky blue, purple, pink, brown, gray).
GUIDELINE_COLORS = ("đen", "trắng", "đỏ", "cam", "vàng", "xanh lá", "xanh dương", "xanh da trời", "tím", "hồng",
                    "nâu", "xám")
COUNT_WORDS = ("một", "hai", "ba", "bốn", "năm", "sáu", "bảy", "tám", "chín", "mười")
PRICE_RE = re.compile(r"\d{1,3}(?:,\d{3})* đồng")


def _decode(v):
    return v.decode("utf-8") if isinstance(v, bytes) else v


def _read(builder) -> dict[str, list[dict]]:
    """All records of every split as plain Python (str, lists, float32 arrays), sorted by question id."""
    out = {}
    for split, source in builder.as_data_source().items():
        recs = []
        for i in range(len(source)):
            ex = source[i]
            ocr = ex["ocr"]
            recs.append({
                "image": np.asarray(ex["image"]),
                "image_id": _decode(ex["image_id"]),
                "question_id": _decode(ex["question_id"]),
                "question": _decode(ex["question"]),
                "answers": [_decode(a) for a in ex["answers"]],
                "qa_type": int(ex["qa_type"]),
                "kind": _decode(ex["kind"]),
                "ocr_text": [_decode(t) for t in ocr["text"]],
                "ocr_box": np.asarray(ocr["box"], np.float32).reshape(-1, 4),
                "ocr_score": np.asarray(ocr["score"], np.float32).reshape(-1),
            })
        out[split] = sorted(recs, key=lambda r: r["question_id"])
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Builds tiny twice (two data dirs) and tiny_clean once; returns dirs and records."""
    result = {}
    for tag, config in (("a", "tiny"), ("b", "tiny"), ("clean", "tiny_clean")):
        data_dir = tmp_path_factory.mktemp(f"syn_{tag}")
        builder = Builder(config=config, data_dir=str(data_dir), file_format="array_record")
        builder.download_and_prepare()
        result[tag] = {"dir": data_dir, "records": _read(builder), "builder": builder}
    yield result
    for v in result.values():
        shutil.rmtree(v["dir"], ignore_errors=True)


def _all_records(records):
    return [r for split in SPLITS for r in records[split]]


def test_sizes_and_ids(built):
    recs = built["a"]["records"]
    for split, n_images in (("train", 40), ("validation", 10), ("test", 10)):
        per_image = {}
        for r in recs[split]:
            assert re.fullmatch(rf"syn-{split}-\d{{5}}-\d", r["question_id"]), r["question_id"]
            assert r["question_id"].startswith(r["image_id"] + "-")
            per_image.setdefault(r["image_id"], []).append(r)
        assert len(per_image) == n_images
        assert all(3 <= len(v) <= 5 for v in per_image.values())
        # Every question of one image sees the same pixels and OCR.
        for v in per_image.values():
            assert all(np.array_equal(v[0]["image"], x["image"]) for x in v)
            assert all(v[0]["ocr_text"] == x["ocr_text"] for x in v)
    ids = [r["question_id"] for r in _all_records(recs)]
    assert len(ids) == len(set(ids))
    img = recs["train"][0]["image"]
    assert img.shape == (192, 256, 3) and img.dtype == np.uint8


def test_two_builds_are_byte_identical(built):
    files_a = sorted(p.relative_to(built["a"]["dir"]) for p in built["a"]["dir"].rglob("*array_record*"))
    files_b = sorted(p.relative_to(built["b"]["dir"]) for p in built["b"]["dir"].rglob("*array_record*"))
    assert files_a and files_a == files_b
    for rel in files_a:
        assert (built["a"]["dir"] / rel).read_bytes() == (built["b"]["dir"] / rel).read_bytes(), rel
    for split in SPLITS:
        for ra, rb in zip(built["a"]["records"][split], built["b"]["records"][split], strict=True):
            assert (ra["question"], ra["answers"], ra["ocr_text"]) == (rb["question"], rb["answers"], rb["ocr_text"])
            assert ra["ocr_box"].tobytes() == rb["ocr_box"].tobytes()


def test_noise_changes_only_ocr(built):
    noisy, clean = built["a"]["records"], built["clean"]["records"]
    n_noisy = n_clean = 0
    for split in SPLITS:
        for rn, rc in zip(noisy[split], clean[split], strict=True):
            assert (rn["question_id"], rn["question"], rn["answers"]) == (rc["question_id"], rc["question"],
                                                                          rc["answers"])
            assert len(rn["ocr_text"]) <= len(rc["ocr_text"])
            n_noisy += len(rn["ocr_text"])
            n_clean += len(rc["ocr_text"])
    assert n_noisy < n_clean  # 3% drop over ~2,700 token slots removes some
    # Clean boxes are exact multiples of nothing in particular, but noisy ones moved.
    r0n, r0c = noisy["train"][0], clean["train"][0]
    assert not np.array_equal(r0n["ocr_box"][:3], r0c["ocr_box"][:3])


def _name_answers(records, split):
    """(record, shop name) for each text QA whose answer names a shop ('... tên là <name>')."""
    out = []
    for r in records[split]:
        m = re.fullmatch(r".* tên là (.+)", r["answers"][0])
        if r["qa_type"] == 1 and m:
            out.append((r, m.group(1)))
    return out


def test_shop_names_come_from_ocr_and_split_pools(built):
    recs = built["clean"]["records"]
    for split in SPLITS:
        pairs = _name_answers(recs, split)
        assert pairs, split
        for r, name in pairs:
            assert name in gen.SHOP_NAME_POOLS[split], (r["question_id"], name)
            assert gen.split_of_name(name) == split
            words, toks = name.split(), r["ocr_text"]
            assert any(toks[i:i + len(words)] == words for i in range(len(toks))), (r["question_id"], name, toks)
    # Every image has a shop-name question (the copying target).
    for split in SPLITS:
        with_name = {r["image_id"] for r, _ in _name_answers(recs, split)}
        assert with_name == {r["image_id"] for r in recs[split]}


def test_test_names_never_seen_in_train(built):
    # Pools: disjoint names and disjoint syllables.
    for a, b in itertools.combinations(SPLITS, 2):
        assert not set(gen.SHOP_NAME_POOLS[a]) & set(gen.SHOP_NAME_POOLS[b])
        words_a = {w for n in gen.SHOP_NAME_POOLS[a] for w in n.split()}
        words_b = {w for n in gen.SHOP_NAME_POOLS[b] for w in n.split()}
        assert not words_a & words_b
    recs = built["clean"]["records"]
    train_words = {w for r in recs["train"] for s in [r["question"], *r["answers"], *r["ocr_text"]] for w in s.split()}
    for split in ("validation", "test"):
        names = {name for _, name in _name_answers(recs, split)}
        assert names
        for name in names:
            assert not set(name.split()) & train_words, (split, name)


def test_guideline_rules(built):
    records = _all_records(built["a"]["records"])
    n_text = sum(r["qa_type"] == 1 for r in records)
    assert 0.35 <= n_text / len(records) <= 0.65
    assert {r["qa_type"] for r in records} == {0, 1}
    for r in records:
        q, a = r["question"], r["answers"][0]
        assert len(r["answers"]) == 1
        for s in (q, a):
            assert s == s.lower() and s == normalize_text(s), s
        assert q.endswith(" ?") and re.search(r"\b(gì|bao nhiêu|nào|mấy)\b", q), q  # not yes/no
        assert len(a.split()) >= 2, a  # phrases or sentences, not single words
        for m in re.finditer(r"màu ", a):
            rest = a[m.end():]
            assert any(rest == c or rest.startswith(c + " ") for c in GUIDELINE_COLORS), a
        for m in re.finditer(r"\bbên (\S+)", a):
            assert m.group(1) in ("trái", "phải"), a
        m = re.fullmatch(r"có (\S+) .+", a)
        if m:
            assert m.group(1) in COUNT_WORDS, a
        if r["qa_type"] == 0:
            assert not re.search(r"\d", a), a  # quantities in words
        if "đồng" in a.split():
            assert re.fullmatch(r".* có giá " + PRICE_RE.pattern, a), a
        if re.search(r"\d", a) and "đồng" not in a.split():
            assert re.fullmatch(r"số điện thoại là 0\d{3}\.\d{3}\.\d{3}", a), a
    # Prices are present at all, in the normalized OCR too.
    assert any(" có giá " in r["answers"][0] for r in records)
    assert any(re.fullmatch(r"\d{1,3}(,\d{3})*", t) for r in records for t in r["ocr_text"])


def _kind_from_text(question: str, answer: str, qa_type: int) -> str:
    """The template kind of a QA, read from its wording (the guideline phrasings), not from the generator."""
    if re.fullmatch(r".* tên là .+", answer):
        return "name"
    if " có giá " in answer:
        return "price"
    if re.fullmatch(r"(biển|bảng) hiệu màu .+", answer):
        return "sign_colour"
    if question.endswith(" bán gì ?"):
        return "sells"
    if re.fullmatch(r"cửa hàng .+ nằm ở (bên (trái|phải)|giữa)", answer):
        return "shop_position"
    if answer.startswith("số điện thoại là "):
        return "phone"
    if answer.startswith("đây là đường "):
        return "street"
    if re.fullmatch(r"có \S+ cửa hàng", answer):
        return "shop_count"
    if re.fullmatch(r"có \S+ .+", answer):
        return "count"
    if qa_type == 0 and re.search(r" ở bên (trái|phải)$", answer):
        return "position"
    if qa_type == 0 and " màu " in f" {answer} ":
        return "colour"
    raise AssertionError(f"no kind for {question!r} -> {answer!r}")


def test_every_qa_has_its_template_kind(built):
    """The kind feature agrees with each QA's wording; text kinds are text QAs; every kind occurs."""
    records = _all_records(built["a"]["records"])
    kinds = {}
    for r in records:
        assert r["kind"] == _kind_from_text(r["question"], r["answers"][0], r["qa_type"]), r
        kinds.setdefault(r["kind"], set()).add(r["qa_type"])
    text = {"name", "price", "sign_colour", "sells", "shop_position", "phone", "street"}
    non_text = {"colour", "position", "count", "shop_count"}
    assert {k for k, t in kinds.items() if t == {1}} == text
    assert {k for k, t in kinds.items() if t == {0}} == non_text
    assert set(gen.TEXT_KINDS) == text and set(gen.NON_TEXT_KINDS) == non_text


def test_ocr_boxes_and_strings(built):
    for tag in ("a", "clean"):
        for r in _all_records(built[tag]["records"]):
            box, text, score = r["ocr_box"], r["ocr_text"], r["ocr_score"]
            assert box.shape == (len(text), 4) and score.shape == (len(text),)
            assert len(text) <= 30
            assert np.all((box >= 0) & (box <= 1))
            assert np.all(box[:, 0] < box[:, 2]) and np.all(box[:, 1] < box[:, 3])
            np.testing.assert_array_equal(score, 1.0)
            for t in text:
                assert t and " " not in t and normalize_text(t) == t and normalize_text(normalize_text(t)) == t


def test_colors_are_distinct_guideline_colors():
    assert set(gen.COLORS) == set(GUIDELINE_COLORS)
    rgb = {k: np.asarray(v, float) for k, v in gen.COLORS.items()}
    for a, b in itertools.combinations(rgb, 2):
        assert np.linalg.norm(rgb[a] - rgb[b]) >= 60, (a, b)


def test_render_scene_ground_truth_matches_pixels():
    for seed in range(6):
        img, info = gen.render_scene(seed, size=(640, 480))
        arr = np.asarray(img)
        w, h = img.size
        # Sign colour: a pixel just inside the border is exactly the named colour.
        for s in info["signboards"]:
            x0, y0, x1, y1 = s["box"]
            px = arr[int(y0 * h) + 6, int((x0 + x1) / 2 * w)]
            assert tuple(px) == gen.COLORS[s["color"]], (seed, s)
            # The name's OCR boxes contain text-coloured pixels.
        texts, boxes = info["ocr"]["text"], info["ocr"]["box"]
        for s in info["signboards"]:
            words = s["name"].split()
            i = next(i for i in range(len(texts)) if texts[i:i + len(words)] == words)
            fg = np.asarray(gen.SIGN_TEXT_COLORS[s["color"]])
            for b in boxes[i:i + len(words)]:
                crop = arr[int(b[1] * h):int(np.ceil(b[3] * h)), int(b[0] * w):int(np.ceil(b[2] * w))]
                assert (np.abs(crop.astype(int) - fg).sum(-1) < 30).mean() > 0.1, (seed, s["name"])
        # Counting answers match the objects drawn.
        for qa in info["qas"]:
            m = re.fullmatch(r"có (\S+) (chiếc ô tô|chiếc xe máy|người|cây dù|chiếc ghế nhựa)", qa["answers"][0])
            if m:
                key = {"chiếc ô tô": "car", "chiếc xe máy": "motorbike", "người": "person", "cây dù": "umbrella",
                       "chiếc ghế nhựa": "stool"}[m.group(2)]
                n = sum(o["kind"] == key for o in info["objects"])
                assert COUNT_WORDS.index(m.group(1)) + 1 == n


def test_render_scene_is_size_independent_and_accepts_names():
    _, small = gen.render_scene(11, size=(256, 192))
    _, large = gen.render_scene(11, size=(640, 480))
    assert small["signboards"] == large["signboards"] and small["qas"] == large["qas"]
    assert small["ocr"]["text"] == large["ocr"]["text"]
    _, info = gen.render_scene(np.random.default_rng(5), shop_names=["Hoà Thuỷ"], split="test")
    assert [s["name"] for s in info["signboards"]] == ["hòa thủy"]
    assert any("hòa thủy" in qa["answers"][0] for qa in info["qas"])
    with pytest.raises(ValueError, match="shop_names"):
        gen.render_scene(0, shop_names=["a", "b", "c", "d"])
    with pytest.raises(ValueError, match="unknown split"):
        gen.render_scene(0, split="dev")


@pytest.mark.slow
def test_tesseract_reads_shop_name():
    pytesseract = pytest.importorskip("pytesseract")
    try:
        langs = pytesseract.get_languages(config="")
    except Exception as e:  # binary missing
        pytest.skip(f"tesseract binary not available: {e}")
    if "vie" not in langs:
        pytest.skip("tesseract has no 'vie' language data (apt-get install tesseract-ocr-vie)")
    names = ["thủy trang", "khoa", "uyên ngân"]  # test-pool names: never in train
    read = 0
    for seed, name in enumerate(names):
        img, info = gen.render_scene(seed, size=(640, 480), shop_names=[name], split="test")
        text = normalize_text(pytesseract.image_to_string(img, lang="vie"))
        read += name in text
    assert read >= 2, f"tesseract read {read}/3 shop names"
