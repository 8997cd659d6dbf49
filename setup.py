"""Package metadata for openvivqa_jax: JAX/Flax open-ended Vietnamese visual question answering."""

from setuptools import find_packages, setup

# The core install trains (the synthetic set and every builder's local generation), evaluates, predicts,
# plots and analyzes. Nothing in it imports TensorFlow: TFDS reads and writes array_record files without it,
# and TensorBoard events are written by tensorboard's own event-file writer (openvivqa_jax/tensorboard_writer.py).
INSTALL_REQUIRES = [
    "jax>=0.4.35",
    "flax>=0.10.0",
    "optax>=0.2.3",
    "orbax-checkpoint>=0.9.0",
    "tensorflow-datasets>=4.9.7",
    "array_record>=0.5.1",
    "grain>=0.2.2",
    "sentencepiece>=0.2.0",
    "ml-collections>=0.1.1",
    "tensorboard>=2.16",
    "importlib_resources",
    "numpy>=1.26",
    "pillow>=10.0",
    "pytesseract>=0.3.10",
    # The detector+tesseract OCR engine (the default of predict and the builders): PP-OCR's DB text detector
    # ships inside this wheel as an ONNX file (with onnxruntime and opencv as its dependencies), so nothing is
    # downloaded at run time.
    "rapidocr-onnxruntime>=1.3",
    "rapidfuzz>=3.0",
    # Class-free region proposals from the pixels (model.vision.kind "proposals"): Felzenszwalb-Huttenlocher
    # graph segmentation; scipy for the segments' bounding boxes.
    "scikit-image>=0.22",
    "scipy>=1.11",
    "matplotlib>=3.8",
    "absl-py>=2.0",
    # One run per workdir and one build per dataset folder (openvivqa_jax/locks.py): flock locks that end with
    # their process, SIGKILL included.
    "filelock>=3.12",
    # The user's pretrained text files (docs/pretrained.md): fastText .bin/.vec (gensim's reader, with subword
    # n-grams), Hugging Face model.safetensors and tokenizer.json; wheels for Python 3.11 and 3.12, no compiler.
    "gensim>=4.3.3",
    "safetensors>=0.4.0",
    "tokenizers>=0.15.0",
    # The lock of a model-ready cache entry, so that two runs building one entry at once build it once.
    "filelock>=3.12",
]

# JAX for an accelerator, as JAX's install guide gives it (https://docs.jax.dev/en/latest/installation.html):
# jaxlib with a PJRT plugin, and for GPUs NVIDIA's CUDA libraries as wheels, so no CUDA toolkit is needed, only
# the NVIDIA driver. Each extra resolves to wheels from PyPI alone (checked by .ci/run without installing).
ACCELERATORS = {
    # NVIDIA GPUs with CUDA 12 wheels: driver >= 525.60.13 (JAX's guide), as on most clusters and Colab today.
    "cuda": ["jax[cuda12]>=0.4.35"],
    # CUDA 13 wheels (jax >= 0.7.2 ships them): for NVIDIA drivers of the CUDA 13 series (>= 580).
    "cuda13": ["jax[cuda13]>=0.7.2"],
    # Cloud TPU VMs: jaxlib and libtpu. Up to jax 0.5.0 libtpu came from JAX's own index and JAX's guide gave
    # `pip install "jax[tpu]" -f https://storage.googleapis.com/jax-releases/libtpu_releases.html`, a find-links
    # that an extra cannot carry; since 0.5.1 libtpu is on PyPI, so the extra needs no -f.
    "tpu": ["jax[tpu]>=0.5.1"],
}

TENSORFLOW = [
    "tensorflow-cpu>=2.16; platform_machine=='x86_64' or platform_machine=='AMD64'",
    "tensorflow>=2.16; platform_machine!='x86_64' and platform_machine!='AMD64'",
]

# The `tfds` command line (`tfds build tfds_builders/<name> --manual_dir=...`) imports TensorFlow, apache_beam
# and mlcroissant at start-up (tensorflow-datasets 4.9), even for builders that use none of them.
TFDS_CLI = [*TENSORFLOW, "apache-beam>=2.60", "mlcroissant>=1.0"]

EXTRAS_REQUIRE = {
    "tfds-cli": TFDS_CLI,
    # Builds on Apache Beam (data.builder_kwargs beam_runner / tfds build --beam_pipeline_options).
    "beam": ["apache-beam>=2.60"],
    # train.profile: clu's profiler hook (clu.periodic_actions imports TensorFlow through clu.metric_writers).
    "profile": ["clu>=0.0.12", *TENSORFLOW],
    # METEOR (the Meteor 1.5 jar) and --text_mode pycocoevalcap (its PTB tokenizer) use the jars inside
    # pycocoevalcap, which is also the reference the metrics are checked against; without it METEOR is None
    # with a note saying why.
    "meteor": ["pycocoevalcap==1.2"],
    # launch/colab.ipynb run headless (nbclient).
    "notebook": ["nbformat", "nbclient", "ipykernel"],
    **ACCELERATORS,
}
# Everything the tests need: every extra above (the tests also run the `tfds` command line and the notebook).
EXTRAS_REQUIRE["test"] = ["pytest>=8.0", "pytest-xdist>=3.5",
                          *dict.fromkeys(r for k in ("tfds-cli", "beam", "profile", "meteor", "notebook")
                                         for r in EXTRAS_REQUIRE[k])]

setup(
    name="openvivqa_jax",
    version="0.1.0",
    description="JAX/Flax reimplementation of the OpenViVQA models for open-ended Vietnamese VQA",
    long_description=open("README.md", encoding="utf-8").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    packages=find_packages(include=["openvivqa_jax", "openvivqa_jax.*", "tfds_builders", "tfds_builders.*"]),
    package_data={"tfds_builders": ["*/*.tsv", "*/*.txt", "*/*.md"]},
    python_requires=">=3.11",
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
    entry_points={
        "console_scripts": [
            "openvivqa-train=openvivqa_jax.main:run",
            "openvivqa-evaluate=openvivqa_jax.evaluate:run",
            "openvivqa-predict=openvivqa_jax.predict:run",
            "openvivqa-plot=openvivqa_jax.plot:run",
            "openvivqa-analyze=openvivqa_jax.analyze:run",
        ]
    },
)
