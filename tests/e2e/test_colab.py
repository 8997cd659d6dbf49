"""launch/colab.ipynb executes headless (nbclient) with the tiny config: it detects the headless run from
``OPENVIVQA_NOTEBOOK_CONFIG`` and the machine's runtime (GPU, TPU or CPU), skips the pip install (the package,
its dependencies and the runtime's JAX plugin are importable), trains (the log's backend line is shown), draws
the curves and shows the test predictions that the run wrote."""

from __future__ import annotations

import json
import os

import pytest

from conftest import ROOT

NOTEBOOK = os.path.join(ROOT, "launch", "colab.ipynb")


def _outputs_text(cell) -> str:
    parts = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            parts.append(o.get("text", ""))
        for mime in ("text/plain", "text/html"):
            if mime in o.get("data", {}):
                parts.append(o["data"][mime])
    return "".join(parts)


def test_notebook_is_committed_without_outputs():
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")


@pytest.mark.slow
def test_colab_notebook_runs_headless_with_the_tiny_config(tmp_path, monkeypatch):
    import nbclient
    import nbformat

    workdir = tmp_path / "run"
    monkeypatch.setenv("OPENVIVQA_NOTEBOOK_CONFIG", "configs/tiny.py")
    monkeypatch.setenv("OPENVIVQA_NOTEBOOK_WORKDIR", str(workdir))
    monkeypatch.setenv("OPENVIVQA_NOTEBOOK_ARGS",
                       f"--config.data.data_dir={tmp_path / 'tfds'} --config.train.num_train_steps=10 "
                       "--config.train.eval_every_steps=5 --config.eval.ocr_ablation=False")
    monkeypatch.setenv("PYTHONPATH", ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": ROOT}})  # run from the checkout
    client.execute()  # raises CellExecutionError (with the traceback) if a cell fails
    code = [c for c in nb.cells if c.cell_type == "code"]
    setup, train, curves, preds_cell = (_outputs_text(c) for c in code)
    from openvivqa_jax import accelerator

    # The cell detected this machine's runtime, and its accelerator's JAX plugin (none for a CPU) is importable.
    runtime = accelerator.detect_runtime()
    assert f"runtime: {runtime}" in setup
    assert "already importable: skipping pip install" in setup
    assert "config configs/tiny.py" in setup
    assert "step 10/10" in train
    assert "] backend cpu: 1 device (cpu), 1 process" in train  # JAX_PLATFORMS=cpu, as set above

    # The curves cell drew a figure and reports the last logged training loss of metrics.jsonl.
    assert any("image/png" in o.get("data", {}) for o in code[2].outputs)
    assert (workdir / "notebook_curves.png").stat().st_size > 1000
    with open(workdir / "metrics.jsonl", encoding="utf-8") as f:
        recs = [json.loads(line) for line in f]
    last = max((r for r in recs if r["kind"] == "train"), key=lambda r: r["step"])
    assert last["step"] == 10
    assert f"final train loss {last['loss']:.6f} at step 10" in curves
    assert sum(r["kind"] == "eval" for r in recs) == 2  # dev at steps 5 and 10

    # The predictions table shows the first 10 test predictions the run wrote, and the test scores.
    with open(workdir / "eval" / "test_predictions.json", encoding="utf-8") as f:
        preds = json.load(f)
    assert f"{len(preds)} test questions; shown 10" in preds_cell
    import html

    html_out = next(o["data"]["text/html"] for o in code[3].outputs if "text/html" in o.get("data", {}))
    assert html_out.count("<tr>") == 11  # header + 10 rows
    for p in preds[:10]:
        assert f"<td>{html.escape(p['question_id'])}</td><td>{html.escape(p['question'])}</td>" \
               f"<td>{html.escape(p['prediction'])}</td>" in html_out
    assert "CIDEr" in preds_cell and "BLEU-4" in preds_cell
