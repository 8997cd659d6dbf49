"""A truncated image is refused on every path even after something in the process set PIL's global
``ImageFile.LOAD_TRUNCATED_IMAGES = True`` (TFDS's notebook display does), and the flag is restored."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image, ImageFile

from openvivqa_jax import predict
from openvivqa_jax.data import images, pipeline
from tfds_builders import readers

from test_openvivqa_builder import build, small_dataset


def _photo(fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(1).integers(0, 255, (120, 160, 3), np.uint8)).save(buf, format=fmt)
    return buf.getvalue()


@pytest.fixture
def flag_true():
    old = ImageFile.LOAD_TRUNCATED_IMAGES
    ImageFile.LOAD_TRUNCATED_IMAGES = True
    yield
    assert ImageFile.LOAD_TRUNCATED_IMAGES is True  # decode_image restored the caller's value
    ImageFile.LOAD_TRUNCATED_IMAGES = old


@pytest.mark.parametrize("fmt, why", [("JPEG", "truncated JPEG"), ("PNG", "truncated PNG")])
def test_decode_image_refuses_truncated_with_the_flag_set(tmp_path, flag_true, fmt, why):
    raw = _photo(fmt)
    cut = raw[: len(raw) * 2 // 3]
    with pytest.raises(images.ImageDecodeError, match=why) as e:
        images.decode_image(cut, name="cut", question="q1")
    assert "\n" not in str(e.value) and "image cut (question 'q1')" in str(e.value)
    # The whole file still decodes, to the pixels PIL gives without the flag.
    assert images.decode_image(raw).array.shape == (120, 160, 3)


def test_flag_held_false_during_load_only(flag_true):
    """Without our own end check (another format: BMP), the load itself runs with the flag False."""
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (9, 9, 9)).save(buf, format="BMP")
    cut = buf.getvalue()[:2000]
    with pytest.raises(images.ImageDecodeError, match="cannot decode"):
        images.decode_image(cut, name="b.bmp")


def test_training_pipeline_refuses_truncated_with_the_flag_set(flag_true):
    from test_images import _DecodeOnly

    raw = _photo("JPEG")
    with pytest.raises(pipeline.DatasetError, match=r"image 'img7'.*truncated JPEG"):
        pipeline.Preprocessor._decode_image(_DecodeOnly(), "img7", raw[: len(raw) // 2])


def test_predict_refuses_truncated_with_the_flag_set(tmp_path, flag_true):
    p = tmp_path / "cut.jpg"
    raw = _photo("JPEG")
    p.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(predict.PredictError, match=r"cut\.jpg.*truncated JPEG"):
        predict.load_image(str(p), question="tên gì ?")


def test_builder_refuses_truncated_with_the_flag_set(tmp_path, flag_true):
    path = small_dataset(tmp_path / "m")
    b = tmp_path / "m" / "images" / "b.jpg"
    raw = _photo("JPEG")
    b.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(readers.ImageFileError, match=r"question 102: image .*b\.jpg: cannot decode \(truncated JPEG"):
        build(tmp_path / "m", tmp_path / "d")
    assert str(path)
