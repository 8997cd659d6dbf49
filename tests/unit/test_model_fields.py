"""The fields each model's constructor reads, found in its source (``openvivqa_jax.models.fields``), against the
constructors themselves: a config holding only the fields found builds every model, and over every synthetic
config and every model name the config check refuses exactly the pairs whose model does not build."""

from __future__ import annotations

import copy
import glob
import os

import ml_collections
import pytest

from conftest import ROOT, load_config
from openvivqa_jax.models import MODEL_REGISTRY
from openvivqa_jax.models import fields


def _build(model_cfg) -> None:
    from flax import nnx

    from openvivqa_jax.models import build_model

    nnx.eval_shape(lambda: build_model(model_cfg, 300))


def _only(model_cfg, wanted: set[str]) -> ml_collections.ConfigDict:
    """``model_cfg`` with only the dotted fields ``wanted`` (and the sections above them)."""
    out = ml_collections.ConfigDict()
    for dotted in sorted(wanted):
        parts = dotted.split(".")
        src, dst = model_cfg, out
        for p in parts[:-1]:
            src = src[p]
            if p not in dst:
                dst[p] = ml_collections.ConfigDict()
            dst = dst[p]
        if parts[-1] not in dst:
            dst[parts[-1]] = copy.deepcopy(src[parts[-1]])
    return out


@pytest.mark.parametrize("name", list(MODEL_REGISTRY))
def test_a_config_of_only_the_fields_found_builds_the_model(name):
    """No field the constructor reads is missed: the model builds from its own config cut down to the fields found
    (the fields read with ``get`` take their defaults)."""
    cfg = load_config(f"configs/synthetic/{name}.py").model
    found = {f.lstrip("?") for f in fields.required_fields(name)}
    assert {"d_model", "vision.kind"} <= found
    reduced = _only(cfg, {"name", *found})
    assert fields.missing_fields(reduced) == []
    _build(reduced)
    for field in sorted(f for f in found if "." not in f and f != "vision"):
        del_one = _only(cfg, {"name", *(f for f in found if f != field and not f.startswith(field + "."))})
        assert fields.missing_fields(del_one) == [field]


def test_fields_of_each_model_are_those_its_paper_names():
    """The fields that tell the models apart, as the model modules' docstrings list them."""
    req = {n: set(fields.required_fields(n)) for n in MODEL_REGISTRY}
    assert {"append_question", "lstm_dim", "attention_dim", "num_glimpses", "word_dim"} <= req["fst"]
    assert {"num_text_layers", "num_mmt_layers", "text_encoder"} <= req["m4c"]
    for classifier in ("saaa", "mcan", "lorra"):
        assert {"num_answers", "classifier_dim"} <= req[classifier]
    assert "context_glimpses" in req["lorra"] and "context_glimpses" not in req["saaa"]
    assert not {"append_question", "num_answers", "lstm_dim"} & req["mlpag"]


def test_config_files_for_names_the_dataset_folder_first():
    assert fields.config_files_for("fst", "synthetic_openvivqa")[:2] == ["configs/synthetic/fst.py",
                                                                         "configs/openvivqa/fst.py"]
    assert fields.config_files_for("fst", "openvivqa")[0] == "configs/openvivqa/fst.py"
    assert fields.config_files_for("m4c", "st_vqa")[0] == "configs/stvqa/m4c.py"
    assert fields.config_files_for("nope") == []


@pytest.mark.slow  # 100 abstract model builds: about 30 s
def test_the_check_refuses_exactly_the_configs_whose_model_does_not_build():
    from openvivqa_jax.config_check import ConfigError, check_config

    paths = sorted(glob.glob(os.path.join(ROOT, "configs", "synthetic", "*.py"))) + [os.path.join(ROOT, "configs",
                                                                                                    "tiny.py")]
    refused = built = 0
    for path in paths:
        base = load_config(os.path.relpath(path, ROOT))
        for name in MODEL_REGISTRY:
            cfg = copy.deepcopy(base)
            with cfg.unlocked():
                cfg.model.name = name
                if name != "mlpag":
                    cfg.model.counter.weight = 0.0  # the region counter is MLPAG's
            try:
                check_config(cfg)
                ok = True
            except ConfigError as e:
                assert "needs model fields this config does not have" in str(e), str(e)
                ok = False
            try:
                _build(cfg.model)
                builds = True
            except AttributeError:
                builds = False
            assert ok == builds, (path, name)
            refused += not ok
            built += builds
    assert refused >= 20 and built >= 20  # both sides are tried (67 and 38 of 105 when written)
