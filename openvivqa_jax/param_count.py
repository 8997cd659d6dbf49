"""Parameter counts of the paper-size configs, as a markdown table.

Usage::

    python -m openvivqa_jax.param_count [--config_dir configs/openvivqa]

Every ``*.py`` config in ``--config_dir`` is loaded with each of its variants (the module's ``VARIANTS``;
for a config without that list, ``images`` and ``features`` are tried and a variant its ``get_config``
rejects with ``ValueError`` is skipped; a config whose ``get_config`` takes no argument has one row; a
file without ``get_config``, such as configs/common.py, is not a config and is skipped).
Models are built abstractly (``nnx.eval_shape``: shapes only, no memory, no initialization), so the
whole table takes seconds. Columns: model, config (``path:variant``), parameters (float32 master
weights), d_model, layers (the model's stacks, from its config).
"""

from __future__ import annotations

import argparse
import glob
import inspect
import os
import sys

from openvivqa_jax import paths
from openvivqa_jax.cli import run_main
from openvivqa_jax.config_files import config_module

__all__ = ["count_params", "layer_summary", "config_rows", "format_table", "main", "PATH_FLAGS"]


def count_params(model_cfg, vocab_size: int) -> int:
    """Number of ``nnx.Param`` scalars of ``build_model(model_cfg, vocab_size)`` (built abstractly)."""
    # Imported here: the command line checks its flags before paying for JAX's import.
    import jax
    import numpy as np
    from flax import nnx

    from openvivqa_jax.models import build_model

    model = nnx.eval_shape(lambda: build_model(model_cfg, vocab_size))
    return int(sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(model, nnx.Param))))


#: Each model's layer stacks as a format string over its ``config.model`` fields (:func:`layer_summary`).
LAYER_SUMMARIES = {
    "fst": "LSTM + {num_glimpses}-glimpse stacked attention, decoder {num_decoder_layers}",
    "qumlag": "LSTM, SA {num_fusion_layers} + SA/GA {num_fusion_layers}, decoder {num_decoder_layers}",
    "mlpag": "fusion {num_fusion_layers} x (SA, context, spatial), decoder {num_decoder_layers}",
    "m4c": "text {num_text_layers} + MMT {num_mmt_layers}",
    "saaa": "LSTM + {num_glimpses}-glimpse attention, MLP",
    "mcan": "LSTM, SA {num_fusion_layers} + SA/GA {num_fusion_layers}, AttFlat",
    "lorra": "LSTM, {num_glimpses}-glimpse image + {context_glimpses}-glimpse OCR attention, MLP",
}


def layer_summary(m) -> str:
    """The model's layer stacks from its config ``m`` (``config.model``), e.g. ``"text 12 + MMT 4"``; ``"?"`` for a
    model without an entry in :data:`LAYER_SUMMARIES`."""
    template = LAYER_SUMMARIES.get(m.name)
    return "?" if template is None else template.format_map(m)


def _configs(mod):
    """``[(variant or None, config)]`` of a config module."""
    variants = getattr(mod, "VARIANTS", None)
    if variants is None:
        takes_arg = len(inspect.signature(mod.get_config).parameters) > 0
        variants = ("images", "features") if takes_arg else (None,)
    out = []
    for v in variants:
        try:
            out.append((v, mod.get_config() if v is None else mod.get_config(v)))
        except ValueError:
            continue
    return out


def config_rows(config_dir: str) -> list[dict]:
    """One row per (config file, variant) in ``config_dir``: model, config, parameters, d_model, layers.

    Raises:
      FileNotFoundError: if ``config_dir`` holds no ``*.py`` config.
    """
    files = sorted(p for p in glob.glob(os.path.join(config_dir, "*.py")) if not p.endswith("__init__.py"))
    if not files:
        raise FileNotFoundError(f"no *.py config in {config_dir}")
    rows = []
    for path in files:
        mod = config_module(path)
        if not hasattr(mod, "get_config"):
            continue
        for variant, cfg in _configs(mod):
            m = cfg.model
            rows.append(dict(model=m.name, config=path + (f":{variant}" if variant else ""),
                             parameters=count_params(m, cfg.tokenizer.vocab_size), d_model=m.d_model,
                             layers=layer_summary(m)))
    return rows


def format_table(rows: list[dict]) -> str:
    """Markdown table of :func:`config_rows` output (parameters with thousands separators and in millions)."""
    lines = ["| model | config | parameters | d_model | layers |", "|---|---|---:|---:|---|"]
    for r in rows:
        p = r["parameters"]
        lines.append(f"| {r['model']} | {r['config']} | {p:,} ({p / 1e6:.1f}M) | {r['d_model']} | {r['layers']} |")
    return "\n".join(lines)


#: The path flags (:mod:`openvivqa_jax.paths`), checked before any config is loaded.
PATH_FLAGS = {"--config_dir": paths.INPUT_DIR}


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; prints the table. A ``--config_dir`` that is no folder or holds no configs: one
    ``error:`` line, exit 2."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config_dir", default="configs/openvivqa", help="folder of paper-size configs")
    args = parser.parse_args(argv)
    def body() -> None:
        paths.check_args(args, PATH_FLAGS)
        print(format_table(config_rows(args.config_dir)))

    return run_main(body, sigterm=False, with_class=False, handled=(FileNotFoundError,),
                    exit_codes={FileNotFoundError: 2})


if __name__ == "__main__":
    sys.exit(main())
