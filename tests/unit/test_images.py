"""Tests of openvivqa_jax.data.images: one decoder, the same pixels on the builder, pipeline and predict paths.

Every image is made by the test. Expected pixels are computed from how the file was made (the upright
picture before rotation, the alpha channel, the 16-bit levels, the CMYK ink, the palette), not by the
decoder under test.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import tensorflow_datasets as tfds
from PIL import Image, ImageDraw, ImageFont

from openvivqa_jax.data import images, pipeline
from openvivqa_jax.predict import PredictError, load_image
from tfds_builders import readers
from tfds_builders.openvivqa.openvivqa_dataset_builder import Builder, OpenVivqaConfig

FONT = Path(matplotlib.__file__).parent / "mpl-data/fonts/ttf/DejaVuSans-Bold.ttf"
W, H = 64, 48


def _upright() -> np.ndarray:
    """A 64x48 RGB picture whose orientation is unambiguous: red top-left quadrant, blue bottom band."""
    a = np.full((H, W, 3), 230, np.uint8)
    a[: H // 2, : W // 2] = (220, 20, 20)
    a[H - 12:, :] = (20, 20, 220)
    return a


def _text_mask(size=(W, H), text="BA") -> np.ndarray:
    """bool (height, width): where black text is drawn (binary, no anti-aliasing)."""
    m = Image.new("1", size, 0)
    ImageDraw.Draw(m).text((4, 4), text, font=ImageFont.truetype(str(FONT), 28), fill=1)
    return np.asarray(m, bool)


def make_exif_rotated(path: Path) -> np.ndarray:
    """Pixels stored rotated 90° counter-clockwise with EXIF Orientation 6 ("rotate 90° clockwise to view")."""
    up = _upright()
    stored = Image.fromarray(up).transpose(Image.Transpose.ROTATE_90)  # (W, H): sideways on disk
    exif = Image.Exif()
    exif[0x0112] = 6
    stored.save(path, format="JPEG", quality=100, subsampling=0, exif=exif.tobytes())
    return up


def make_transparent_text(path: Path) -> np.ndarray:
    """Black text on a fully transparent PNG; the transparent pixels hold black too."""
    font = ImageFont.truetype(str(FONT), 28)
    im = Image.new("RGBA", (W, H), (0, 0, 0, 0))
    ImageDraw.Draw(im).text((4, 4), "BA", font=font, fill=(0, 0, 0, 255))
    im.save(path)
    alpha = np.asarray(im)[..., 3].astype(np.float64) / 255
    return np.repeat(np.rint(255 * (1 - alpha)).astype(np.uint8)[..., None], 3, axis=2)  # black over white


def make_16bit_card(path: Path) -> np.ndarray:
    """Dark-grey text (level 30000) on a light card (level 40000) in a 16-bit grayscale PNG. By range:
    text -> 0, card -> 255 (clipping to 8 bits would make both 255)."""
    mask = _text_mask()
    arr = np.where(mask, 30000, 40000).astype(np.uint16)
    Image.fromarray(arr).save(path)
    assert Image.open(path).mode in ("I;16", "I")
    return np.repeat(np.where(mask, 0, 255).astype(np.uint8)[..., None], 3, axis=2)


def make_cmyk(path: Path) -> np.ndarray:
    """A CMYK JPEG: left half magenta+yellow ink (red), right half black ink only (black)."""
    a = np.zeros((H, W, 4), np.uint8)
    a[:, : W // 2] = (0, 255, 255, 0)
    a[:, W // 2:] = (0, 0, 0, 255)
    Image.fromarray(a, mode="CMYK").save(path, format="JPEG", quality=100)
    exp = np.zeros((H, W, 3), np.uint8)
    exp[:, : W // 2] = (255, 0, 0)
    return exp


def make_palette(path: Path) -> np.ndarray:
    """A palette PNG: index 0 (black) is transparent, index 1 is (200, 30, 30) where the text is."""
    mask = _text_mask()
    im = Image.fromarray(mask.astype(np.uint8), mode="P")
    im.putpalette([0, 0, 0, 200, 30, 30] + [0] * 762)
    im.save(path, transparency=0)
    exp = np.full((H, W, 3), 255, np.uint8)
    exp[mask] = (200, 30, 30)
    return exp


KINDS = {"exif_rotated.jpg": (make_exif_rotated, 3.0), "transparent.png": (make_transparent_text, 0.0),
         "card16.png": (make_16bit_card, 0.0), "cmyk.jpg": (make_cmyk, 3.0), "palette.png": (make_palette, 0.0)}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("kinds")
    out = {}
    for name, (make, tol) in KINDS.items():
        out[name] = (d / name, make(d / name), tol)
    return out


@pytest.fixture(scope="module")
def bomb(tmp_path_factory) -> Path:
    """A real 14000x13000 PNG (1-bit, 22 KB on disk; 546 MB once decoded to RGB)."""
    p = tmp_path_factory.mktemp("bomb") / "bomb.png"
    Image.new("1", (14000, 13000)).save(p)
    return p


@pytest.mark.parametrize("name", sorted(KINDS))
def test_decoder_gives_the_expected_pixels(files, name):
    path, expected, tol = files[name]
    got = images.decode_image(path).array
    assert got.dtype == np.uint8 and got.shape == expected.shape == (H, W, 3)
    assert np.abs(got.astype(int) - expected.astype(int)).max() <= (tol * 3 if tol else 0)
    if tol:  # JPEG cases: mean error is small
        assert np.abs(got.astype(int) - expected.astype(int)).mean() <= tol


def test_exif_rotation_without_the_decoder_is_sideways(files):
    path, _, _ = files["exif_rotated.jpg"]
    assert np.asarray(Image.open(path).convert("RGB")).shape == (W, H, 3)  # what the old paths saw


def _tiny_tokenizer(tmp_path):
    from openvivqa_jax.text.tokenizer import train_sentencepiece

    return train_sentencepiece(["quán này tên gì", "biển hiệu ghi gì"] * 20, str(tmp_path / "spm.model"), 300)


def test_builder_pipeline_and_predict_see_the_same_pixels(files, tmp_path):
    """One file per kind through all three paths: the openvivqa builder's stored bytes, the training
    pipeline's Preprocessor (image_size = the file's size, so its resize is the identity) and predict."""
    from conftest import tiny_model_config

    manual = tmp_path / "m"
    (manual / "images").mkdir(parents=True)
    names = sorted(KINDS)
    for i, name in enumerate(names):
        (manual / "images" / name).write_bytes(files[name][0].read_bytes())
    data = {"images": {str(i): n for i, n in enumerate(names)},
            "annotations": {str(100 + i): {"image_id": i, "question": "biển hiệu ghi gì?", "answer": "ba"}
                            for i in range(len(names))}}
    (manual / "train_data.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    builder = Builder(config=OpenVivqaConfig(name="px", ocr_engine="none"), data_dir=str(tmp_path / "d"),
                      file_format="array_record")
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(manual)))
    stored = {str(ex["image_id"], "utf-8") if isinstance(ex["image_id"], bytes) else str(ex["image_id"]): ex["image"]
              for ex in builder.as_data_source(decoders={"image": tfds.decode.SkipDecoding()})["train"]}
    cfg = tiny_model_config("mlpag")
    cfg.data.image_size = (W, H)
    pre = pipeline.Preprocessor(cfg, _tiny_tokenizer(tmp_path))
    for i, name in enumerate(names):
        path, expected, _ = files[name]
        from_predict = np.asarray(load_image(str(path)))
        from_builder = images.decode_image(bytes(stored[str(i)])).array
        from_pipeline = pre._image(str(i), bytes(stored[str(i)]))
        np.testing.assert_array_equal(from_builder, from_predict, err_msg=name)
        np.testing.assert_array_equal(from_pipeline, from_predict, err_msg=name)
        assert from_predict.shape == expected.shape
        if name.endswith(".png"):  # lossless: stored as a PNG of the canonical pixels
            assert bytes(stored[str(i)]).startswith(b"\x89PNG")


def test_plain_rgb_jpeg_is_stored_and_decoded_unchanged(tmp_path):
    """The synthetic builder's images are plain RGB JPEGs: the decoder gives PIL's own RGB pixels and the
    builders keep the file's bytes."""
    buf = io.BytesIO()
    Image.fromarray(_upright()).save(buf, format="JPEG", quality=90)
    raw = buf.getvalue()
    dec = images.decode_image(raw)
    np.testing.assert_array_equal(dec.array, np.asarray(Image.open(io.BytesIO(raw)).convert("RGB")))
    assert images.encode_for_storage(raw, dec) == raw


def _one_line(msg: str, *needles: str) -> None:
    assert "\n" not in msg and "Traceback" not in msg
    for n in needles:
        assert n in msg, (n, msg)


def test_bomb_refused_from_the_header_on_every_path(bomb, tmp_path):
    with pytest.raises(images.ImageDecodeError) as e:
        images.decode_image(bomb, question="biển hiệu ghi gì?")
    _one_line(str(e.value), str(bomb), "biển hiệu ghi gì?", "14000x13000", "182 megapixels", "over the limit")
    with pytest.raises(PredictError) as e:
        load_image(str(bomb))
    _one_line(str(e.value), str(bomb), "14000x13000")
    with pytest.raises(readers.ImageFileError) as e:
        readers.load_image(bomb, source="ann.json", record="question 7")
    _one_line(str(e.value), "ann.json: question 7: image", str(bomb), "14000x13000")


def test_bad_files_refused_in_one_line(tmp_path, files):
    empty = tmp_path / "empty.jpg"
    empty.write_bytes(b"")
    truncated = tmp_path / "truncated.jpg"
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (200, 300, 3), np.uint8)).save(buf, format="JPEG")
    truncated.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    tiny = tmp_path / "tiny.png"
    Image.new("RGB", (40, 7), (1, 2, 3)).save(tiny)
    cases = [(empty, "empty file (0 bytes)"), (truncated, "cannot decode"),
             (tiny, f"40x7 pixels is below the minimum of {images.DEFAULT_MIN_SIDE} pixels")]
    for path, why in cases:
        with pytest.raises(images.ImageDecodeError) as e:
            images.decode_image(path, question="q1")
        _one_line(str(e.value), f"image {path} (question 'q1')", why)
        with pytest.raises(readers.ImageFileError) as e:
            readers.load_image(path, source="ann.json", record="question 5")
        _one_line(str(e.value), "ann.json: question 5:", str(path), why)
    # the training pipeline's decoder refuses stored bytes the same way (names the image)
    with pytest.raises(pipeline.DatasetError) as e:
        pipeline.Preprocessor._decode_image(_DecodeOnly(), "img7", truncated.read_bytes())
    _one_line(str(e.value), "image 'img7'", "cannot decode")


class _DecodeOnly:
    """The attributes Preprocessor._decode_image reads (the image size and pixel limit)."""

    image_w, image_h, max_image_pixels = 32, 24, images.DEFAULT_MAX_PIXELS
