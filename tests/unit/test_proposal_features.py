"""``model.vision.proposal_features``: which region-proposal features the vision encoder embeds. With
``"objects"`` a model reads each segment's own colour, area and shape and its box, and nothing of the pixels of
the box or its context; the region counter still reads the stored features whole."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import random_batch, tiny_model_config

from openvivqa_jax.data.proposals import OBJECT_FEATURE_DIM, POOL, PROPOSAL_FEATURE_DIM
from openvivqa_jax.models import build_model

VOCAB = 40


def _config(features: str, counter: float = 0.0):
    cfg = tiny_model_config("mlpag")
    cfg.model.vision.kind = "proposals"
    cfg.model.vision.num_regions = 5
    cfg.model.vision.proposal_features = features
    cfg.model.counter.weight = counter
    return cfg


def _memory(cfg, batch) -> np.ndarray:
    model = build_model(cfg.model, VOCAB, seed=0)
    return np.asarray(model.encode(batch)["memory"])


def test_objects_reads_the_colour_area_and_shape_and_not_the_pixels_of_box_or_context():
    """Colour 6 + area 1 + a POOL x POOL shape grid come first in a proposal; with ``"objects"`` the memory is the
    same whatever the features after them hold and changes with a segment's colour; with ``"all"`` the pixels
    after them count too."""
    assert OBJECT_FEATURE_DIM == 6 + 1 + POOL * POOL == 23 and PROPOSAL_FEATURE_DIM > OBJECT_FEATURE_DIM
    batch = random_batch(_config("objects"), VOCAB)
    pixels = dict(batch, region_features=batch["region_features"].copy())
    pixels["region_features"][..., OBJECT_FEATURE_DIM:] = np.random.default_rng(1).standard_normal(
        pixels["region_features"][..., OBJECT_FEATURE_DIM:].shape)
    colour = dict(batch, region_features=batch["region_features"].copy())
    colour["region_features"][:, 0, :3] += 1.0
    objects = _config("objects")
    np.testing.assert_array_equal(_memory(objects, pixels), _memory(objects, batch))
    assert np.abs(_memory(objects, colour) - _memory(objects, batch)).max() > 1e-4
    every = _config("all")
    assert np.abs(_memory(every, pixels) - _memory(every, batch)).max() > 1e-4


def test_objects_embeds_fewer_inputs_and_the_counter_reads_the_whole_features():
    """The feature projection of ``"objects"`` takes OBJECT_FEATURE_DIM inputs; with the region counter on, the
    model builds and runs (the counter's own projection takes the stored PROPOSAL_FEATURE_DIM)."""
    model = build_model(_config("objects").model, VOCAB, seed=0)
    assert model.vision.feat_proj.kernel.shape[0] == OBJECT_FEATURE_DIM
    assert model.vision.input_dim == PROPOSAL_FEATURE_DIM
    cfg = _config("objects", counter=1.0)
    assert np.isfinite(_memory(cfg, random_batch(cfg, VOCAB))).all()


def test_an_unknown_feature_set_is_refused_by_the_config_check_and_the_encoder():
    from openvivqa_jax.config_check import ConfigError, check_config

    cfg = _config("pixels")
    with pytest.raises(ConfigError, match="model.vision.proposal_features"):
        check_config(cfg)
    with pytest.raises(ValueError, match="proposal_features must be one of"):
        build_model(cfg.model, VOCAB, seed=0)
