"""The copy mechanism on the tiny config: the pointer network learns to copy, and only through OCR tokens.

Generalization to unseen shop names needs the default config's data and steps (README: the main job);
a CPU-sized test cannot train that far. What is checked here, after a short training run on ``tiny_clean``:

* at answer steps whose target is an OCR token, the argmax is a correct OCR slot (not a vocabulary
  piece) far above chance (chance = 1 / number of OCR tokens);
* the copied word is the OCR token's text: swapping two OCR tokens' texts (PHOC, boxes kept) makes
  the decoded answer follow the text, i.e. the decoder output depends on the OCR content;
* with OCR tokens masked out no copy step can be predicted.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from conftest import load_config
from openvivqa_jax.training import sharding
from openvivqa_jax.vqa import decoding, experiment, train
from openvivqa_jax.data import pipeline

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    cfg = load_config("configs/tiny.py")
    cfg.data.builder_config = "tiny_clean"
    cfg.data.data_dir = str(tmp_path_factory.mktemp("tfds"))
    cfg.model.d_model = 64
    cfg.model.ffn_dim = 128
    cfg.train.num_train_steps = 250
    cfg.train.warmup_steps = 50
    cfg.train.lr_scale = 0.5
    exp, state = experiment.create_experiment(cfg, str(tmp_path_factory.mktemp("copy")))
    it = pipeline.train_iterator(exp.data.source("train"), exp.inputs.pre, batch_size=16, seed=0, num_threads=1)
    step = train.make_train_step(exp.spec)
    for _ in range(cfg.train.num_train_steps):
        with sharding.mesh_context(exp.spec.mesh):
            state, m = step(state, pipeline.to_global(next(it), exp.spec.batch_sharding))
    return exp, state.params


def _teacher_forced(trained, pre, split="train"):
    exp, params = trained
    batches = list(pipeline.eval_batches(exp.data.source(split), pre, batch_size=16))
    V = exp.inputs.tokenizer.vocab_size
    hits = total = vocab_chosen = 0
    chance = []
    for b in batches:
        logits = np.asarray(_logits(exp, params, b))
        pred = logits.argmax(-1)
        copy_steps = b["target_ocr"].any(-1) & b["target_mask"] & b["valid"][:, None]
        for i, t in zip(*np.nonzero(copy_steps)):
            total += 1
            p = int(pred[i, t])
            hits += p >= V and bool(b["target_ocr"][i, t, p - V])
            vocab_chosen += p < V
            chance.append(b["target_ocr"][i, t].sum() / max(1, b["ocr_mask"][i].sum()))
    return hits, total, vocab_chosen, float(np.mean(chance)) if chance else 0.0


_TF_LOGITS = {}


def _logits(exp, params, batch):
    graphdef = exp.spec.graphdef
    if graphdef not in _TF_LOGITS:
        _TF_LOGITS[graphdef] = jax.jit(lambda p, x: nnx.merge(graphdef, p)(x))
    return _TF_LOGITS[graphdef](params, batch)


def test_pointer_learns_to_copy(trained):
    hits, total, vocab_chosen, chance = _teacher_forced(trained, trained[0].inputs.pre)
    assert total > 50
    assert hits / total > max(0.5, 5 * chance), (hits, total, chance)


def test_copy_follows_the_ocr_token_not_its_slot(trained):
    """Reversing the order of the OCR tokens (texts and boxes) moves the name to other slots; a model that
    copies by content still answers with the name, now pointing at the new slots."""
    exp, params = trained
    inp = exp.inputs
    fn = _greedy(exp)
    checked = followed = 0
    for rec in exp.data.records("train"):
        ans = rec.answers[0]
        if " tên là " not in ans or rec.qa_type != 1:
            continue
        name = ans.split(" tên là ")[1]
        ocr = rec.ocr_texts[: exp.cfg.model.num_ocr]
        if not all(w in ocr for w in name.split()):
            continue
        ex = pipeline.decode_record(exp.data.source("train")[rec.index], rec.index)
        ids, _ = fn(params, {k: v[None] for k, v in inp.pre.features(ex, None).items()})
        if name not in inp.vocab.decode(np.asarray(ids[0]), ocr):
            continue  # only answers the model gets right in the original order
        ex.ocr_texts, ex.ocr_boxes = ex.ocr_texts[::-1], ex.ocr_boxes[::-1]
        rev_ocr = ex.ocr_texts[: exp.cfg.model.num_ocr]
        ids_r, _ = fn(params, {k: v[None] for k, v in inp.pre.features(ex, None).items()})
        answer_r = inp.vocab.decode(np.asarray(ids_r[0]), rev_ocr)
        copied = [rev_ocr[s] for kind, s in inp.vocab.sources(np.asarray(ids_r[0])) if kind == "ocr"]
        checked += 1
        followed += name in answer_r and set(name.split()) <= set(copied)
        if checked == 12:
            break
    assert checked >= 5, "too few correctly answered shop-name questions to test"
    assert followed / checked >= 0.6, (followed, checked)


def test_no_copy_without_ocr(trained):
    hits, total, vocab_chosen, _ = _teacher_forced(trained, trained[0].inputs.pre_no_ocr)
    assert total == 0  # no OCR token: no answer word can be a copy target
    exp, params = trained
    b = next(iter(pipeline.eval_batches(exp.data.source("train"), exp.inputs.pre_no_ocr, batch_size=16)))
    ids, _ = _greedy(exp)(params, b)
    assert (np.asarray(ids) < exp.inputs.tokenizer.vocab_size).all()


def _greedy(exp):
    """The run's jitted greedy decoder."""
    return decoding.make_decode_fn(exp.spec.graphdef, decoding.DecodeSettings.from_config(exp.cfg, True, method="greedy"))
