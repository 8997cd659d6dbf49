"""A plain PyTorch implementation of MLPAG, QuMLAG and M4C at this project's shapes, for side-by-side timing.

Run by :mod:`benchmarks.vs_reference` as a subprocess of an interpreter that has ``torch`` (``--torch_python``);
it imports neither JAX nor this project, only ``torch`` and ``numpy``. Usage (one measurement, one process)::

    python benchmarks/torch_reference.py --model qumlag --mode train --shapes '{...}' --steps 2 --threads 2
    python benchmarks/torch_reference.py --model qumlag --mode decode --shapes '{...}' --decode_batch 16

It prints one JSON object: ``examples_per_s`` (train) or ``answers_per_s`` (decode), the timings, and the
matmul peak of torch in the same process (median GFLOP/s of a ``(n, n) @ (n, n)`` float32 ``torch.mm``,
``2 n^3`` FLOPs per product).

The models are written from the papers' descriptions, in the ordinary PyTorch style (``nn.Linear``,
``nn.LayerNorm``, ``nn.LSTM``, ``F.scaled_dot_product_attention`` with its ``dropout_p``), with the layer
counts and widths of this project's ``benchmark`` configs, which the caller passes in ``--shapes``
(``configs/openvivqa/<name>.py:benchmark``: batch 64, 50 regions x 1024 + boxes, question 20, answer 20,
50 OCR tokens of 8 pieces, PHOC 702, det 256 / rec 256 / fastText 300 features, vocabulary 4,000):

* **MLPAG** (OpenViVQA paper §4.3, eq. 9-12): region features and OCR tokens embedded as M4C does
  (``LN(W f) + LN(W_b box)``), the question as piece + position embeddings and a fully connected layer;
  ``num_fusion_layers`` times: self-attention on the question, context attention (OCR over question) and
  spatial attention (image over question); ``x_f = x_S + x_I`` (eq. 9); a transformer decoder
  (``num_decoder_layers``) over ``x_f`` with the dynamic pointer network over ``x_S`` (eq. 11-12).
* **QuMLAG** (§4.2, eq. 8): region features as above; piece embeddings (``word_dim``) and an LSTM for the
  question; MCAN's encoder-decoder co-attention (``num_fusion_layers`` self-attention units on the
  question, then ``num_fusion_layers`` self-attention + question-guided attention units on the image);
  memory ``[x_I; x_Q]``; the transformer decoder over it, vocabulary only.
* **M4C** (Hu et al. 2020 §3): a ``num_text_layers``-layer transformer question encoder trained from
  scratch, object and OCR embeddings, a ``num_mmt_layers``-layer multimodal transformer over
  ``[question; objects; OCR; previous outputs]`` with a prefix-LM mask, previous outputs embedded from the
  classifier's weights (a piece) or the OCR embedding (a copy), the dynamic pointer network; multi-label
  BCE.

The blocks are pre-LayerNorm transformer blocks (attention, then a ReLU FFN, each residual with dropout),
dropout ``dropout`` everywhere this project has it (embeddings, attention probabilities, FFN inner layer,
residuals). The train step is forward, loss (softmax cross-entropy over ``V + N``; BCE for M4C), backward
and ``torch.optim.Adam`` (gradient-norm clipping when ``grad_clip_norm > 0``), batch ``batch``, float32.

Decoding is what a straightforward PyTorch implementation without a KV cache does: the encoder runs once
per batch, then at every step the **whole decoder is recomputed** over the growing prefix and the last
position's logits are read (PAD, UNK and BOS banned). MLPAG and M4C decode greedily (for M4C the whole
multimodal transformer, prefix included, is recomputed at every step), QuMLAG with beam 3 (the beams
flattened into the batch, the encoder's memory repeated per beam, length penalty 0). Every answer runs
``max_answer_len`` steps unless all have ended (with random weights EOS is rare).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

PAD, UNK, BOS, EOS = 0, 1, 2, 3
NEG = -1e9


# ----------------------------------------------------------------------------------------------- blocks
class Attention(nn.Module):
    """Multi-head attention (Vaswani et al. 2017): ``softmax(q k^T / sqrt(d/H)) v`` through
    ``F.scaled_dot_product_attention``; ``mask`` bool, True where a key is attended, broadcastable to
    ``(batch, H, q_len, kv_len)``."""

    def __init__(self, d: int, heads: int, dropout: float):
        super().__init__()
        self.h, self.p = heads, dropout
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x, ctx, mask):
        """``x`` ``(batch, q_len, d)``, ``ctx`` ``(batch, kv_len, d)`` -> ``(batch, q_len, d)``."""
        b, lq, d = x.shape
        split = lambda t: t.view(b, t.shape[1], self.h, d // self.h).transpose(1, 2)  # noqa: E731
        out = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(ctx)), split(self.v(ctx)),
                                             attn_mask=mask, dropout_p=self.p if self.training else 0.0)
        return self.o(out.transpose(1, 2).reshape(b, lq, d))


class Block(nn.Module):
    """Pre-LN block: ``x + drop(attn(LN(x), LN'(ctx)))``, then ``x + drop(W_o drop(relu(W_i LN(x))))``.
    ``ctx=None`` is self-attention (one LayerNorm); ``cross=True`` adds a cross-attention sub-layer after the
    self-attention (a decoder layer)."""

    def __init__(self, d: int, heads: int, ffn: int, dropout: float, *, kv_norm=False, cross=False):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(d, eps=1e-6), Attention(d, heads, dropout)
        self.ln_kv = nn.LayerNorm(d, eps=1e-6) if kv_norm else None
        if cross:
            self.ln_x, self.xattn = nn.LayerNorm(d, eps=1e-6), Attention(d, heads, dropout)
        self.cross = cross
        self.ln2 = nn.LayerNorm(d, eps=1e-6)
        self.wi, self.wo = nn.Linear(d, ffn), nn.Linear(ffn, d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask, ctx=None, ctx_mask=None):
        """``x`` ``(batch, len, d)``; ``mask`` for the first attention; ``ctx``/``ctx_mask`` for cross-attention
        (a decoder layer) or as the first attention's keys (``kv_norm``)."""
        h = self.ln1(x)
        kv = self.ln_kv(ctx) if self.ln_kv is not None else h
        x = x + self.drop(self.attn(h, kv, mask))
        if self.cross:
            x = x + self.drop(self.xattn(self.ln_x(x), ctx, ctx_mask))
        return x + self.drop(self.wo(self.drop(F.relu(self.wi(self.ln2(x))))))


def key_mask(m):
    """``(batch, len)`` bool -> ``(batch, 1, 1, len)``."""
    return m[:, None, None, :]


class RegionEmbedding(nn.Module):
    """Objects: ``LN(W_1 f) + LN(W_2 box)`` (M4C §3.1), dropout. ``(batch, R, region_dim)`` -> ``(batch, R, d)``."""

    def __init__(self, s, d):
        super().__init__()
        self.f, self.b = nn.Linear(s["region_dim"], d), nn.Linear(4, d)
        self.lf, self.lb = nn.LayerNorm(d, eps=1e-6), nn.LayerNorm(d, eps=1e-6)
        self.drop = nn.Dropout(s["dropout"])

    def forward(self, feats, boxes):
        return self.drop(self.lf(self.f(feats)) + self.lb(self.b(boxes)))


class OcrEmbedding(nn.Module):
    """OCR tokens (M4C §3.1): ``LN(sum_k W_k f_k) + LN(W_b box)`` over the mean piece embedding, PHOC, the
    region features pooled under the token's box (area overlap), and the extra features (det/rec/fastText)."""

    def __init__(self, s, d):
        super().__init__()
        self.pieces = nn.Embedding(s["vocab"], d)
        self.piece_proj = nn.Linear(d, d)
        self.phoc = nn.Linear(s["phoc_dim"], d)
        self.app = nn.Linear(s["region_dim"], d)
        self.extra = nn.ModuleDict({k: nn.Linear(v, d) for k, v in s["ocr_extra"].items()})
        self.box = nn.Linear(4, d)
        self.lf, self.lb = nn.LayerNorm(d, eps=1e-6), nn.LayerNorm(d, eps=1e-6)
        self.drop = nn.Dropout(s["dropout"])

    def forward(self, b):
        m = b["ocr_piece_mask"].float()[..., None]
        x = self.piece_proj((self.pieces(b["ocr_pieces"]) * m).sum(2) / m.sum(2).clamp(min=1))
        x = x + self.phoc(b["ocr_phoc"])
        ob, rb = b["ocr_boxes"][:, :, None], b["region_boxes"][:, None]
        w = (torch.minimum(ob[..., 2], rb[..., 2]) - torch.maximum(ob[..., 0], rb[..., 0])).clamp(min=0)
        h = (torch.minimum(ob[..., 3], rb[..., 3]) - torch.maximum(ob[..., 1], rb[..., 1])).clamp(min=0)
        inter = w * h
        tot = inter.sum(-1, keepdim=True)
        weights = torch.where(tot > 0, inter / tot.clamp(min=1e-12), torch.full_like(inter, 1.0 / inter.shape[-1]))
        x = x + self.app(weights @ b["region_features"])
        for k, lin in self.extra.items():
            x = x + lin(b[k])
        return self.drop(self.lf(x) + self.lb(self.box(b["ocr_boxes"])))


class QuestionEmbedding(nn.Module):
    """Piece + position embeddings, a fully connected layer, LayerNorm, dropout (MLPAG §4.3; M4C's text input)."""

    def __init__(self, s, d):
        super().__init__()
        self.emb, self.pos = nn.Embedding(s["vocab"], d), nn.Embedding(s["q_len"], d)
        self.proj, self.ln = nn.Linear(d, d), nn.LayerNorm(d, eps=1e-6)
        self.drop = nn.Dropout(s["dropout"])

    def forward(self, ids):
        x = self.emb(ids) + self.pos(torch.arange(ids.shape[1]))[None]
        return self.drop(self.ln(self.proj(x)))


class AnswerDecoder(nn.Module):
    """Transformer decoder over a memory with an optional dynamic pointer network (MLPAG eq. 10-12):
    vocabulary logits ``W_v h`` and ``(W_h h)(W_S x_S)^T / sqrt(d)`` over the OCR tokens, concatenated."""

    def __init__(self, s, d, pointer: bool):
        super().__init__()
        self.V, self.N, self.d, self.pointer = s["vocab"], s["num_ocr"], d, pointer
        self.emb, self.pos = nn.Embedding(s["vocab"], d), nn.Embedding(s["ans_len"], d)
        self.ln_in, self.ln_out = nn.LayerNorm(d, eps=1e-6), nn.LayerNorm(d, eps=1e-6)
        self.layers = nn.ModuleList([Block(d, s["heads"], s["ffn"], s["dropout"], cross=True)
                                     for _ in range(s["num_decoder_layers"])])
        self.head = nn.Linear(d, s["vocab"])
        if pointer:
            self.ocr_in, self.pq, self.pk = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.drop = nn.Dropout(s["dropout"])

    def forward(self, ids, memory, mem_mask, ocr, ocr_mask):
        """``ids`` ``(batch, len)`` extended ids -> logits ``(batch, len, V + N)``."""
        L = ids.shape[1]
        is_ocr = ids >= self.V
        x = self.emb(torch.where(is_ocr, 0, ids))
        if self.pointer:
            slot = (ids - self.V).clamp(0, self.N - 1)
            copied = torch.gather(self.ocr_in(ocr), 1, slot[..., None].expand(-1, -1, self.d))
            x = torch.where(is_ocr[..., None], copied, x)
        x = self.drop(self.ln_in(x + self.pos(torch.arange(L))[None]))
        causal = torch.ones(L, L, dtype=torch.bool).tril()[None, None]
        for layer in self.layers:
            x = layer(x, causal, memory, key_mask(mem_mask))
        h = self.ln_out(x)
        vocab = self.head(h)
        if self.pointer:
            ptr = self.pq(h) @ self.pk(ocr).transpose(1, 2) / math.sqrt(self.d)
            ptr = ptr.masked_fill(~ocr_mask[:, None, :], NEG)
        else:
            ptr = torch.full(h.shape[:2] + (self.N,), NEG)
        return torch.cat([vocab, ptr], -1)


# ----------------------------------------------------------------------------------------------- models
class MLPAG(nn.Module):
    """MLPAG (OpenViVQA §4.3). ``encode`` -> (memory, memory mask, OCR features, OCR mask)."""

    def __init__(self, s):
        super().__init__()
        d, blk = s["d"], lambda kv: Block(s["d"], s["heads"], s["ffn"], s["dropout"], kv_norm=kv)  # noqa: E731
        self.regions, self.ocr, self.question = RegionEmbedding(s, d), OcrEmbedding(s, d), QuestionEmbedding(s, d)
        n = s["num_fusion_layers"]
        self.sa = nn.ModuleList([blk(False) for _ in range(n)])
        self.context = nn.ModuleList([blk(True) for _ in range(n)])
        self.spatial = nn.ModuleList([blk(True) for _ in range(n)])
        self.decoder = AnswerDecoder(s, d, pointer=True)

    def encode(self, b):
        x_i = self.regions(b["region_features"], b["region_boxes"])
        x_s, x_q = self.ocr(b), self.question(b["question"])
        qm = key_mask(b["question_mask"])
        for sa, ca, spa in zip(self.sa, self.context, self.spatial):
            x_q = sa(x_q, qm)
            x_s = ca(x_s, qm, x_q)
            x_i = spa(x_i, qm, x_q)
        n = max(x_s.shape[1], x_i.shape[1])  # eq. 9, x_f = x_S + x_I, the shorter one zero-padded
        pad = lambda x, m: (F.pad(x * m[..., None], (0, 0, 0, n - x.shape[1])), F.pad(m, (0, n - m.shape[1])))  # noqa
        (xs, ms), (xi, mi) = pad(x_s, b["ocr_mask"]), pad(x_i, b["region_mask"])
        return xs + xi, ms | mi, x_s, b["ocr_mask"]

    def forward(self, b):
        return self.decoder(b["decoder_in"], *self.encode(b))


class QuMLAG(nn.Module):
    """QuMLAG (OpenViVQA §4.2): LSTM question, MCAN encoder-decoder co-attention, transformer decoder."""

    def __init__(self, s):
        super().__init__()
        d, n = s["d"], s["num_fusion_layers"]
        blk = lambda kv: Block(d, s["heads"], s["ffn"], s["dropout"], kv_norm=kv)  # noqa: E731
        self.regions = RegionEmbedding(s, d)
        self.words = nn.Embedding(s["vocab"], s["word_dim"])
        self.lstm = nn.LSTM(s["word_dim"], d, batch_first=True)
        self.drop = nn.Dropout(s["dropout"])
        self.q_sa = nn.ModuleList([blk(False) for _ in range(n)])
        self.i_sa = nn.ModuleList([blk(False) for _ in range(n)])
        self.i_ga = nn.ModuleList([blk(True) for _ in range(n)])
        self.ln_q, self.ln_i = nn.LayerNorm(d, eps=1e-6), nn.LayerNorm(d, eps=1e-6)
        self.decoder = AnswerDecoder(s, d, pointer=False)
        self.N = s["num_ocr"]

    def encode(self, b):
        qmask = b["question_mask"]
        x_q, _ = self.lstm(self.drop(self.words(b["question"])))
        x_q = x_q * qmask[..., None]
        x_i = self.regions(b["region_features"], b["region_boxes"])
        qm, im = key_mask(qmask), key_mask(b["region_mask"])
        for sa in self.q_sa:
            x_q = sa(x_q, qm)
        for sa, ga in zip(self.i_sa, self.i_ga):
            x_i = ga(sa(x_i, im), qm, x_q)
        memory = torch.cat([self.ln_i(x_i), self.ln_q(x_q)], 1)
        mask = torch.cat([b["region_mask"], qmask], 1)
        bsz = memory.shape[0]
        return memory, mask, torch.zeros(bsz, self.N, memory.shape[2]), torch.zeros(bsz, self.N, dtype=torch.bool)

    def forward(self, b):
        return self.decoder(b["decoder_in"], *self.encode(b))


class M4C(nn.Module):
    """M4C (Hu et al. 2020): text transformer, object and OCR embeddings, multimodal transformer with a
    prefix-LM mask over ``[question; objects; OCR; previous outputs]``, dynamic pointer network."""

    def __init__(self, s):
        super().__init__()
        d = s["d"]
        blk = lambda: Block(d, s["heads"], s["ffn"], s["dropout"])  # noqa: E731
        self.V, self.N, self.d = s["vocab"], s["num_ocr"], d
        self.question = QuestionEmbedding(s, d)
        self.text = nn.ModuleList([blk() for _ in range(s["num_text_layers"])])
        self.ln_text = nn.LayerNorm(d, eps=1e-6)
        self.regions, self.ocr = RegionEmbedding(s, d), OcrEmbedding(s, d)
        self.mmt = nn.ModuleList([blk() for _ in range(s["num_mmt_layers"])])
        self.ln_mmt = nn.LayerNorm(d, eps=1e-6)
        self.ln_prev_vocab, self.ln_prev_ocr, self.ln_emb = (nn.LayerNorm(d, eps=1e-6) for _ in range(3))
        self.pos, self.typ = nn.Embedding(s["ans_len"], d), nn.Embedding(2, d)
        self.head = nn.Linear(d, s["vocab"])
        self.pq, self.pk = nn.Linear(d, d), nn.Linear(d, d)
        self.drop = nn.Dropout(s["dropout"])

    def encode(self, b):
        """Returns ``(prefix (batch, P, d), prefix mask (batch, P), OCR embeddings, OCR mask)``."""
        q = self.question(b["question"])
        qm = b["question_mask"]
        for blk in self.text:
            q = blk(q, key_mask(qm))
        ocr = self.ocr(b)
        prefix = torch.cat([self.ln_text(q), self.regions(b["region_features"], b["region_boxes"]), ocr], 1)
        return prefix, torch.cat([qm, b["region_mask"], b["ocr_mask"]], 1), ocr, b["ocr_mask"]

    def decode(self, ids, prefix, pmask, ocr, ocr_mask):
        """The multimodal transformer over ``[prefix; previous outputs ids (batch, L)]`` -> ``(batch, L, V + N)``."""
        L, P = ids.shape[1], prefix.shape[1]
        is_ocr = ids >= self.V
        tok = self.ln_prev_vocab(self.head.weight[torch.where(is_ocr, 0, ids)])
        slot = (ids - self.V).clamp(0, self.N - 1)
        copied = torch.gather(self.ln_prev_ocr(ocr), 1, slot[..., None].expand(-1, -1, self.d))
        dec = torch.where(is_ocr[..., None], copied, tok)
        dec = self.drop(dec + self.ln_emb(self.pos(torch.arange(L))[None] + self.typ(is_ocr.long())))
        x = torch.cat([prefix, dec], 1)
        b = ids.shape[0]
        pm = pmask[:, None, :]
        top = torch.cat([pm.expand(b, P, P), torch.zeros(b, P, L, dtype=torch.bool)], 2)
        bottom = torch.cat([pm.expand(b, L, P), torch.ones(L, L, dtype=torch.bool).tril()[None].expand(b, L, L)], 2)
        mask = torch.cat([top, bottom], 1)[:, None]
        for blk in self.mmt:
            x = blk(x, mask)
        x = self.ln_mmt(x)
        h, z_ocr = x[:, P:], x[:, P - self.N:P]
        ptr = (self.pq(h) @ self.pk(z_ocr).transpose(1, 2) / math.sqrt(self.d)).masked_fill(~ocr_mask[:, None], NEG)
        return torch.cat([self.head(h), ptr], -1)

    def forward(self, b):
        return self.decode(b["decoder_in"], *self.encode(b))


MODELS = {"mlpag": MLPAG, "qumlag": QuMLAG, "m4c": M4C}


# ----------------------------------------------------------------------------------------------- inputs, loss
def random_batch(s: dict, batch: int, seed: int = 0) -> dict:
    """Random inputs with this project's layout and shapes (standard-normal features, all masks on except a
    random question length >= 2, decoder inputs BOS then random extended ids, random vocabulary targets)."""
    g = np.random.default_rng(seed)
    V, N, L, Lq, R, P = s["vocab"], s["num_ocr"], s["ans_len"], s["q_len"], s["num_regions"], s["ocr_pieces"]
    boxes = np.sort(g.random((batch, N, 2, 2)), axis=2).transpose(0, 1, 3, 2).reshape(batch, N, 4)
    b = dict(question=g.integers(4, V, (batch, Lq)),
             question_mask=np.arange(Lq)[None].repeat(batch, 0) < g.integers(2, Lq + 1, (batch, 1)),
             ocr_pieces=g.integers(4, V, (batch, N, P)), ocr_piece_mask=np.ones((batch, N, P), bool),
             ocr_phoc=(g.random((batch, N, s["phoc_dim"])) < 0.1).astype(np.float32), ocr_boxes=boxes,
             ocr_mask=np.ones((batch, N), bool), region_features=g.standard_normal((batch, R, s["region_dim"])),
             region_boxes=np.tile(np.array([0.1, 0.1, 0.5, 0.5]), (batch, R, 1)),
             region_mask=np.ones((batch, R), bool), decoder_in=g.integers(4, V + N, (batch, L)),
             targets=g.integers(4, V, (batch, L)))
    b["decoder_in"][:, 0] = BOS
    for k, dim in s["ocr_extra"].items():
        b[k] = g.standard_normal((batch, N, dim))
    out = {}
    for k, v in b.items():
        t = torch.from_numpy(np.ascontiguousarray(v))
        out[k] = t.float() if t.is_floating_point() else (t if t.dtype == torch.bool else t.long())
    return out


def loss_fn(name: str, logits, targets):
    """Softmax cross-entropy over ``V + N`` (MLPAG, QuMLAG), M4C's multi-label BCE (summed over units, mean
    over steps). ``logits`` ``(batch, L, V + N)``, ``targets`` ``(batch, L)`` piece ids."""
    if name == "m4c":
        pos = F.one_hot(targets, logits.shape[-1]).float()
        return F.binary_cross_entropy_with_logits(logits, pos, reduction="none").sum(-1).mean()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


# ----------------------------------------------------------------------------------------------- decoding
def _decoder(model, name):
    """``(encode(batch) -> state tuple, step(ids, *state) -> logits (batch, len, V + N))``."""
    if name == "m4c":
        return model.encode, model.decode
    return model.encode, model.decoder


@torch.no_grad()
def greedy(model, name: str, b: dict, max_len: int) -> torch.Tensor:
    """Greedy decoding, full decoder recompute per step (no KV cache). Returns ``(batch, max_len)`` ids."""
    enc, dec = _decoder(model, name)
    state = enc(b)
    bsz = b["question"].shape[0]
    ids = torch.full((bsz, 1), BOS, dtype=torch.long)
    done = torch.zeros(bsz, dtype=torch.bool)
    for _ in range(max_len):
        logits = dec(ids, *state)[:, -1]
        logits[:, [PAD, UNK, BOS]] = NEG
        nxt = logits.argmax(-1).masked_fill(done, PAD)
        ids = torch.cat([ids, nxt[:, None]], 1)
        done |= nxt == EOS
        if bool(done.all()):
            break
    return ids[:, 1:]


@torch.no_grad()
def beam(model, name: str, b: dict, max_len: int, k: int = 3) -> torch.Tensor:
    """Beam search of width ``k`` (sum of log-probabilities, no length penalty), full decoder recompute per
    step over the ``batch * k`` prefixes (no KV cache). Returns the best beam's ids ``(batch, max_len)``."""
    enc, dec = _decoder(model, name)
    state = [t.repeat_interleave(k, 0) for t in enc(b)]
    bsz = b["question"].shape[0]
    ids = torch.full((bsz * k, 1), BOS, dtype=torch.long)
    scores = torch.full((bsz, k), NEG)
    scores[:, 0] = 0.0
    done = torch.zeros(bsz * k, dtype=torch.bool)
    for _ in range(max_len):
        logp = F.log_softmax(dec(ids, *state)[:, -1], -1)
        logp[:, [PAD, UNK, BOS]] = NEG
        ended = torch.full_like(logp, NEG)
        ended[:, PAD] = 0.0
        logp = torch.where(done[:, None], ended, logp)  # a finished beam only extends by PAD, at no cost
        width = logp.shape[-1]
        total = (scores[..., None] + logp.view(bsz, k, width)).view(bsz, k * width)
        scores, flat = total.topk(k, -1)
        src = (flat // width + torch.arange(bsz)[:, None] * k).view(-1)
        nxt = (flat % width).view(-1)
        ids = torch.cat([ids[src], nxt[:, None]], 1)
        done = done[src] | (nxt == EOS)
        if bool(done.all()):
            break
    return ids.view(bsz, k, -1)[:, 0, 1:]


# ----------------------------------------------------------------------------------------------- timing
def matmul_peak(n: int, repeats: int = 10) -> dict:
    """Median FLOP/s of a float32 ``(n, n) @ (n, n)`` ``torch.mm`` after two warm-up products."""
    a, c = torch.randn(n, n), torch.randn(n, n)
    for _ in range(2):
        torch.mm(a, c)
    secs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, c)
        secs.append(time.perf_counter() - t0)
    s = statistics.median(secs)
    return {"n": n, "seconds_median": s, "flops_per_s": 2.0 * n ** 3 / s}


def count_flops(fn) -> int:
    """FLOPs of the matrix products (``mm``/``bmm``/``addmm``/attention, 2 per multiply-add) of one call of
    ``fn``, by ``torch.utils.flop_counter.FlopCounterMode`` (load-independent; elementwise work not counted)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def timed(fn, repeats: int) -> tuple[list[float], object]:
    """``([seconds of each of repeats calls of fn], the last call's result)``."""
    secs, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        secs.append(time.perf_counter() - t0)
    return secs, out


def run(args) -> dict:
    """One measurement in this process: train (``--steps`` timed steps after one warm-up step) or decode
    (``--decode_repeats`` timed calls after ``--decode_warmup`` untimed ones); then the matmul peak."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    s = json.loads(args.shapes)
    model = MODELS[args.model](s)
    res = {"framework": "torch", "torch": torch.__version__, "threads": torch.get_num_threads(),
           "model": args.model, "mode": args.mode,
           "num_params": sum(p.numel() for p in model.parameters())}
    if args.mode == "train":
        bsz = s["batch"]
        b = random_batch(s, bsz)
        model.train()
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)

        def step():
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(args.model, model(b), b["targets"])
            loss.backward()
            if s.get("grad_clip_norm", 0) > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), s["grad_clip_norm"])
            opt.step()
            return float(loss.detach())

        if args.count_flops:
            res["matmul_flops_per_example"] = count_flops(step) / bsz
        step()
        secs, loss = timed(step, args.steps)
        med = statistics.median(secs)
        res.update(batch=bsz, step_s_median=med, step_s_all=secs, examples_per_s=bsz / med,
                   loss_finite=bool(np.isfinite(loss)))
    else:
        bsz = args.decode_batch or s["batch"]
        b = random_batch(s, bsz)
        model.eval()
        method = "beam" if args.model == "qumlag" else "greedy"
        fn = (lambda: beam(model, args.model, b, s["ans_len"], k=3)) if method == "beam" else (
            lambda: greedy(model, args.model, b, s["ans_len"]))
        if args.count_flops:
            res["matmul_flops_per_answer"] = count_flops(fn) / bsz
        for _ in range(args.decode_warmup):  # torch's first calls create its kernels/primitives for the shapes
            fn()
        secs, ids = timed(fn, args.decode_repeats)
        med = statistics.median(secs)
        res.update(batch=bsz, method=method, beam_size=3 if method == "beam" else 1, steps=int(ids.shape[1]),
                   seconds_median=med, seconds_all=secs, answers_per_s=bsz / med)
    res["matmul_peak"] = matmul_peak(args.matmul_n)
    return res


def main(argv=None) -> dict:
    """Parses flags, runs one measurement, prints its JSON object."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, choices=sorted(MODELS))
    p.add_argument("--mode", required=True, choices=("train", "decode"))
    p.add_argument("--shapes", required=True, help="JSON object of sizes (written by benchmarks/vs_reference.py)")
    p.add_argument("--steps", type=int, default=2, help="timed train steps (median), after one warm-up step")
    p.add_argument("--decode_batch", type=int, default=None, help="decode batch (default: the shapes' batch)")
    p.add_argument("--decode_repeats", type=int, default=1, help="timed decode calls (median)")
    p.add_argument("--decode_warmup", type=int, default=1, help="untimed decode calls first")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--matmul_n", type=int, default=2048)
    p.add_argument("--count_flops", action="store_true",
                   help="also count the matrix-product FLOPs of one step / decode call (torch.utils.flop_counter)")
    args = p.parse_args(argv)
    res = run(args)
    res["machine"] = {"platform": platform.platform(), "cpu_count": os.cpu_count()}
    print(json.dumps(res), flush=True)
    return res


if __name__ == "__main__":
    main(sys.argv[1:])
