"""The synthetic generator split by concern (scene, render, questions, OCR noise) and its one config class:
the examples stay byte-identical for a seed, and the old import paths keep working.

``tests/data/synthetic_digests.json`` holds sha256 digests of the examples that the generator made before it
was split into modules (one file, ``GeneratorConfig`` declared twice), on two configs (light OCR noise, seed 0;
heavy noise, region features, another image size, seed 7). Rendering goes through PIL and FreeType, so the
comparison runs only with the Pillow and FreeType versions the digests were made with.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import inspect
import itertools
import json
import os

import numpy as np
import pytest

from conftest import ROOT
from tfds_builders.synthetic_openvivqa import generator as gen

REFERENCE = os.path.join(ROOT, "tests", "data", "synthetic_digests.json")

CONFIGS = {
    "tiny_noise_seed0": dict(seed=0, num_train_images=6, num_validation_images=3, num_test_images=3),
    "regions_seed7": dict(seed=7, num_train_images=4, num_validation_images=2, num_test_images=2, region_features=True,
                          ocr_drop_prob=0.2, ocr_sub_prob=0.3, ocr_box_jitter=0.05, image_size=(320, 200)),
}


def _digest(split: str, cfg) -> str:
    """sha256 over every example of ``split``: key, then each field (arrays with dtype and shape)."""
    h = hashlib.sha256()
    for key, ex in itertools.islice(gen.generate_split(split, cfg), 100):
        h.update(key.encode())
        for k in sorted(ex):
            v = ex[k]
            h.update(k.encode())
            if isinstance(v, dict):
                for kk in sorted(v):
                    a = np.asarray(v[kk])
                    h.update(kk.encode())
                    h.update(str(a.dtype).encode())
                    h.update(str(a.shape).encode())
                    h.update(a.tobytes() if a.dtype != object else json.dumps([str(x) for x in a.tolist()]).encode())
            elif isinstance(v, (str, bytes)):
                h.update(v.encode() if isinstance(v, str) else v)
            elif isinstance(v, list):
                h.update(json.dumps(v, ensure_ascii=False).encode())
            else:
                a = np.asarray(v)
                h.update(str(a.dtype).encode())
                h.update(a.tobytes())
    return h.hexdigest()


def test_examples_are_byte_identical_to_the_single_module_generator():
    import PIL
    from PIL import features

    ref = json.loads(open(REFERENCE, encoding="utf-8").read())
    if (PIL.__version__, features.version("freetype2")) != (ref["pillow"], ref["freetype"]):
        pytest.skip(f"digests made with Pillow {ref['pillow']} / FreeType {ref['freetype']}")
    got = {f"{name}/{split}": _digest(split, gen.GeneratorConfig(**kw)) for name, kw in CONFIGS.items()
           for split in gen.SPLITS}
    assert got == ref["digests"]


def test_builder_config_is_the_generator_config():
    """One declaration of the generator's settings: the builder config adds only tfds's own fields."""
    import tensorflow_datasets as tfds

    from tfds_builders.synthetic_openvivqa import SyntheticOpenVivqaConfig

    own = set(SyntheticOpenVivqaConfig.__dict__.get("__annotations__", {}))
    assert own == set()
    fields = {f.name for f in dataclasses.fields(SyntheticOpenVivqaConfig)}
    assert fields == ({f.name for f in dataclasses.fields(gen.GeneratorConfig)}
                      | {f.name for f in dataclasses.fields(tfds.core.BuilderConfig)})
    cfg = SyntheticOpenVivqaConfig(name="x", num_test_images=3, min_qas=4)
    assert isinstance(cfg, gen.GeneratorConfig) and cfg.generator_config() is cfg
    assert (cfg.num_images("test"), cfg.min_qas, cfg.max_qas) == (3, 4, 5)


def test_old_import_paths_and_function_sizes():
    from tfds_builders.synthetic_openvivqa import ocr_noise, questions, render, scene

    for name in gen.__all__:
        assert hasattr(gen, name), name
    assert gen.apply_ocr_noise is ocr_noise.apply_ocr_noise and gen.GeneratorConfig is scene.GeneratorConfig
    assert gen.FONT_PATH is render.FONT_PATH and gen._make_qas is questions._make_qas
    for module in (gen, scene, render, questions, ocr_noise):
        tree = ast.parse(inspect.getsource(module))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                assert node.end_lineno - node.lineno + 1 <= 100, (module.__name__, node.name)
