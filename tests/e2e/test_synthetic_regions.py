"""The synthetic set's oracle detector (``generator.detector_regions``) and the region-feature variant of the
builder and of MLPAG (configs/synthetic/mlpag_regions.py)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, load_config, subprocess_env
from tfds_builders.synthetic_openvivqa import Builder
from tfds_builders.synthetic_openvivqa import generator as gen


def test_region_feature_is_class_one_hot_then_pooled_rgb():
    """A 40 x 40 image whose top-left quarter is red on its left half and blue on its right half: the box
    over that quarter pools to 4 x 4 cells of 5 x 5 pixels each, columns 0-1 red and 2-3 blue."""
    img = np.zeros((40, 40, 3), np.uint8)
    img[:20, :10] = (255, 0, 0)
    img[:20, 10:20] = (0, 0, 255)
    img[20:, :] = (0, 255, 0)
    feats, boxes = gen.detector_regions(img, [{"class": "car", "box": (0.0, 0.0, 0.5, 0.5)},
                                              {"class": "banner", "box": (0.0, 0.5, 1.0, 1.0)}])
    assert feats.dtype == np.float16 and feats.shape == (2, 8 + 48) == (2, gen.REGION_FEATURE_DIM)
    np.testing.assert_array_equal(boxes, [[0, 0, 0.5, 0.5], [0, 0.5, 1, 1]])
    classes = ("car", "motorbike", "person", "umbrella", "stool", "signboard", "street_sign", "banner")
    np.testing.assert_array_equal(feats[:, :8], [[c == "car" for c in classes], [c == "banner" for c in classes]])
    grid = feats[0, 8:].astype(np.float32).reshape(4, 4, 3)
    np.testing.assert_array_equal(grid[:, :2], np.broadcast_to([1, 0, 0], (4, 2, 3)))
    np.testing.assert_array_equal(grid[:, 2:], np.broadcast_to([0, 0, 1], (4, 2, 3)))
    np.testing.assert_array_equal(feats[1, 8:].astype(np.float32).reshape(4, 4, 3), np.broadcast_to([0, 1, 0],
                                                                                                    (4, 4, 3)))


@pytest.mark.parametrize("region, message", [({"class": "tree", "box": (0, 0, 1, 1)}, "unknown class 'tree'"),
                                             ({"class": "car", "box": (0.5, 0, 0.5, 1)}, "not xyxy inside"),
                                             ({"class": "car", "box": (0, 0, 1.5, 1)}, "not xyxy inside")])
def test_bad_regions_are_refused(region, message):
    with pytest.raises(ValueError, match=message):
        gen.detector_regions(np.zeros((8, 8, 3), np.uint8), [region])


def test_scene_regions_are_its_objects_and_text_panels():
    """Every drawn object, signboard, street sign and banner is one region with its own box; an object's
    pooled colours contain its colour (the shape's painted pixels) somewhere in the grid."""
    for seed in range(6):
        img, info = gen.render_scene(seed, (256, 192))
        regions = info["regions"]
        want = ([o["kind"] for o in info["objects"]] + ["signboard"] * len(info["signboards"])
                + ["street_sign"] * (info["street"] is not None))
        assert [r["class"] for r in regions][:len(want)] == want
        assert len(regions) - len(want) in (0, 1) and all(r["class"] == "banner" for r in regions[len(want):])
        assert len(regions) <= 24  # configs/synthetic/mlpag_regions.py num_regions
        feats, boxes = gen.detector_regions(np.asarray(img), regions)
        for o, f in zip(info["objects"], feats):
            cells = f[8:].astype(np.float32).reshape(-1, 3) * 255
            dist = np.abs(cells - np.asarray(gen.COLORS[o["color"]], np.float32)).max(-1)
            assert dist.min() < 40, (seed, o["kind"], o["color"], cells.round())


def test_region_config_matches_the_generator():
    cfg = load_config("configs/synthetic/mlpag_regions.py")
    assert cfg.model.vision.kind == "region" and cfg.model.vision.region_dim == gen.REGION_FEATURE_DIM
    assert cfg.data.builder_config == "default_clean_regions"
    names = {c.name: c for c in Builder.BUILDER_CONFIGS}
    assert names["default_clean_regions"].region_features and not names["default_clean"].region_features


def test_grounded_config_trains_on_more_pictures_and_scores_the_same_test_pictures():
    """configs/synthetic/mlpag_regions_grounded.py: the 12,000-picture builder config differs from
    default_clean_regions only in its training pictures, so its validation and test splits are the same
    questions on the same pictures (its scores compare with the default job's)."""
    import itertools

    cfg = load_config("configs/synthetic/mlpag_regions_grounded.py")
    assert cfg.data.builder_config == "large_clean_regions" and cfg.model.vision.kind == "region"
    assert cfg.model.question_over_image and cfg.model.question_in_memory and cfg.data.train_kind_weights
    names = {c.name: c for c in Builder.BUILDER_CONFIGS}
    large, base = names["large_clean_regions"], names["default_clean_regions"]
    assert (large.num_train_images, base.num_train_images) == (12000, 1500) and large.region_features
    for split in ("validation", "test"):
        a = list(itertools.islice(gen.generate_split(split, large.generator_config()), 6))
        b = list(itertools.islice(gen.generate_split(split, base.generator_config()), 6))
        assert [k for k, _ in a] == [k for k, _ in b]
        for (_, x), (_, y) in zip(a, b):
            assert (x["question"], x["answers"], x["kind"]) == (y["question"], y["answers"], y["kind"])
            np.testing.assert_array_equal(x["image"], y["image"])
            np.testing.assert_array_equal(x["objects"]["features"], y["objects"]["features"])
    first_train = next(gen.generate_split("train", large.generator_config()))[1]
    assert first_train["image_id"] == "syn-train-00000"


def _flat(cfg, prefix=""):
    out = {}
    for k, v in cfg.items():
        if hasattr(v, "items"):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def test_main_job_is_the_base_with_proposals_and_the_grounded_training():
    """configs/default.py changes the zoo's base (configs/synthetic/base.py) in exactly the vision input
    (proposals), the OCR tokens' box position embedding, reading order and match with the question, the named
    shop's text and region tokens (from the longest named stretch), the self-attention over the OCR tokens and the
    question in the decoder, the grounded config's training (pictures, grounding options, word–region loss over
    the first 14 question tokens, steps) with its own kind weights (colour, side, signboard colour and sells
    oversampled, count not) and the region counter, and reads the grounded region config's data. The proposals
    config is it without box_grid, the reading order, the counter and the named shop's tokens, with the grounded
    config's kind weights (as first measured)."""
    main, base = _flat(load_config("configs/default.py")), _flat(load_config("configs/synthetic/base.py"))
    grounded = load_config("configs/synthetic/mlpag_regions_grounded.py")
    assert set(main) == set(base)
    assert {k: main[k] for k in main if main[k] != base[k]} == {
        "data.builder_config": grounded.data.builder_config,
        "data.train_kind_weights": "colour=9,count=1,position=3,shop_count=2,sign_colour=4,sells=2",
        "data.model_ready": True, "model.vision.kind": "proposals",
        "model.ocr_features": ("phoc", "appearance", "box_grid", "order", "question_match"),
        "model.named_text_token": True, "model.ocr_self_attention": 1, "model.named_region_token": True,
        "model.named_match": "longest_run", "model.question_to_decoder": True, "model.question_over_image": True,
        "model.question_in_memory": True, "model.word_region_loss.weight": 1.0,
        "model.word_region_loss.max_words": 14, "model.counter.weight": 1.0, "train.num_train_steps": 4000,
        "train.eval_every_steps": 1000}
    prop = _flat(load_config("configs/synthetic/mlpag_proposals.py"))
    assert {k: prop[k] for k in prop if prop[k] != main[k]} == {
        "model.ocr_features": ("phoc", "appearance"), "data.train_kind_weights": grounded.data.train_kind_weights,
        "model.counter.weight": 0.0, "model.named_text_token": False, "model.ocr_self_attention": 0,
        "model.named_region_token": False, "model.named_match": "any", "model.question_to_decoder": False}


def test_pixel_grounded_config_is_the_base_with_the_grounded_training():
    """configs/synthetic/mlpag_pixels_grounded.py changes the zoo's base (the pixel CNN) in exactly the grounded
    region config's training fields (pictures, kind weights, grounding options, steps), its CNN's stages (one
    fewer: a 16x12 grid at 128x96) and the word–region loss (which needs the question over the image), and
    keeps a pixel CNN."""
    flat = _flat
    pix = flat(load_config("configs/synthetic/mlpag_pixels_grounded.py"))
    base = flat(load_config("configs/synthetic/base.py"))
    grounded = load_config("configs/synthetic/mlpag_regions_grounded.py")
    assert set(pix) == set(base)
    assert {k for k in pix if pix[k] != base[k]} == {
        "data.builder_config", "data.train_kind_weights", "model.question_over_image", "model.question_in_memory",
        "train.num_train_steps", "train.eval_every_steps", "eval.select_decoding", "model.vision.cnn_channels",
        "model.word_region_loss.weight"}
    assert len(pix["model.vision.cnn_channels"]) == len(base["model.vision.cnn_channels"]) - 1 == 3
    assert pix["model.vision.kind"] == "cnn" and pix["data.builder_config"] == grounded.data.builder_config
    assert pix["data.train_kind_weights"] == grounded.data.train_kind_weights
    assert pix["model.word_region_loss.weight"] > 0 and pix["model.question_over_image"] is True


@pytest.mark.slow
def test_mlpag_trains_on_tiny_regions(tmp_path):
    """The builder's tiny_regions variant stores each image's regions, and MLPAG on region features trains and
    scores from them end to end (the main command line)."""
    data = tmp_path / "tfds"
    b = Builder(config="tiny_regions", data_dir=str(data), file_format="array_record")
    b.download_and_prepare()
    ex = b.as_data_source("train")[0]
    assert ex["objects"]["features"].shape[1] == gen.REGION_FEATURE_DIM
    assert ex["objects"]["features"].shape[0] == ex["objects"]["boxes"].shape[0] >= 3
    # The split's records leave the region features out (read again from the source where used), unless asked;
    # then one copy per image, equal to the example's own.
    from openvivqa_jax.data import pipeline

    src = pipeline.load_source(b, "train")
    assert all(r.objects is None for r in pipeline.read_records(src, "train"))
    kept = pipeline.read_records(src, "train", keep_objects=True)
    by_image: dict = {}
    for r in kept:
        by_image.setdefault(r.image_id, []).append(r)
    shared = [rs for rs in by_image.values() if len(rs) > 1]
    assert shared and all(r.objects is rs[0].objects for rs in shared for r in rs)
    for r in kept[:5]:
        np.testing.assert_array_equal(r.objects["features"], np.asarray(src[r.index]["objects"]["features"], np.float32))
    wd = tmp_path / "run"
    res = subprocess.run([sys.executable, "-m", "openvivqa_jax.main", "--config", "configs/synthetic/mlpag_regions.py",
                          "--workdir", str(wd), f"--config.data.data_dir={data}",
                          "--config.data.builder_config=tiny_regions", "--config.train.num_train_steps=6",
                          "--config.train.batch_size=8", "--config.train.eval_every_steps=0",
                          "--config.eval.decoding=greedy", "--config.eval.ocr_ablation=False",
                          "--config.model.d_model=32", "--config.model.ffn_dim=64"],
                         cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert (wd / "eval" / "test_metrics.json").exists()
