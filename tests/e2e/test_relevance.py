"""The W2VV++ encoder (models/w2vvpp.py, the ``relevance`` task of openvivqa_jax/relevance/) and CLinRel /
CMedRel (openvivqa_jax/evaluation/relevance.py) in the evaluator and the evaluate command line."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from conftest import load_config


# ------------------------------------------------------------------------------------------- loss, recall
def _numpy_vse(text, visual, margin, same, hardest):
    """VSE++ (max) / VSE0 (sum) hinge loss written with loops."""
    t = text / np.linalg.norm(text, axis=1, keepdims=True)
    v = visual / np.linalg.norm(visual, axis=1, keepdims=True)
    b = len(t)
    total = 0.0
    for i in range(b):
        pos = float(t[i] @ v[i])
        neg_img = [max(0.0, margin + float(t[i] @ v[j]) - pos) for j in range(b) if j != i and not same[i, j]]
        neg_txt = [max(0.0, margin + float(t[j] @ v[i]) - pos) for j in range(b) if j != i and not same[j, i]]
        pick = max if hardest else sum
        total += (pick(neg_img) if neg_img else 0.0) + (pick(neg_txt) if neg_txt else 0.0)
    return total / b


@pytest.mark.parametrize("hardest", [True, False])
def test_vse_loss_matches_a_loop_computation(hardest):
    from openvivqa_jax.models.w2vvpp import vse_hardest_negative_loss

    rng = np.random.default_rng(0)
    text, visual = rng.normal(size=(6, 5)), rng.normal(size=(6, 5))
    same = np.zeros((6, 6), bool)
    same[0, 3] = same[3, 0] = True  # two pairs of one image: not negatives of each other
    got = float(vse_hardest_negative_loss(text, visual, 0.2, same, hardest=hardest))
    assert got == pytest.approx(_numpy_vse(text, visual, 0.2, same, hardest), rel=1e-5)
    # Masking changes the value: pair 3's image is the hardest negative of text 0 otherwise.
    unmasked = _numpy_vse(text, visual, 0.2, np.zeros((6, 6), bool), hardest)
    assert float(vse_hardest_negative_loss(text, visual, 0.2, None, hardest=hardest)) == pytest.approx(unmasked,
                                                                                                        rel=1e-5)


def test_recall_at_k_on_a_constructed_case():
    """Three images, four texts (texts 0 and 1 of image 0). Ranks of the right image per text: 0, 2, 1, 1; ranks
    of each image's best own text in its column: image 0 text 0 rank 0, image 1 text 2 rank 2 (below texts 1 and
    3), image 2 text 3 rank 0."""
    from openvivqa_jax.models.w2vvpp import recall_at_k

    sims = np.array([[0.9, 0.1, 0.2],
                     [0.1, 0.5, 0.3],
                     [0.8, 0.4, 0.0],
                     [0.0, 0.7, 0.6]])
    r = recall_at_k(sims, np.array([0, 0, 1, 2]), ks=(1, 2, 3))
    assert (r["t2i_R@1"], r["t2i_R@2"], r["t2i_R@3"]) == pytest.approx((1 / 4, 3 / 4, 1.0))
    assert (r["i2t_R@1"], r["i2t_R@2"], r["i2t_R@3"]) == pytest.approx((2 / 3, 2 / 3, 1.0))
    assert r["rsum"] == pytest.approx(1 / 4 + 3 / 4 + 1 + 2 / 3 + 2 / 3 + 1)


def test_region_pooling_by_box_centre():
    from openvivqa_jax.relevance.features import pool_grid, pool_regions

    feats = np.array([[1.0, 0.0], [3.0, 2.0], [0.0, 4.0]])
    boxes = np.array([[0.0, 0.0, 0.2, 1.0], [0.1, 0.0, 0.5, 0.5], [0.6, 0.2, 1.0, 0.4]])  # centres x .1, .3, .8
    np.testing.assert_allclose(pool_regions(feats, boxes, (1, 1)), [4 / 3, 2.0])
    np.testing.assert_allclose(pool_regions(feats, boxes, (1, 2)), [2.0, 1.0, 0.0, 4.0])
    grid = np.arange(2 * 2 * 4 * 1, dtype=np.float32).reshape(2, 2, 4, 1)
    np.testing.assert_allclose(pool_grid(grid, (1, 2))[0], [np.mean([0, 1, 4, 5]), np.mean([2, 3, 6, 7])])


# ------------------------------------------------------------------------------------------- encoders
META = {"language": "vi", "pair_text": "answer", "visual_dim": 6, "visual_mean": None, "visual_std": None,
        "words": ["chiếc", "xe", "màu", "đỏ", "xanh", "lá", "có", "một", "cây", "dù"],
        "visual": {"source": "file", "pool_grid": [1, 1]},
        "model": {"word_dim": 8, "gru_dim": 8, "mlp_dims": [16], "dropout": 0.0, "max_words": 8}}


def make_workdir(path, language="vi", seed=0, features=None):
    """A relevance-model workdir with an untrained (seeded) encoder: relevance_model.json and a checkpoint."""
    import jax.numpy as jnp
    import orbax.checkpoint as ocp
    from flax import nnx

    from openvivqa_jax.relevance import model
    from openvivqa_jax.relevance import train as rt
    from openvivqa_jax.relevance.features import FEATURES_FILE

    os.makedirs(path, exist_ok=True)
    meta = dict(META, language=language, vocab_size=len(META["words"]) + 2)
    with open(os.path.join(path, model.MODEL_FILE), "w", encoding="utf-8") as f:
        json.dump(meta, f, ensure_ascii=False)
    params = nnx.state(model.build(meta, seed), nnx.Param)
    state = {"step": jnp.int32(0), "params": params, "opt_state": model.optimizer(1.0, 1e-3).init(params)}
    latest, _ = rt._managers(str(path), 1)
    latest.save(0, args=ocp.args.Composite(state=ocp.args.StandardSave(state)))
    latest.wait_until_finished()
    if features is not None:
        np.savez(os.path.join(path, FEATURES_FILE), **features)
    return str(path)


@pytest.fixture(scope="module")
def vi_workdir(tmp_path_factory):
    rng = np.random.default_rng(1)
    feats = {f"img{i}": rng.normal(size=6).astype(np.float32) for i in range(3)}
    return make_workdir(tmp_path_factory.mktemp("w2vvpp") / "vi", features=feats), feats


def test_clinrel_of_a_sentence_with_itself_is_one(vi_workdir):
    from openvivqa_jax.evaluation import evaluator

    wd, _ = vi_workdir
    from openvivqa_jax.evaluation.relevance import RelevanceInputs

    res = evaluator.score({"1": "chiếc xe màu đỏ", "2": "có một cây dù", "3": "xanh lá"},
                          {"1": ["Chiếc xe màu đỏ"], "2": ["chiếc xe màu xanh lá", "có một cây dù"],
                           "3": ["màu đỏ"]},
                          metrics=["CLinRel"], per_question=True, relevance=RelevanceInputs(models=wd))
    pq = res["per_question"]
    assert pq["1"]["CLinRel"] == pytest.approx(1.0, abs=1e-6)  # the same words after normalization
    assert pq["2"]["CLinRel"] == pytest.approx(1.0, abs=1e-6)  # max over references
    assert -1.0 <= pq["3"]["CLinRel"] < 0.999
    assert res["overall"]["CLinRel"] == pytest.approx(np.mean([v["CLinRel"] for v in pq.values()]))


def test_missing_relevance_model_gives_none_with_a_note():
    from openvivqa_jax.evaluation import evaluator

    res = evaluator.score({"1": "màu đỏ"}, {"1": ["màu đỏ"]}, metrics=["CIDEr", "CLinRel", "CMedRel"])
    assert res["overall"]["CLinRel"] is None and res["overall"]["CMedRel"] is None
    assert any("CLinRel/CMedRel unavailable: no relevance model given" in n for n in res["notes"])
    assert "CLinRel" not in evaluator.DEFAULT_METRICS and "CMedRel" in evaluator.ALL_METRICS


def test_cmedrel_without_image_ids_is_none_with_a_note(vi_workdir):
    from openvivqa_jax.evaluation import evaluator
    from openvivqa_jax.evaluation.relevance import RelevanceInputs

    res = evaluator.score({"1": "màu đỏ"}, {"1": ["màu đỏ"]}, metrics=["CMedRel"],
                          relevance=RelevanceInputs(models=vi_workdir[0]))
    assert res["overall"]["CMedRel"] is None
    assert any("CMedRel unavailable: 1 of 1 questions have no image id" in n for n in res["notes"])


def _records(tmp_path, langs=("vi", "vi", "vi")):
    recs = [{"question_id": "q1", "image_id": "img0", "question": "xe màu gì ?",
             "prediction": "chiếc xe màu đỏ",
             "references": ["chiếc xe màu đỏ"], "qa_type": 0, "kind": "colour", "language": langs[0]},
            {"question_id": "q2", "image_id": "img1", "question": "có mấy cây dù ?",
             "prediction": "có một cây dù",
             "references": ["có hai cây dù"], "qa_type": 0, "kind": "count", "language": langs[1]},
            {"question_id": "q3", "image_id": "img2", "question": "xe màu gì ?", "prediction": "xanh lá",
             "references": ["chiếc xe màu xanh lá"], "qa_type": 0, "kind": "colour", "language": langs[2]}]
    path = tmp_path / "dev_predictions.json"
    path.write_text(json.dumps(recs, ensure_ascii=False), encoding="utf-8")
    return path, recs


def test_evaluate_cli_prints_clinrel_and_cmedrel(vi_workdir, tmp_path, capsys):
    from openvivqa_jax import evaluate
    from openvivqa_jax.evaluation.relevance import load_models

    wd, feats = vi_workdir
    path, recs = _records(tmp_path)
    code = evaluate.run(["--predictions", str(path), "--metrics", "CLinRel,CMedRel", "--relevance_model", wd,
                         "--per_question"])
    out = capsys.readouterr()
    assert code == 0, out.err
    res = json.loads(out.out)
    enc = load_models(wd)["vi"]
    h = enc.encode([r["prediction"] for r in recs])
    v = np.stack([feats[r["image_id"]] for r in recs])  # the model has no standardization: stored as is
    want = (h * v).sum(1) / np.linalg.norm(h, axis=1) / np.linalg.norm(v, axis=1)
    got = [res["per_question"][r["question_id"]]["CMedRel"] for r in recs]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert res["per_question"]["q1"]["CLinRel"] == pytest.approx(1.0, abs=1e-6)
    assert res["overall"]["CMedRel"] == pytest.approx(want.mean(), abs=1e-6)
    assert res["by_field"]["kind"]["colour"]["CMedRel"] == pytest.approx(want[[0, 2]].mean(), abs=1e-6)
    # An explicit features file gives the same numbers.
    np.savez(tmp_path / "feats.npz", **feats)
    assert evaluate.run(["--predictions", str(path), "--metrics", "CMedRel", "--relevance_model", f"vi={wd}",
                         "--image_features", str(tmp_path / "feats.npz")]) == 0
    assert json.loads(capsys.readouterr().out)["overall"]["CMedRel"] == pytest.approx(want.mean(), abs=1e-6)


def test_evaluate_cli_one_line_errors(vi_workdir, tmp_path, capsys):
    from openvivqa_jax import evaluate

    wd, feats = vi_workdir
    path, _ = _records(tmp_path)
    np.savez(tmp_path / "wide.npz", **{k: np.zeros(7, np.float32) for k in feats})
    cases = [
        (["--image_features", str(tmp_path / "wide.npz")], "has vectors of width 7, but the relevance model projects "
                                                            "into a visual space of width 6"),
        (["--relevance_model", f"en={wd}"], f"relevance model {wd} encodes 'vi', not 'en'"),
        (["--relevance_model", str(tmp_path / "nothing")],
         f"--relevance_model {tmp_path / 'nothing'}: folder not found"),
        (["--relevance_model", str(tmp_path)], "not found: no relevance_model.json there"),
    ]
    for extra, message in cases:
        args = ["--predictions", str(path), "--metrics", "CLinRel,CMedRel", "--relevance_model", wd, *extra]
        assert evaluate.run(args) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and err.startswith("error: ") and message in err, err
    en_path, _ = _records(tmp_path, langs=("vi", "en", "vi"))
    assert evaluate.run(["--predictions", str(en_path), "--metrics", "CLinRel", "--relevance_model", wd]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "question 'q2' is in 'en'" in err and "--relevance_model en=" in err, err


def test_feature_file_layouts(tmp_path):
    from openvivqa_jax.relevance import FeatureFileError
    from openvivqa_jax.relevance.features import read_feature_file

    a, b = np.arange(3, dtype=np.float32), np.ones(3, np.float32)
    np.savez(tmp_path / "keyed.npz", x=a, y=b)
    np.savez(tmp_path / "pair.npz", ids=np.array(["x", "y"]), features=np.stack([a, b]))
    np.save(tmp_path / "mat.npy", np.stack([a, b]))
    (tmp_path / "mat.ids.txt").write_text("x\ny\n")
    for name in ("keyed.npz", "pair.npz", "mat.npy"):
        got = read_feature_file(str(tmp_path / name), 3)
        np.testing.assert_array_equal(got["x"], a)
        np.testing.assert_array_equal(got["y"], b)
    np.savez(tmp_path / "ragged.npz", x=a, y=np.ones(2))
    with pytest.raises(FeatureFileError, match="one width"):
        read_feature_file(str(tmp_path / "ragged.npz"))
    with pytest.raises(FeatureFileError, match="cannot be read"):
        read_feature_file(str(tmp_path / "none.npz"))


def test_config_passes_the_config_check():
    from openvivqa_jax import main
    from openvivqa_jax.config_check import check_config

    cfg = load_config("configs/relevance/w2vvpp.py")
    check_config(cfg)
    assert cfg.task == "relevance" and main.TASKS["relevance"] == "openvivqa_jax.relevance"


# ------------------------------------------------------------------------------------------- training
@pytest.mark.slow
def test_trained_tiny_model_prefers_the_right_colour_and_resumes(tmp_path, capsys):
    """On the tiny region-feature set: training resumes from its last checkpoint, writes the retrieval tables,
    and CMedRel ranks each colour answer above the same answer with another colour, for the same picture."""
    from openvivqa_jax.data import datasets, pipeline
    from openvivqa_jax.relevance import train as rt
    from openvivqa_jax.evaluation import relevance as rel
    from tfds_builders.synthetic_openvivqa import Builder
    from tfds_builders.synthetic_openvivqa import generator as gen

    data = tmp_path / "tfds"
    Builder(config="tiny_regions", data_dir=str(data), file_format="array_record").download_and_prepare()
    cfg = load_config("configs/relevance/w2vvpp.py")
    cfg.data.data_dir, cfg.data.builder_config = str(data), "tiny_regions"
    cfg.train.batch_size, cfg.train.num_train_steps, cfg.train.sum_negatives_steps = 32, 200, 400
    cfg.train.eval_every_steps, cfg.train.checkpoint_every_steps, cfg.train.log_every_steps = 100, 100, 100
    wd = str(tmp_path / "run")
    rt.train_and_evaluate(cfg, wd)
    cfg.train.num_train_steps = 400
    res = rt.train_and_evaluate(cfg, wd)  # resumes at 200
    assert sorted(os.listdir(os.path.join(wd, "checkpoints"))) == ["300", "400"]
    assert set(res) == {"validation", "test"} and 0 <= res["test"]["t2i_R@10"] <= 1
    assert os.path.exists(os.path.join(wd, "eval", "test_retrieval.json"))
    steps = [json.loads(ln)["step"] for ln in open(os.path.join(wd, "metrics.jsonl")) if '"train"' in ln]
    assert steps == [100, 200, 300, 400]
    enc = rel.load_models(wd)
    feats = enc["vi"].image_features()
    b = datasets.load_builder(cfg.data)
    recs = [r for r in pipeline.read_records(pipeline.load_source(b, "train"), "train") if r.kind == "colour"]
    right, wrong = [], []
    colours = sorted(gen.COLORS, key=len, reverse=True)
    for r in recs:
        c = next(c for c in colours if r.answers[0].endswith(c))
        others = [r.answers[0][: -len(c)] + o for o in gen.COLORS if o != c]
        s = rel.cmedrel(enc, [r.answers[0], *others], np.stack([feats[r.image_id]] * (1 + len(others))),
                        ["vi"] * (1 + len(others)))
        right.extend([s[0]] * len(others))
        wrong.extend(s[1:])
    auc = np.mean(np.asarray(right) > np.asarray(wrong))
    assert len(recs) >= 10 and auc > 0.7, auc


@pytest.mark.slow  # 5-10 s on 2 cores: left to the full suite
def test_vit_visual_features_are_the_loaded_checkpoints_pooled_grid(tmp_path):
    """visual.source='vit': the big_vision checkpoint is loaded and its grid averaged over each pool cell."""
    import ml_collections

    from openvivqa_jax.relevance import data as rt
    from openvivqa_jax.relevance.features import pool_grid
    from test_vit import HEADS, MLP, PATCH, WIDTH, _bv_checkpoint

    rng = np.random.default_rng(3)
    flat = _bv_checkpoint(rng, grid=4)
    np.savez(tmp_path / "vit.npz", **flat)
    cfg = ml_collections.ConfigDict(dict(seed=0, visual=dict(
        source="vit", vit_checkpoint=str(tmp_path / "vit.npz"), patch_size=PATCH, width=WIDTH, depth=2,
        heads=HEADS, mlp_dim=MLP, posemb_grid=(4, 4))))
    fn, _ = rt._image_backbone(cfg)
    images = rng.random((2, 16, 32, 3)).astype(np.float32)  # a 2 x 4 grid of patches
    grid = np.asarray(fn(images))
    assert grid.shape == (2, 2, 4, WIDTH)
    # The checkpoint's weights, not the seeded ones: a ViT of another seed loaded from the same file agrees.
    from flax import nnx

    from openvivqa_jax.models import vit as vit_lib

    other = vit_lib.ViT(**vit_lib.vit_settings(cfg.visual), rngs=nnx.Rngs(7))
    vit_lib.load_big_vision_npz(other, str(tmp_path / "vit.npz"))
    np.testing.assert_allclose(grid, np.asarray(other(images)), rtol=1e-5, atol=1e-5)
    pooled = pool_grid(grid, (1, 2))
    np.testing.assert_allclose(pooled[:, :WIDTH], grid[:, :, :2].mean((1, 2)), rtol=1e-6)
    np.testing.assert_allclose(pooled[:, WIDTH:], grid[:, :, 2:].mean((1, 2)), rtol=1e-6)
    with pytest.raises(Exception, match="vit_checkpoint is empty"):
        rt._image_backbone(ml_collections.ConfigDict(dict(seed=0, visual=dict(source="vit", vit_checkpoint=None))))
