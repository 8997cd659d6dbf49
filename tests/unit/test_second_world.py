"""The second learnability world (benchmarks/second_world.py): the folder it writes is what the folder builder
reads, the same seed writes the same files, every kind is asked and balanced, and each answer is checked here
against the drawn scene (kept in ``about/scenes_<split>.jsonl``) by rules written independently of the
generator's."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import second_world  # noqa: E402
from second_world_questions import COLOUR_VI, KINDS, NUMBERS, SHAPE_VI, SIZE_VI  # noqa: E402

from tfds_builders import readers  # noqa: E402
from tfds_builders.vqa_folder import annotation_rows  # noqa: E402

SIZES = ["--train_images", "40", "--dev_images", "4", "--test_images", "12"]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("w") / "world"
    assert second_world.main(["--out", str(out), "--seed", "3", *SIZES]) == 0
    return out


def _rows(world: Path, split: str) -> list[dict]:
    with open(world / f"{split}.csv", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _scenes(world: Path, split: str) -> dict[str, dict]:
    with open(world / "about" / f"scenes_{split}.jsonl", encoding="utf-8") as f:
        return {s["image"]: s for s in map(json.loads, f)}


def test_the_folder_builder_reads_every_row_with_its_kind(world):
    policy = readers.ErrorPolicy(readers.SkipCounter("t"), skip_missing_images=False, skip_invalid_records=False)
    for split in ("train", "dev", "test"):
        rows = annotation_rows.parse_csv(world / f"{split}.csv", answers_required=True, policy=policy,
                                         unknown=readers.UnknownFields("t"))
        assert len(rows) == len(_rows(world, split)) > 0
        assert {r.kind for r in rows} <= set(KINDS) and {r.language for r in rows} == {"en", "vi"}
        for r in rows:
            assert (world / r.image).is_file() and r.qa_type == int(r.kind == "verify_text")


def test_ocr_file_gives_each_printed_word_on_its_light_label(world, tmp_path):
    from openvivqa_jax.data import ocr as ocr_lib

    tokens = ocr_lib.load_ocr_file(world / "ocr.json")
    scenes = {**_scenes(world, "train"), **_scenes(world, "dev"), **_scenes(world, "test")}
    assert set(tokens) == set(scenes)
    worded = 0
    for image, scene in scenes.items():
        got = tokens[image]
        if not scene["word"]:
            assert got == []
            continue
        worded += 1
        (tok,) = got
        assert tok["text"] == scene["word"]
        # the box, read back in pixels, is a light label with dark letters inside, on a picture without others
        with Image.open(world / image) as im:
            w, h = im.size
            x0, y0, x1, y1 = (round(v * s) for v, s in zip(tok["box"], (w, h, w, h)))
            crop = np.asarray(im.convert("L").crop((x0 + 1, y0 + 1, x1 - 1, y1 - 1)), np.int32)
        assert np.mean(crop >= 240) > 0.5 and np.any(crop <= 45), image
    assert worded >= 10
    bare = tmp_path / "bare"
    assert second_world.main(["--out", str(bare), "--seed", "3", *SIZES, "--no_ocr"]) == 0
    assert not (bare / "ocr.json").exists() and (bare / "train.csv").read_bytes() == (world / "train.csv").read_bytes()


def test_same_seed_same_files_other_seed_other_files(world, tmp_path):
    again = tmp_path / "again"
    assert second_world.main(["--out", str(again), "--seed", "3", *SIZES]) == 0
    digest = lambda root: {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
                           for p in sorted(root.rglob("*")) if p.is_file()}
    assert digest(again) == digest(world)
    other = tmp_path / "other"
    assert second_world.main(["--out", str(other), "--seed", "4", *SIZES]) == 0
    assert (other / "train.csv").read_bytes() != (world / "train.csv").read_bytes()


def test_pictures_vary_in_size_and_aspect(world):
    sizes = {Image.open(p).size for p in (world / "images" / "train").glob("*.png")}
    ratios = [h / w for w, h in sizes]
    assert len(sizes) > 20 and min(ratios) < 0.8 and max(ratios) > 1.1
    assert all(176 <= w <= 304 for w, _ in sizes)


def test_every_kind_is_asked_and_yes_no_are_balanced(world):
    summary = json.loads((world / "about" / "summary.json").read_text(encoding="utf-8"))
    for split in ("train", "dev", "test"):
        rows = _rows(world, split)
        kinds = Counter(r["kind"] for r in rows)
        assert split == "dev" or set(kinds) == set(KINDS), (split, kinds)  # 4 dev pictures may lack a kind
        assert summary["splits"][split]["questions"] == len(rows)
        for kind in KINDS:
            answers = Counter(r["answer"] for r in rows if r["kind"] == kind)
            if kind == "relation":
                nothing = answers["nothing"] + answers["không có gì"]
                assert nothing * 2 == kinds[kind], (split, answers)
            elif kind != "count":
                yes = answers["yes"] + answers["có"] + answers["đúng"]
                assert yes * 2 == kinds[kind], (split, kind, answers)


def _attrs_en(phrase: str) -> dict:
    """``the small red circle`` / ``the red shape`` -> the attributes it names."""
    words = phrase.removeprefix("the ").split()
    out = {}
    for w in words:
        if w in ("small", "large"):
            out["size"] = w
        elif w in COLOUR_VI:
            out["colour"] = w
        elif w in SHAPE_VI:
            out["shape"] = w
    return out


def _named(scene: dict, attrs: dict) -> list[dict]:
    return [s for s in scene["shapes"] if all(s[k] == v for k, v in attrs.items())]


def test_english_answers_follow_from_the_drawn_scene(world):
    """Every English question of the train split re-answered from the scene record by rules of this test."""
    scenes = _scenes(world, "train")
    checked = Counter()
    for r in _rows(world, "train"):
        if r["language"] != "en":
            continue
        scene, q, kind = scenes[r["image"]], r["question"].removesuffix(" ?"), r["kind"]
        if kind.startswith("verify_") and kind != "verify_text":
            body = q.removeprefix("is ")
            negated = " not " in body
            body = body.replace(" not", "")
            *ref, value = body.replace(" a ", " ").split()
            named = _named(scene, _attrs_en(" ".join(ref)))
            assert len(named) == 1, r  # the question names one shape
            truth = value in (named[0]["colour"], named[0]["shape"], named[0]["size"])
            want = truth != negated
        elif kind == "verify_text":
            word = q.split()[3]
            want = (scene["word"] == word) != (" not " in q)
        elif kind == "exist":
            negated = q.startswith("is there no ")
            attrs = _attrs_en(q.split(maxsplit=3)[3])
            want = bool(_named(scene, attrs)) != negated
        elif kind == "count":
            attrs = _attrs_en(q.removeprefix("how many ").removesuffix(" are there").replace("s ", " ").rstrip("s"))
            n = len(_named(scene, attrs))
            assert r["answer"] == NUMBERS[n][0] and n < len(scene["shapes"]), r  # a distractor is drawn
            checked[kind] += 1
            continue
        elif kind == "compare_colour":
            a, b = q.removeprefix("are ").split(" and ")
            b = b.replace(" different colours", "").replace(" the same colour", "")
            (sa,), (sb,) = _named(scene, _attrs_en(a)), _named(scene, _attrs_en(b))
            want = (sa["colour"] == sb["colour"]) != q.endswith("different colours")
        elif kind == "compare_count":
            body = q.split(maxsplit=3)[3]  # "circles than squares" / "red shapes than blue shapes"
            x, y = (_named(scene, _attrs_en(p.replace("shapes", "").rstrip("s"))) for p in body.split(" than "))
            assert len(x) != len(y), r
            want = (len(x) > len(y)) if " more " in q else (len(x) < len(y))
        else:  # relation
            assert scene["layout"] == "pair"
            rel, anchor = q.removeprefix("what is ").split(" the ", 1)
            (a,) = _named(scene, _attrs_en(anchor))
            (b,) = [s for s in scene["shapes"] if s is not a]
            dx, dy = b["cx"] - a["cx"], b["cy"] - a["cy"]
            side = ("left" if dx < 0 else "right") if abs(dx) > abs(dy) else ("above" if dy < 0 else "below")
            expected = f"{b['colour']} {b['shape']}" if rel.startswith(side) else "nothing"
            assert r["answer"] == expected, r
            checked[kind] += 1
            continue
        assert r["answer"] == ("yes" if want else "no"), r
        checked[kind] += 1
    assert set(checked) == set(KINDS), checked


def test_vietnamese_templates_name_the_values_in_vietnamese(world):
    rows = [r for r in _rows(world, "train") if r["language"] == "vi"]
    yes_no = [r["answer"] for r in rows if r["kind"] not in ("count", "relation")]
    assert set(yes_no) == {"có", "không", "đúng", "sai"}
    assert all("đúng không ?" in r["question"] for r in rows if r["answer"] in ("đúng", "sai"))
    assert all(r["question"].startswith("có bao nhiêu ") and r["answer"] in {v for _, v in NUMBERS.values()}
               for r in rows if r["kind"] == "count")
    for r in rows:
        if r["kind"] == "relation" and r["answer"] != "không có gì":
            shape, colour = r["answer"].split(" màu ")
            assert shape in SHAPE_VI.values() and colour in COLOUR_VI.values()
    words = " ".join(r["question"] for r in rows)
    assert any(v in words for v in SIZE_VI.values()) and "có phải là" in words


def test_a_folder_that_is_not_empty_is_refused(tmp_path):
    from openvivqa_jax.errors import UsageError
    from openvivqa_jax.paths import PathError

    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "keep.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(PathError, match="--out"):
        second_world.main(["--out", str(tmp_path / "x")])
    with pytest.raises(UsageError, match="at least one picture"):
        second_world.main(["--out", str(tmp_path / "y"), "--test_images", "0"])
    assert (tmp_path / "x" / "keep.txt").read_text(encoding="utf-8") == "mine" and not (tmp_path / "y").exists()


def test_scene_draws_only_from_its_generator():
    from second_world_scene import render, sample_scene

    a = np.asarray(render(sample_scene(np.random.default_rng(5)), np.random.default_rng(6)))
    b = np.asarray(render(sample_scene(np.random.default_rng(5)), np.random.default_rng(6)))
    np.testing.assert_array_equal(a, b)


def test_probe_hand_rule_reads_every_colour_existence_answer_from_the_proposals(world, capsys):
    """The folder config's region proposals carry the colours the questions ask about: the probe's hand rule
    (a proposal of that colour, big enough) answers each colour-existence question of the world as its generator
    did, on both splits; its majority baseline is the per-kind, per-language most frequent training answer."""
    import second_world_probe

    out = second_world_probe.main(["--world", str(world), "--steps", "0"])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == out
    rows = {s: list(csv.DictReader(open(world / f"{s}.csv", encoding="utf-8"))) for s in ("train", "dev")}
    for split, (correct, total) in out["hand_rule"].items():
        asked = [r for r in rows[split] if r["kind"] == "exist" and (
            (r["question"].startswith("is there a") and r["question"].endswith(" shape ?"))
            or (r["question"].startswith("có hình màu ") and r["question"].endswith(" nào không ?")))]
        assert total == len(asked) and correct == total
    assert out["hand_rule"]["train"][1] >= 3
    for kind, score in out["majority"].items():
        dev = [r for r in rows["dev"] if r["kind"] == kind]
        hits = 0
        for r in dev:
            answers = Counter(t["answer"] for t in rows["train"] if t["kind"] == kind and t["language"] == r["language"])
            hits += r["answer"] == min(answers, key=lambda a: (-answers[a], a))  # a tie: the first in sorted order
        assert score == pytest.approx(100 * hits / len(dev), abs=0.05), kind


@pytest.fixture(scope="module")
def probe_splits(world) -> tuple[dict, dict]:
    """The world's train and dev splits as the probe reads them (proposals of a 128x96 picture, 64 regions)."""
    import argparse

    import second_world_probe

    setting = argparse.Namespace(width=128, height=96, num_regions=64, min_size=8, scale=400.0)
    return tuple(second_world_probe.load_split(str(world), s, setting) for s in ("train", "dev"))


def test_probe_transformer_on_objects_reads_no_pixels_of_box_or_context(probe_splits):
    """``--scorer transformer --objects``: the regions are their colour, area, shape and box alone; the pixels of
    their box and context (proposal features from :data:`second_world_probe.OBJECT_FEATURES` on) change nothing,
    and each quarter of the steps reports every kind asked but ``verify_text``."""
    import second_world_probe

    train, dev = probe_splits
    run = dict(train_images=10 ** 6, steps=8, seed=0, scorer="transformer", objects=True)
    first = second_world_probe.train_probe(train, dev, **run)
    noisy = dict(train, features=train["features"].copy())
    noisy["features"][..., second_world_probe.OBJECT_FEATURES:] = np.random.default_rng(0).random(
        noisy["features"][..., second_world_probe.OBJECT_FEATURES:].shape)
    assert second_world_probe.train_probe(noisy, dev, **run) == first
    assert [r["step"] for r in first] == [2, 4, 6, 8]
    asked = {r["kind"] for r in dev["rows"]} - {"verify_text"}
    assert all(set(r["kinds"]) == asked and 0 <= r["dev"] <= 100 for r in first)


@pytest.mark.parametrize("option, strong", [("weight_decay", 100.0), ("feature_noise", 1.0)])
def test_probe_optimizer_and_noise_options_change_the_training_and_zero_is_the_default(probe_splits, option, strong):
    """``--weight_decay`` (AdamW's decoupled decay) and ``--feature_noise`` (noise on the training batches' regions)
    are applied: a strong value changes the training losses of the same seed; an explicit 0 repeats the default
    run exactly (for the noise: its own generator leaves the batches drawn unchanged)."""
    import second_world_probe

    train, dev = probe_splits
    run = dict(train_images=10 ** 6, steps=8, seed=0, scorer="transformer", objects=True)
    plain = second_world_probe.train_probe(train, dev, **run)
    assert second_world_probe.train_probe(train, dev, **{option: 0.0}, **run) == plain
    changed = second_world_probe.train_probe(train, dev, **{option: strong}, **run)
    assert [r["train_loss"] for r in changed] != [r["train_loss"] for r in plain]


@pytest.mark.parametrize("flags", [dict(max_regions=3), dict(min_area=0.1)])
def test_probe_region_filters_leave_the_other_regions_unread(probe_splits, flags):
    """``--max_regions`` / ``--min_area``: the regions they leave out are not read (randomizing their features
    changes no result), the kept ones are (randomizing one changes the training), and a filter that keeps every
    region repeats the unfiltered run."""
    import second_world_probe

    train, dev = probe_splits
    run = dict(train_images=10 ** 6, steps=8, seed=0, scorer="transformer", objects=True, **flags)
    first = second_world_probe.train_probe(train, dev, **run)
    areas = train["features"][..., 6]
    out = ~train["mask"] | (np.arange(train["mask"].shape[1]) >= flags["max_regions"] if "max_regions" in flags
                            else areas < flags["min_area"])
    kept = train["mask"] & ~out
    assert out[train["mask"]].any() and kept.any(), "the fixture world must have regions on both sides"
    noise = np.random.default_rng(1).random(train["features"].shape, dtype=np.float32)
    dropped = dict(train, features=np.where(out[..., None], noise, train["features"]))
    if "min_area" in flags:  # the area feature decides the filter itself, so it stays below the threshold
        dropped["features"][..., 6] = np.where(out, areas, dropped["features"][..., 6])
    assert second_world_probe.train_probe(dropped, dev, **run) == first
    touched = dict(train, features=np.where(kept[..., None], noise, train["features"]))
    assert [r["train_loss"] for r in second_world_probe.train_probe(touched, dev, **run)] != \
        [r["train_loss"] for r in first]
    no_filter = dict(run, max_regions=0, min_area=0.0)
    everything = dict(run, max_regions=train["mask"].shape[1]) if "max_regions" in flags else dict(run, min_area=1e-9)
    assert second_world_probe.train_probe(train, dev, **everything) == \
        second_world_probe.train_probe(train, dev, **no_filter)


def test_probe_rejects_negative_filters_and_noise(world):
    """A negative ``--max_regions``, ``--min_area`` or ``--feature_noise`` stops with one ``error:`` line naming
    the flag."""
    import second_world_probe

    from openvivqa_jax.errors import UsageError

    for flag in ("--max_regions", "--min_area", "--feature_noise"):
        with pytest.raises(UsageError, match=flag):
            second_world_probe.main(["--world", str(world), "--steps", "1", flag, "-1"])



def _existence_splits(pictures: int, seed: int) -> dict:
    """A probe split made here, independently of the world generator: each picture has 6 regions (4 present),
    each of one of three colours (its first 3 features, the RGB, with noise) and random other features; one
    question per picture asks for a colour, in English or Vietnamese, half of them negated, answered by whether
    a present region has that colour, flipped when negated."""
    rng = np.random.default_rng(seed)
    palette = {"red": (0.9, 0.1, 0.1), "green": (0.1, 0.8, 0.2), "blue": (0.1, 0.2, 0.9)}
    vi = {"red": "đỏ", "green": "xanh lá", "blue": "xanh dương"}
    names = list(palette)
    colour = rng.integers(0, 3, (pictures, 6))
    features = rng.random((pictures, 6, 23), dtype=np.float32)
    features[..., :3] = np.array([palette[n] for n in names], np.float32)[colour] + rng.normal(
        0, 0.03, (pictures, 6, 3)).astype(np.float32)
    mask = np.zeros((pictures, 6), bool)
    mask[:, :4] = True
    rows = []
    for i in range(pictures):
        asked = names[rng.integers(0, 3)]
        present = bool((colour[i, :4] == names.index(asked)).any())
        negated, english = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
        holds = present != negated
        if english:
            q = f"is there {'no' if negated else 'a'} {asked} shape ?"
            rows.append({"question": q, "answer": "yes" if holds else "no", "kind": "exist", "language": "en"})
        elif negated:
            rows.append({"question": f"không có hình màu {vi[asked]} nào , đúng không ?",
                         "answer": "đúng" if holds else "sai", "kind": "exist", "language": "vi"})
        else:
            rows.append({"question": f"có hình màu {vi[asked]} nào không ?", "answer": "có" if holds else "không",
                         "kind": "exist", "language": "vi"})
    return {"rows": rows, "image": np.arange(pictures), "features": features,
            "boxes": rng.random((pictures, 6, 4), dtype=np.float32), "mask": mask}


def test_probe_exists_scorer_learns_negated_existence_with_the_rules_polarity():
    """``--scorer exists``: with each question's polarity from the negation rules, existence asked plainly and
    negated, in both languages, is answered on pictures it never saw (the answers made above from the regions'
    colours)."""
    import second_world_probe

    train, dev = _existence_splits(1000, 0), _existence_splits(200, 1)
    run = dict(train_images=10 ** 6, steps=600, seed=0, scorer="exists", learning_rate=1e-2, kinds=("exist",))
    last = second_world_probe.train_probe(train, dev, **run)[-1]
    assert last["dev"] >= 95.0, last


def test_probe_exists_scorer_sign_flips_the_yes_no_margin_only():
    """The ``exists`` scorer's polarity: a question's sign flips its affirming-minus-denying answer margin about
    the question's prior and leaves any other answer's logit as it is; with ``polarity="learned"`` the sign
    argument is not read."""
    import jax
    import jax.numpy as jnp
    import second_world_probe

    affirms = np.array([1.0, -1.0, 0.0], np.float32)  # yes, no, another answer
    params, forward = second_world_probe._scorer("exists", 5, 7, 3, 0, affirms, "rules")
    keys = iter(jax.random.split(jax.random.PRNGKey(3), 8))
    params = jax.tree_util.tree_map(lambda w: w + jax.random.normal(next(keys), w.shape), params)
    x = jax.random.normal(jax.random.PRNGKey(4), (2, 4, 5))
    m, q = jnp.ones((2, 4)), jnp.array([[1, 2, 3, 0], [4, 5, 6, 2]])
    plus, minus = forward(params, x, m, q, jnp.ones(2)), forward(params, x, m, q, -jnp.ones(2))
    np.testing.assert_allclose(plus[:, 2], minus[:, 2], rtol=1e-6)
    np.testing.assert_allclose(plus[:, 0] - minus[:, 0], -(plus[:, 1] - minus[:, 1]), rtol=1e-5)
    assert np.all(np.abs(plus[:, 0] - minus[:, 0]) > 1e-3)
    params, forward = second_world_probe._scorer("exists", 5, 7, 3, 0, affirms, "learned")
    np.testing.assert_array_equal(forward(params, x, m, q, jnp.ones(2)), forward(params, x, m, q, -jnp.ones(2)))
