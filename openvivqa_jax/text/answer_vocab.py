"""The extended answer vocabulary: ``V`` SentencePiece pieces plus ``N`` OCR slots (docs/design.md §5).

Extended ids: ``[0, V)`` are pieces, ``V + j`` copies OCR token ``j`` (the dynamic pointer network's
output, M4C; MLPAG eq. 11-12).

Encoding an answer (whitespace words after normalization):

* a word equal to one or more OCR tokens becomes ONE copy step; its positive set is every matching
  OCR slot, plus the vocabulary piece when the word is a single piece;
* any other word becomes its pieces, one step each;
* an EOS step ends the answer.

The teacher-forced decoder input is ``[BOS] + steps[:-1]`` where a copy step feeds back the first
matching OCR slot (the model embeds it from that OCR token's features).

Decoding joins runs of pieces (:meth:`Tokenizer.decode_with_notes`) and copied OCR words with spaces.
A byte-fallback run cut by a copy step or by the end of the decode is dropped, not turned into U+FFFD;
what was dropped is counted (:class:`~openvivqa_jax.text.tokenizer.DecodeNotes`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from absl import logging

from openvivqa_jax.text.tokenizer import DecodeNotes, Tokenizer

__all__ = ["EncodedAnswer", "AnswerVocab", "word_provenance", "ocr_words"]


@dataclasses.dataclass
class EncodedAnswer:
    """One answer as fixed-shape training targets.

    Attributes:
      decoder_in: ``(max_len,)`` int32 extended ids fed to the decoder (BOS first, PAD after).
      target_vocab: ``(max_len,)`` int32 positive piece id per step, or -1 when no piece is positive.
      target_ocr: ``(max_len, num_ocr)`` bool, positive OCR slots per step.
      target_mask: ``(max_len,)`` bool, steps that count in the loss.
      truncated: the answer did not fit in ``max_len`` steps (EOS dropped).
      num_copy_steps: number of copy steps (answer words found among the OCR tokens).
    """

    decoder_in: np.ndarray
    target_vocab: np.ndarray
    target_ocr: np.ndarray
    target_mask: np.ndarray
    truncated: bool
    num_copy_steps: int


class AnswerVocab:
    """Encodes answers into extended-vocabulary steps and decodes predictions back to text.

    Args:
      tokenizer: the SentencePiece tokenizer (``V = tokenizer.vocab_size``).
      num_ocr: number of OCR slots ``N``.
      max_len: answer length in decoder steps, EOS included.
      allow_copy: False for models without a pointer network (FST, QuMLAG): every word becomes its
        pieces, so no step has only OCR slots as positives.
    """

    def __init__(self, tokenizer: Tokenizer, num_ocr: int, max_len: int, allow_copy: bool = True):
        self.tokenizer = tokenizer
        self.vocab_size = tokenizer.vocab_size
        self.num_ocr = num_ocr
        self.max_len = max_len
        self.size = self.vocab_size + num_ocr
        self.allow_copy = allow_copy

    def encode(self, answer: str, ocr_tokens: Sequence[str]) -> EncodedAnswer:
        """Encodes one normalized answer against the example's OCR tokens.

        Args:
          answer: normalized answer text.
          ocr_tokens: normalized OCR token texts in slot order (slots beyond ``num_ocr`` are ignored).

        Returns:
          The :class:`EncodedAnswer`.
        """
        tok = self.tokenizer
        V, N, L = self.vocab_size, self.num_ocr, self.max_len
        slots: dict[str, list[int]] = {}
        for j, t in enumerate(ocr_tokens[:N]):
            slots.setdefault(t, []).append(j)
        steps: list[tuple[int, list[int], int]] = []  # (vocab positive or -1, ocr positives, input id)
        num_copy = 0
        for word in answer.split():
            pieces = tok.encode(word)
            if self.allow_copy and word in slots:
                match = slots[word]
                vocab_pos = pieces[0] if len(pieces) == 1 else -1
                steps.append((vocab_pos, match, V + match[0]))
                num_copy += 1
            else:
                steps.extend((p, [], p) for p in pieces)
        steps.append((tok.eos_id, [], tok.eos_id))
        truncated = len(steps) > L
        steps = steps[:L]
        decoder_in = np.full((L,), tok.pad_id, np.int32)
        target_vocab = np.full((L,), -1, np.int32)
        target_ocr = np.zeros((L, N), bool)
        target_mask = np.zeros((L,), bool)
        decoder_in[0] = tok.bos_id
        for t, (vp, op, inp) in enumerate(steps):
            target_vocab[t] = vp
            if op:
                target_ocr[t, op] = True
            target_mask[t] = True
            if t + 1 < L:
                decoder_in[t + 1] = inp
        return EncodedAnswer(decoder_in, target_vocab, target_ocr, target_mask, truncated, num_copy)

    def decode(self, ids: Sequence[int], ocr_tokens: Sequence[str]) -> str:
        """Turns predicted extended ids into answer text (:meth:`decode_with_notes`; drops are logged)."""
        text, notes = self.decode_with_notes(ids, ocr_tokens)
        if notes:
            logging.warning("AnswerVocab.decode: %s", notes)
        return text

    def decode_with_notes(self, ids: Sequence[int], ocr_tokens: Sequence[str]) -> tuple[str, DecodeNotes]:
        """Turns predicted extended ids into answer text and says what was dropped.

        Stops at the first EOS. Piece runs are decoded by :meth:`Tokenizer.decode_with_notes` (incomplete
        byte-fallback runs and unknown pieces dropped and counted, no U+FFFD or control character); an
        OCR slot id becomes that token's text (an id pointing at an empty slot is skipped).

        Args:
          ids: extended ids, ``(steps,)``.
          ocr_tokens: the example's normalized OCR tokens.

        Returns:
          ``(answer, notes)``: the answer, words separated by single spaces, and the drop counts.
        """
        words: list[str] = []
        run: list[int] = []
        notes = DecodeNotes()
        V = self.vocab_size

        def flush() -> None:
            if run:
                text, n = self.tokenizer.decode_with_notes(run)
                words.append(text)
                notes.add(n)
                run.clear()

        for i in ids:
            i = int(i)
            if i == self.tokenizer.eos_id:
                break
            if i >= V:
                flush()
                j = i - V
                if j < len(ocr_tokens) and j < self.num_ocr:
                    words.append(ocr_tokens[j])
            elif i in (self.tokenizer.pad_id, self.tokenizer.bos_id):
                continue
            else:
                run.append(i)
        flush()
        return " ".join(" ".join(words).split()), notes

    def sources(self, ids: Sequence[int]) -> list[tuple[str, int]]:
        """Per decoded step, where it came from: ``("vocab", piece_id)`` or ``("ocr", slot)``.

        Stops at the first EOS; used by predict to show provenance.
        """
        out = []
        for i in ids:
            i = int(i)
            if i == self.tokenizer.eos_id:
                break
            out.append(("ocr", i - self.vocab_size) if i >= self.vocab_size else ("vocab", i))
        return out


def word_provenance(ids: Sequence[int], vocab: AnswerVocab, tokenizer: Tokenizer,
                    ocr_tokens: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Per answer word, where it came from.

    Steps come from :meth:`AnswerVocab.sources`: runs of vocabulary pieces are decoded by SentencePiece and
    split into words (each ``source="vocab"`` with its own piece ids: from the piece that starts it, ``"\u2581..."``,
    up to the next word's; every word of a run gets the whole run's ids when its pieces do not split at word
    starts, e.g. byte-fallback bytes); a copied OCR slot gives the token's
    word(s) (``source="ocr"``, ``ocr_index``, ``box``, ``score``, ``ocr_text``); a slot pointing at no token
    yields nothing, as :meth:`AnswerVocab.decode` skips it. Joining the words with spaces gives exactly
    :meth:`AnswerVocab.decode` of ``ids``.

    Args:
      ids: decoded extended ids ``(steps,)``.
      vocab: the :class:`~openvivqa_jax.text.answer_vocab.AnswerVocab`; tokenizer: its tokenizer.
      ocr_tokens: the example's OCR tokens in slot order (``{"text", "box", "score"}``).

    Returns:
      ``[{"word", "source", ...}]``; vocabulary words also carry ``in_ocr`` (the word equals an OCR token,
      yet was generated).
    """
    texts = {t["text"] for t in ocr_tokens}
    words: list[dict] = []
    run: list[int] = []

    def flush():
        if not run:
            return
        # Each word's own pieces: a word starts at a piece beginning with SentencePiece's "\u2581"; a group that
        # decodes to nothing (a lone "\u2581") joins the next one.
        groups: list[list[int]] = []
        for i in run:
            if not groups or (tokenizer.id_to_piece(i).startswith("\u2581") and tokenizer.decode(groups[-1]).strip()):
                groups.append([])
            groups[-1].append(i)
        per_group = [tokenizer.decode(g).split() for g in groups]
        whole = tokenizer.decode(list(run)).split()
        if [w for ws in per_group for w in ws] == whole:
            pairs = [(w, g) for ws, g in zip(per_group, groups) for w in ws]
        else:  # pieces that do not split at word starts (e.g. byte-fallback bytes): every word gets the run
            pairs = [(w, list(run)) for w in whole]
        for w, g in pairs:
            words.append({"word": w, "source": "vocab", "piece_ids": list(g), "in_ocr": w in texts})
        run.clear()

    for kind, value in vocab.sources(ids):
        if kind == "ocr":
            flush()
            j = int(value)
            if j < len(ocr_tokens) and j < vocab.num_ocr:
                words.extend(ocr_words(j, ocr_tokens[j]))
        elif value in (tokenizer.pad_id, tokenizer.bos_id):
            continue
        else:
            run.append(int(value))
    flush()
    return words


def ocr_words(index: int, token: Mapping[str, Any]) -> list[dict]:
    """The words of OCR token ``index`` (``{"text", "box", "score"}``) as copied answer words:
    ``[{"word", "source": "ocr", "ocr_index", "ocr_text", "box" (rounded to 4 digits), "score"}]``."""
    box = [round(float(v), 4) for v in token["box"]]
    return [{"word": w, "source": "ocr", "ocr_index": index, "ocr_text": token["text"], "box": box,
             "score": float(token.get("score", 1.0))} for w in token["text"].split()]
