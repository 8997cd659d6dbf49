"""The model-ready cache's key (openvivqa_jax/data/model_ready_cache.py) holds every input of the records: each
attribute of the Preprocessor is in it (changing any changes the key) or is named, with why, as not an input; the
features read nothing from the config outside the attributes; the code part follows the preprocessing modules and
ignores docstrings and comments; the cache folder is chosen in the documented order."""

from __future__ import annotations

import copy
import io

import numpy as np
import pytest
from PIL import Image

from conftest import load_config


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from openvivqa_jax.text.tokenizer import train_sentencepiece

    sentences = ["quán phở hòa nằm bên trái", "biển hiệu màu đỏ", "có hai người đứng trước cửa hàng",
                 "cửa hàng bên phải tên là gì", "phở bò tái", "màu xanh", "bên trái"] * 20
    return train_sentencepiece(sentences, str(tmp_path_factory.mktemp("spm") / "spm.model"), vocab_size=300)


def _pre(tokenizer, config: str):
    """The Preprocessor of ``config`` (``path[:variant]``)."""
    import os

    from openvivqa_jax.config_files import load_config as load_variant
    from openvivqa_jax.data.pipeline import Preprocessor

    from conftest import ROOT

    path, _, variant = config.partition(":")
    cfg = load_variant(os.path.join(ROOT, path), variant) if variant else load_config(path)
    return Preprocessor(cfg, tokenizer, allow_copy=True)


def _changed(value):
    """A different value of the same kind, for every kind an attribute of the Preprocessor has."""
    if value is None:
        return ("entry",)
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, tuple):
        return (*value, "x")
    other = copy.copy(value)  # an object: change one of its public fields
    name = next(k for k, v in sorted(vars(other).items()) if not k.startswith("_") and isinstance(v, (int, str))
                and not isinstance(v, bool))
    setattr(other, name, _changed(getattr(other, name)))
    return other


@pytest.mark.parametrize("config", ["configs/tiny.py", "configs/default.py", "configs/openvivqa/mlpag.py:features"])
def test_every_preprocessor_attribute_is_in_the_key_or_named_as_not_an_input(tokenizer, config):
    from openvivqa_jax.data import model_ready_cache as cache

    pre = _pre(tokenizer, config)
    base = cache.settings(pre)
    names = sorted(vars(pre))
    assert {"image_w", "num_ocr", "vision_kind", "vocab", "phoc_alphabet", "count_targets"} <= set(names)
    for name in names:
        if name in cache.NOT_IN_KEY:
            continue
        other = copy.copy(pre)
        setattr(other, name, _changed(getattr(pre, name)))
        assert cache.settings(other) != base, f"Preprocessor.{name} is not in the key"
    assert set(cache.NOT_IN_KEY) <= set(names), "NOT_IN_KEY names an attribute the Preprocessor no longer has"


def test_features_read_nothing_from_the_config_once_made(tokenizer):
    """Why ``cfg`` may stay out of the key: Preprocessor.features of a record works with the config gone."""
    from openvivqa_jax.data.records import decode_record

    class Gone:
        def __getattr__(self, name):
            raise AssertionError(f"features read config field {name!r}")

    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 30, 30)).save(buf, "JPEG")
    ex = {"question_id": "q1", "image_id": "i1", "question": "quán này tên gì", "answers": ["phở hòa".encode()],
          "qa_type": 1, "image": buf.getvalue(),
          "ocr": {"text": [b"PHO", b"HOA"], "box": np.array([[0.1, 0.1, 0.3, 0.2]] * 2, np.float32)}}
    for config in ("configs/tiny.py", "configs/default.py"):
        pre = _pre(tokenizer, config)
        want = pre.features(decode_record(ex, 0), "phở hòa")
        pre.cfg = Gone()
        got = pre.features(decode_record(ex, 0), "phở hòa")
        assert sorted(got) == sorted(want)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def test_an_attribute_the_key_has_no_rule_for_raises(tokenizer):
    from openvivqa_jax.data import model_ready_cache as cache

    pre = _pre(tokenizer, "configs/tiny.py")
    pre.new_setting = object()
    with pytest.raises(TypeError, match=r"Preprocessor.new_setting is a object, which the key has no rule for"):
        cache.settings(pre)
    pre.new_setting = lambda x: x
    with pytest.raises(TypeError, match=r"Preprocessor.new_setting is a function; name it in NOT_IN_KEY"):
        cache.settings(pre)


def test_tokenizer_file_enters_the_key_by_its_bytes(tokenizer, tmp_path):
    from openvivqa_jax.data import model_ready_cache as cache
    from openvivqa_jax.text.tokenizer import Tokenizer

    same = tmp_path / "copy" / "spm.model"
    same.parent.mkdir()
    same.write_bytes(open(tokenizer.model_path, "rb").read())
    a = cache.settings(_pre(tokenizer, "configs/tiny.py"))
    b = cache.settings(_pre(Tokenizer(str(same)), "configs/tiny.py"))
    assert a == b  # another workdir's byte-identical tokenizer: the same key


def test_code_digest_follows_code_not_docstrings_or_comments():
    from openvivqa_jax.data import model_ready_cache as cache

    src = 'def f(x):\n    """Doubles."""\n    return 2 * x  # why\n'
    assert cache.tree_digest(src) == cache.tree_digest('def f(x):\n    """Twice x."""\n\n    return 2 * x\n')
    assert cache.tree_digest(src) != cache.tree_digest('def f(x):\n    """Doubles."""\n    return 3 * x\n')
    modules = cache.code_digest()
    for name in ("data.pipeline", "data.proposals", "data.images", "data.phoc", "data.records", "data.decode_worker",
                 "data.model_ready_rows", "text.tokenizer", "text.answer_vocab", "text.normalize"):
        assert f"openvivqa_jax.{name}" in modules
    assert not [m for m in modules if m.startswith("openvivqa_jax.models")]
    versions = cache.library_versions()
    assert {"PIL", "numpy", "skimage", "scipy", "sentencepiece"} <= set(versions)
    assert not {"jax", "grain", "absl"} & set(versions)
    import PIL
    import skimage

    assert versions["PIL"] == PIL.__version__ and versions["skimage"] == skimage.__version__


def test_the_cache_folder_is_the_override_the_environment_next_to_the_data_or_the_users_cache(tmp_path):
    from openvivqa_jax.data.model_ready_cache import cache_root

    data = str(tmp_path / "tfds")
    assert cache_root(str(tmp_path / "mine"), data, {}) == (str(tmp_path / "mine"), "data.model_ready_dir")
    assert cache_root(None, data, {"OPENVIVQA_CACHE_DIR": str(tmp_path / "c")}) == (
        str(tmp_path / "c" / "model_ready"), "$OPENVIVQA_CACHE_DIR")
    assert cache_root("", data, {}) == (str(tmp_path / "tfds" / "model_ready"), "next to the dataset")
    assert (tmp_path / "tfds" / "model_ready").is_dir()
    root, why = cache_root(None, data, {"XDG_CACHE_HOME": str(tmp_path / "xdg")}, writable=lambda d: False)
    assert root == str(tmp_path / "xdg" / "openvivqa_jax" / "model_ready")
    assert why == f"the user's cache folder, as {tmp_path / 'tfds' / 'model_ready'} cannot be written"
