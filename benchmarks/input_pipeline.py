"""Benchmark: batches per second of the grain input pipeline alone, against the train step's consumption rate.

Usage::

    python benchmarks/input_pipeline.py [--configs default,paper] [--batches 60] [--data_dir DIR] [--smoke]

Configs (each measured in a fresh process, peak RSS per config):

* ``default``: ``configs/synthetic/base.py``, the synthetic ``default`` builder (1500/150/200 rendered images),
  batch 32, 128 x 96 images, 32 OCR tokens, the config's 2 grain threads and prefetch 8.
* ``paper``: a stand-in for the paper-size inputs: the same synthetic data through
  ``configs/openvivqa/mlpag.py`` (variant ``cnn``, the image path) preprocessing: 384 x 288 images, 50 OCR tokens of up
  to 8 pieces with PHOC, question 20, answer 20, SentencePiece vocabulary up to 4,000, batch 64. (The
  ``benchmark`` variant's pre-extracted region, det/rec and fastText features are not produced by any
  builder, so the image path stands in.)

What is timed: :func:`openvivqa_jax.data.pipeline.train_iterator` (data source -> seeded shuffle -> record
decoding, normalization, JPEG decoding and resizing, tokenization, PHOC, answer targets -> fixed-shape numpy
batches), nothing else running. The tokenizer is trained first on the train split (untimed; or read from
``--workdir``). ``--warmup`` batches are drawn untimed (thread start-up), then ``--batches`` batches are
timed: ``batches_per_s`` with the decoded-image cache as a fresh run has it (filling up during the first
epoch), and ``batches_per_s_warm_cache`` from a fresh iterator after every image of the split is in the
cache (later epochs; the default job runs about ten).

For ``default`` the train step of the same config and batch is measured too (``benchmarks/train_step.py``,
its own process, random inputs), and ``pipeline_to_step_ratio`` = pipeline batches/s / train steps/s (the
issue asks for at least 3). Prints one JSON object on stdout.

Model-ready records on the release stand-in (``--standin DIR``, made by ``benchmarks/make_release_standin.py``)::

    python benchmarks/input_pipeline.py --standin /tmp/standin1k --variants cnn,features \
        --data_dir /tmp/tfds_standin [--batches 200]

For each variant of ``configs/openvivqa/mlpag.py`` (``cnn``: 384 x 288 pixels, named ``images`` before the
``images`` variant read region proposals; ``features``: 50 x 2048 region features), in its own process: the TFDS build if the data dir has none (``tfds_build_s``, not part of the
pipeline), the tokenizer (untimed), then ``preprocess_s``: the one-time pass of
:func:`openvivqa_jax.data.model_ready.open_split` over the train split in ``data.preprocess_workers`` processes
(``preprocess_s_dev`` for dev), then ``--batches`` timed batches of
:func:`openvivqa_jax.data.model_ready.train_iterator` after ``--warmup``: ``examples_per_s`` (wall) and ``examples_per_cpu_s`` (examples / CPU seconds of the process,
all its threads). ``per_example_examples_per_cpu_s``: a few batches of the per-example path
(:func:`openvivqa_jax.data.pipeline.train_iterator`, cold image cache) for comparison. ``flops_per_example``: XLA's
cost analysis of the compiled train step (lowered on the real batch shapes), and ``host_cores_per_h200`` =
(989e12 x MFU / flops_per_example) / examples_per_cpu_s at MFU 0.3 and 0.5. ``disk_mb_per_image``: the cache
folder over its distinct images; ``peak_rss_mb``: this process, ``peak_rss_children_mb``: the largest worker.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

CONFIGS = ("default", "paper")


def pipeline_config(name: str, smoke: bool, data_dir: str | None, batch: int | None):
    """The config whose input pipeline is measured (see the module doc)."""
    cfg = common.load_config("default")
    if name == "paper":
        from openvivqa_jax.config_files import load_config

        paper = load_config(os.path.join(common.ROOT, "configs", "openvivqa", "mlpag.py"), "cnn")
        with cfg.unlocked():
            cfg.model = paper.model
            cfg.tokenizer = paper.tokenizer
            cfg.train.batch_size = paper.train.batch_size
            for k in ("image_size", "max_ocr_pieces"):
                cfg.data[k] = paper.data[k]
    with cfg.unlocked():
        if smoke:
            cfg.data.builder_config = "tiny"
            cfg.data.image_size = (64, 48) if name == "default" else (96, 72)
            cfg.tokenizer.vocab_size = 400
            cfg.train.batch_size = 4
        if data_dir:
            cfg.data.data_dir = data_dir
        if batch:
            cfg.train.batch_size = batch
    return cfg


def worker(args) -> dict:
    """One pipeline config in this process."""
    from openvivqa_jax.data import datasets, pipeline
    from openvivqa_jax.models import model_class
    from openvivqa_jax.vqa.assets import load_tokenizer

    name = args.worker
    cfg = pipeline_config(name, args.smoke, args.data_dir, args.batch)
    b = int(cfg.train.batch_size)
    t0 = time.perf_counter()
    builder = datasets.load_builder(cfg.data)
    src = pipeline.load_source(builder, cfg.data.train_split)
    source_name = f"{builder.name}/{cfg.data.train_split}"
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or tmp
        records = None
        if not os.path.exists(os.path.join(workdir, "spm.model")):
            records = pipeline.read_records(src, source_name)
        tok = load_tokenizer(cfg, workdir, records)
    res = {"config": name, "builder": f"{builder.name}/{cfg.data.builder_config}", "split_size": len(src),
           "batch": b, "image_size": list(cfg.data.image_size), "num_ocr": cfg.model.num_ocr,
           "vocab_size": tok.vocab_size, "num_threads": cfg.data.num_threads, "prefetch": cfg.data.prefetch,
           "setup_s": time.perf_counter() - t0}
    counter = pipeline.SkipCounter()
    pre = pipeline.Preprocessor(cfg, tok, counter=counter,
                                allow_copy=getattr(model_class(cfg.model.name), "copies_ocr", False))

    def rate(seed: int) -> tuple[float, dict]:
        it = pipeline.train_iterator(src, pre, batch_size=b, seed=seed, source_name=source_name,
                                     num_threads=cfg.data.num_threads, prefetch=cfg.data.prefetch)
        for _ in range(args.warmup):
            next(it)
        t = time.perf_counter()
        for _ in range(args.batches):
            batch = next(it)
        return args.batches / (time.perf_counter() - t), batch

    common.log(f"[{name}] pipeline, fresh image cache ...")
    bps, batch = rate(cfg.seed)
    res["batches_per_s"] = bps
    res["examples_per_s"] = bps * b
    common.log(f"[{name}] {bps:.2f} batches/s; filling the image cache ...")
    t1 = time.perf_counter()
    for i in range(len(src)):
        rec = pipeline.decode_record(src[i], i, source_name)
        if rec.image_bytes is not None:
            pre._image(rec.image_id, bytes(rec.image_bytes))  # Preprocessor.features' cached call
    res["cache_fill_s"] = time.perf_counter() - t1
    bps_warm, _ = rate(cfg.seed + 1)
    res["batches_per_s_warm_cache"] = bps_warm
    res["examples_per_s_warm_cache"] = bps_warm * b
    res["batch_shapes"] = {k: list(v.shape) for k, v in sorted(batch.items())}
    res["skip_counts"] = dict(counter.counts)
    res["peak_rss_mb"] = common.peak_rss_mb()
    common.log(f"[{name}] warm cache {bps_warm:.2f} batches/s")
    return res


H200_BF16_DENSE_FLOPS = 989e12


def _du(path: str) -> int:
    total = 0
    for dirpath, _, names in os.walk(path):
        total += sum(os.path.getsize(os.path.join(dirpath, n)) for n in names)
    return total


def standin_worker(args) -> dict:
    """One variant of the paper config on the release stand-in, model-ready records (module doc)."""
    import resource

    import jax

    from openvivqa_jax.training import sharding
    from openvivqa_jax.vqa.assets import load_tokenizer
    from openvivqa_jax.config_files import load_config
    from openvivqa_jax.data import datasets, model_ready, pipeline
    from openvivqa_jax.vqa.train import make_train_step

    variant = args.worker.split(":", 1)[1]
    cfg = load_config(os.path.join(common.ROOT, "configs", "openvivqa", "mlpag.py"), variant)
    with cfg.unlocked():
        cfg.data.manual_dir = args.standin
        cfg.data.data_dir = args.data_dir or os.path.join(args.standin, "tfds")
        if args.batch:
            cfg.train.batch_size = args.batch
        if args.smoke:
            cfg.data.image_size = (96, 72)
            cfg.tokenizer.vocab_size = 400
    b = int(cfg.train.batch_size)
    t0 = time.perf_counter()
    builder = datasets.load_builder(cfg.data)
    res = {"variant": variant, "config": f"configs/openvivqa/mlpag.py:{variant}", "batch": b,
           "image_size": list(cfg.data.image_size), "num_ocr": cfg.model.num_ocr,
           "tfds_build_or_open_s": round(time.perf_counter() - t0, 2),
           "splits": {k: v.num_examples for k, v in builder.info.splits.items()},
           "tfds_disk_mb": round(_du(str(builder.data_dir)) / 2**20, 1)}
    src = pipeline.load_source(builder, "train")
    name = f"{builder.name}/train"
    root = tempfile.mkdtemp(prefix="model_ready_", dir=args.cache_root)
    try:
        workdir = args.workdir or root
        tok = load_tokenizer(cfg, workdir, None if os.path.exists(os.path.join(workdir, "spm.model"))
                             else pipeline.read_records(src, name))
        pre = pipeline.Preprocessor(cfg, tok, allow_copy=True)
        res["vocab_size"] = tok.vocab_size
        cpu0, t1 = time.process_time(), time.perf_counter()
        mr = model_ready.open_split(src, pre, root, "train", builder, source_name=name,
                                    num_workers=int(cfg.data.preprocess_workers or 0))
        res["preprocess_s"] = round(time.perf_counter() - t1, 2)
        res["preprocess_main_cpu_s"] = round(time.process_time() - cpu0, 2)
        res["preprocess_workers"] = mr.manifest["workers"]
        res["num_images_train"] = mr.manifest["num_images"]
        res["num_questions_train"] = len(mr)
        res["preprocess_s_per_1000_images"] = round(1000 * res["preprocess_s"] / max(1, res["num_images_train"]), 2)
        t1 = time.perf_counter()
        model_ready.open_split(pipeline.load_source(builder, "dev"), pre, root, "dev", builder, source_name="dev",
                               num_workers=int(cfg.data.preprocess_workers or 0))
        res["preprocess_s_dev"] = round(time.perf_counter() - t1, 2)
        t1 = time.perf_counter()
        mr = model_ready.open_split(src, pre, root, "train", builder, source_name=name)
        res["reopen_verify_s"] = round(time.perf_counter() - t1, 2)
        res["disk_mb_per_image"] = round(_du(mr.path) / 2**20 / max(1, res["num_images_train"]), 3)
        res["disk_file_mb"] = {k: round(v["bytes"] / 2**20, 1) for k, v in mr.manifest["files"].items()}

        it = model_ready.train_iterator(mr, batch_size=b, seed=cfg.seed, source_name=name,
                                        num_threads=cfg.data.num_threads, prefetch=cfg.data.prefetch)
        for _ in range(args.warmup):
            batch = next(it)
        cpu0, t1 = time.process_time(), time.perf_counter()
        for _ in range(args.batches):
            batch = next(it)
        wall, cpu = time.perf_counter() - t1, time.process_time() - cpu0
        n = args.batches * b
        res.update(timed_batches=args.batches, examples_per_s=round(n / wall, 1),
                   examples_per_cpu_s=round(n / max(cpu, 1e-9), 1), num_threads=cfg.data.num_threads,
                   prefetch=cfg.data.prefetch)
        res["batch_shapes"] = {k: list(v.shape) for k, v in sorted(batch.items())}
        ref = pipeline.train_iterator(src, pre, batch_size=b, seed=cfg.seed + 1, source_name=name,
                                      num_threads=cfg.data.num_threads, prefetch=cfg.data.prefetch)
        next(ref)
        cpu0, t1 = time.process_time(), time.perf_counter()
        for _ in range(args.reference_batches):
            next(ref)
        res["per_example_examples_per_s"] = round(args.reference_batches * b / (time.perf_counter() - t1), 1)
        res["per_example_examples_per_cpu_s"] = round(args.reference_batches * b / (time.process_time() - cpu0), 1)
        del ref
        if not args.no_flops:
            spec, _ = common.bench_state(cfg, tok.vocab_size, abstract=True)
            shapes = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=spec.batch_sharding) for k, v in batch.items()}
            t1 = time.perf_counter()
            with sharding.mesh_context(spec.mesh):
                compiled = make_train_step(spec).lower(spec.abstract_state, shapes).compile()
            flops = common.cost_flops(compiled)
            res["compile_s"] = round(time.perf_counter() - t1, 1)
            if flops:
                res["flops_per_example"] = flops / b
                res["host_cores_per_h200"] = {
                    f"mfu_{m}": round(H200_BF16_DENSE_FLOPS * m / res["flops_per_example"]
                                      / res["examples_per_cpu_s"], 2)
                    for m in (0.3, 0.5)}
                res["h200_examples_per_s"] = {f"mfu_{m}": round(H200_BF16_DENSE_FLOPS * m / res["flops_per_example"])
                                              for m in (0.3, 0.5)}
        res["skip_counts"] = dict(pre.counter.counts)
        res["peak_rss_mb"] = common.peak_rss_mb()
        res["peak_rss_children_mb"] = round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)
    finally:
        if not args.keep_cache:
            import shutil
            shutil.rmtree(root, ignore_errors=True)
    return res


#: The path flags (openvivqa_jax.paths), checked before anything is built or measured.
PATH_FLAGS = {"--standin": common.paths.INPUT_DIR, "--data_dir": common.paths.DATA_DIR,
              "--workdir": common.paths.INPUT_DIR, "--cache_root": common.paths.OUTPUT_DIR}


def main(argv=None) -> dict:
    """Parses flags, runs the workers (and the default train step), prints and returns the JSON object."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--configs", "--models", dest="configs", default="default,paper",
                   help=f"comma-separated subset of {CONFIGS}")
    p.add_argument("--batch", type=int, default=None, help="batch size (default: the config's)")
    p.add_argument("--batches", type=int, default=60, help="timed batches")
    p.add_argument("--warmup", type=int, default=3, help="untimed batches first")
    p.add_argument("--repeats", type=int, default=5, help="timed train steps (median)")
    p.add_argument("--data_dir", default=None, help="TFDS data dir (default: the config's, ~/tensorflow_datasets)")
    p.add_argument("--workdir", default=None, help="read spm.model from here instead of training one")
    p.add_argument("--no_train_step", action="store_true", help="skip the train-step comparison")
    p.add_argument("--smoke", action="store_true", help="tiny data and sizes (tests)")
    p.add_argument("--standin", default=None,
                   help="manual_dir of a release stand-in (benchmarks/make_release_standin.py): measure the "
                        "model-ready records of configs/openvivqa/mlpag.py instead")
    p.add_argument("--variants", default="cnn,features",
                   help="with --standin: variants of configs/openvivqa/mlpag.py, e.g. cnn, features, images")
    p.add_argument("--reference_batches", type=int, default=4, help="with --standin: per-example batches timed")
    p.add_argument("--cache_root", default=None, help="with --standin: where the model-ready records are written")
    p.add_argument("--keep_cache", action="store_true", help="with --standin: keep the model-ready records")
    p.add_argument("--no_flops", action="store_true", help="with --standin: skip the train step's FLOPs")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    common.paths.check_args(args, PATH_FLAGS)
    if args.worker and args.worker.startswith("standin:"):
        res = standin_worker(args)
        common.emit(res)
        return res
    if args.standin:
        result = {"benchmark": "input_pipeline_model_ready", "machine": common.machine_info(),
                  "standin": os.path.abspath(args.standin), "smoke": args.smoke, "variants": {}}
        for v in [x for x in args.variants.split(",") if x]:
            common.log(f"[{v}] ...")
            wargs = [f"--worker=standin:{v}", f"--standin={args.standin}", f"--batches={args.batches}",
                     f"--warmup={args.warmup}", f"--reference_batches={args.reference_batches}"]
            for flag in ("batch", "data_dir", "workdir", "cache_root"):
                if getattr(args, flag):
                    wargs.append(f"--{flag}={getattr(args, flag)}")
            wargs += ["--smoke"] * args.smoke + ["--keep_cache"] * args.keep_cache + ["--no_flops"] * args.no_flops
            result["variants"][v] = common.run_worker(os.path.abspath(__file__), wargs)
        common.emit(result)
        return result
    if args.worker:
        res = worker(args)
        common.emit(res)
        return res
    names = common.parse_models(args.configs, CONFIGS)
    result = {"benchmark": "input_pipeline", "machine": common.machine_info(), "smoke": args.smoke, "configs": {}}
    for name in names:
        common.log(f"[{name}] ...")
        wargs = [f"--worker={name}", f"--batches={args.batches}", f"--warmup={args.warmup}"]
        for flag in ("batch", "data_dir", "workdir"):
            if getattr(args, flag):
                wargs.append(f"--{flag}={getattr(args, flag)}")
        wargs += ["--smoke"] if args.smoke else []
        r = common.run_worker(os.path.abspath(__file__), wargs)
        entry = {k: v for k, v in r.items() if k != "config"}
        if name == "default" and not args.no_train_step:
            common.log("[default] train step ...")
            targs = ["--worker=default", f"--repeats={args.repeats}", f"--batch={r['batch']}"]
            targs += ["--smoke"] if args.smoke else []
            step = common.run_worker(os.path.join(os.path.dirname(os.path.abspath(__file__)), "train_step.py"), targs)
            steps_per_s = 1.0 / step["step_s_median"]
            entry["train_step"] = {"batch": step["batch"], "step_s_median": step["step_s_median"],
                                   "steps_per_s": steps_per_s, "peak_rss_mb": step["peak_rss_mb"]}
            entry["pipeline_to_step_ratio"] = entry["batches_per_s"] / steps_per_s
            entry["pipeline_to_step_ratio_warm_cache"] = entry["batches_per_s_warm_cache"] / steps_per_s
        result["configs"][name] = entry
    common.emit(result)
    return result


if __name__ == "__main__":
    sys.exit(common.run_script(main))
