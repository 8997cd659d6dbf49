"""The shape of the model package and of the configs: model files are leaves (no model file imports another),
parameter paths and shapes are those of the checkpoints written before the shared encoders moved to
``models/encoders.py`` (tests/data/model_param_paths.json, written from that code), generators satisfy the
decoding interface, and every config file loads with the values its papers give."""

from __future__ import annotations

import ast
import glob
import json
import os

import pytest
from flax import nnx

from conftest import ROOT
from openvivqa_jax.config_files import config_module, load_config
from openvivqa_jax.models import MODEL_REGISTRY, build_model, model_class
from openvivqa_jax.models.base import AnswerGenerator

MODEL_MODULES = sorted(spec.split(":")[0].lstrip(".") for spec in MODEL_REGISTRY.values())


def _imported_modules(path: str) -> set[str]:
    """Every module a Python file imports (absolute names; ``from . import x`` as ``.x``)."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            out.add(base)
            out.update(f"{base}.{a.name}" if node.module is None else base for a in node.names)
    return out


def test_model_registry_lists_the_seven_models():
    assert MODEL_MODULES == ["fst", "lorra", "m4c", "mcan", "mlpag", "qumlag", "saaa"]


@pytest.mark.parametrize("module", MODEL_MODULES)
def test_no_model_file_imports_another_model_file(module):
    imported = _imported_modules(os.path.join(ROOT, "openvivqa_jax", "models", f"{module}.py"))
    others = {m for m in MODEL_MODULES if m != module}
    bad = {name for name in imported
           if any(name in (f"openvivqa_jax.models.{o}", f".{o}") or name.startswith(f"openvivqa_jax.models.{o}.")
                  for o in others)}
    assert not bad, f"{module}.py imports the model module(s) {sorted(bad)}"


def _param_shapes(model) -> dict[str, list[int]]:
    return {"/".join(map(str, path)): list(v.get_value().shape)
            for path, v in nnx.state(model, nnx.Param).flat_state()}


with open(os.path.join(ROOT, "tests", "data", "model_param_paths.json"), encoding="utf-8") as _f:
    EXPECTED_PARAMS = json.load(_f)


@pytest.mark.parametrize("config", sorted(EXPECTED_PARAMS))
def test_parameter_paths_and_shapes_are_unchanged(config):
    """Old checkpoints restore: every parameter keeps its path and shape (the fixture holds all 7 models).

    The fixture predates ``model.vision.pixel_features`` (4 in the synthetic configs now): a workdir written
    before it has no such field in its config.json, which builds with 0, so the fixture is compared at 0; at
    the configs' value only the grid-feature projection's input grows, by the 16 cells' 4x4-pooled RGB values.
    """
    cfg = load_config(os.path.join(ROOT, "configs", config))
    assert cfg.model.vision.pixel_features == 4
    cfg.model.vision.pixel_features = 0
    model = nnx.eval_shape(lambda: build_model(cfg.model, cfg.tokenizer.vocab_size, seed=0))
    got, want = _param_shapes(model), EXPECTED_PARAMS[config]
    assert sorted(set(want) - set(got)) == [] and sorted(set(got) - set(want)) == []
    assert got == want
    cfg.model.vision.pixel_features = 4
    now = _param_shapes(nnx.eval_shape(lambda: build_model(cfg.model, cfg.tokenizer.vocab_size, seed=0)))
    changed = {k: (want[k], now[k]) for k in want if want[k] != now[k]}
    grown = {k for k in changed if k.endswith("feat_proj/kernel") or k.endswith("app_proj/kernel")}
    assert set(changed) == grown and "vision/feat_proj/kernel" in grown and set(now) == set(want)
    assert all(new[0] == old[0] + 16 * 3 and new[1:] == old[1:] for old, new in changed.values())


def test_parameter_fixture_covers_every_model():
    names = {load_config(os.path.join(ROOT, "configs", c)).model.name for c in EXPECTED_PARAMS}
    assert names == set(MODEL_REGISTRY)
    # Spot checks written from the module definitions: the LSTM's fused gate kernel is (d_in, 4 d_Q) and
    # FST's stacked attention maps d_model to attention_dim.
    fst = EXPECTED_PARAMS["synthetic/fst.py"]
    assert fst["question/lstm/cell/dense_h/kernel"] == [128, 4 * 128]
    assert fst["attention/w_image/kernel"] == [128, 128]
    assert "fusion/image_guided/0/attn/query/kernel" in EXPECTED_PARAMS["synthetic/mcan.py"]


@pytest.mark.parametrize("name", sorted(MODEL_REGISTRY))
def test_generators_satisfy_the_decoding_protocol(name):
    klass = model_class(name)
    assert issubclass(klass, AnswerGenerator) == klass.is_generator
    assert klass.is_generator == (name in ("fst", "qumlag", "mlpag", "m4c"))


# ----------------------------------------------------------------------------- configs
def _all_configs():
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "configs", "**", "*.py"), recursive=True)):
        mod = config_module(path)
        if not hasattr(mod, "get_config"):
            continue
        rel = os.path.relpath(path, os.path.join(ROOT, "configs"))
        for v in getattr(mod, "VARIANTS", (None,)):
            out.append((rel, v, mod.get_config() if v is None else mod.get_config(v)))
    return out


def test_every_config_file_loads_with_its_papers_values(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # configs/common.py is found relative to the config file, not the cwd
    cfgs = {(rel, v): c for rel, v, c in _all_configs()}
    assert len(cfgs) >= 37
    assert not any(rel == "common.py" for rel, _ in cfgs)
    base = cfgs[("openvivqa/mlpag.py", "features")]
    for (rel, v), c in cfgs.items():
        if rel.startswith("synthetic/"):
            # synthetic/<model>.py, or synthetic/<model>_<variant>.py (mlpag_regions.py); base.py is MLPAG's
            stem = rel[len("synthetic/"):-3]
            assert c.model.name == ("mlpag" if stem == "base" else stem.split("_")[0])
            assert c.data.builder == "synthetic_openvivqa"
            # the synthetic default size; the tiny region config (learnability test) is configs/tiny.py's
            assert c.model.d_model == (32 if rel.endswith("_tiny.py") else 128)
        if rel.startswith("openvivqa/"):
            assert c.model.name == rel[len("openvivqa/"):-3]
            # Data, tokenizer and evaluation are MLPAG's for every model (the paper compares on equal terms).
            # m4c.py's <variant>_bert variants are <variant> with the pretrained BERT question encoder.
            v = v.removesuffix("_bert")
            same = cfgs[("openvivqa/mlpag.py", v)]
            assert c.data.to_dict() == same.data.to_dict() and c.eval.to_dict() == same.eval.to_dict()
            assert c.tokenizer.vocab_size == 4000
            m4c = rel == "openvivqa/m4c.py"
            assert (c.model.d_model, c.model.num_heads, c.model.ffn_dim) == ((768, 12, 3072) if m4c else
                                                                               (512, 8, 2048))
            assert c.model.dropout == 0.1
            assert c.train.num_train_steps == (24_000 if m4c else 60_000)
            assert c.data.builder_config == ("default" if v in ("images", "cnn") else "features")
            assert c.model.vision.kind == {"images": "proposals", "cnn": "cnn"}.get(v, "region")
            # the images variant sees as the main job does: proposals, and the OCR boxes' 2-D position embedding
            assert ("box_grid" in c.model.ocr_features) == (v == "images")
            assert ("order" in c.model.ocr_features) == (v == "images")
            # and MLPAG counts as the main job does: the region counter (a token of MLPAG's memory)
            assert (c.model.counter.weight > 0) == (v == "images" and c.model.name == "mlpag")
    assert base.model.vision.kind == "region" and base.model.vision.region_dim == 2048
    assert cfgs[("openvivqa/fst.py", "benchmark")].model.vision.region_dim == 1024
    assert cfgs[("openvivqa/saaa.py", "images")].model.lstm_dim == 1024
    assert cfgs[("openvivqa/mcan.py", "images")].model.num_fusion_layers == 6
    assert cfgs[("openvivqa/qumlag.py", "images")].model.num_fusion_layers == 3
    assert cfgs[("stvqa/m4c.py", "task1")].data.decode_dictionary == "per_image"


@pytest.mark.parametrize("path", ["configs/openvivqa/fst.py", "configs/stvqa/m4c.py"])
def test_unknown_variant_is_one_clear_error(path):
    with pytest.raises(ValueError, match=r"unknown variant 'nope'; expected one of \("):
        load_config(os.path.join(ROOT, path), "nope")


def test_config_flags_loads_a_paper_config_from_another_directory(tmp_path, monkeypatch):
    """``--config configs/openvivqa/qumlag.py:features`` as ``openvivqa_jax.main`` parses it (ml_collections
    config_flags), run from a directory that is not the repository."""
    from absl import flags
    from ml_collections import config_flags

    monkeypatch.chdir(tmp_path)
    fv = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, "config", flag_values=fv, lock_config=True)
    fv([__file__, f"--config={ROOT}/configs/openvivqa/qumlag.py:features"])
    c = fv.config
    assert (c.model.name, c.model.num_heads, c.model.num_fusion_layers, c.data.builder_config) == \
        ("qumlag", 8, 3, "features")
