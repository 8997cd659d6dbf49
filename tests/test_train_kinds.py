"""``data.train_kinds``: training on the questions of some template kinds only (:func:`pipeline.kind_subset`,
the subset source of :func:`pipeline.train_iterator`), with clear errors for datasets without kinds and for
kinds that a split does not have."""

from __future__ import annotations

import numpy as np
import pytest

from openvivqa_jax.data import pipeline


def _rec(i: int, kind: str) -> pipeline.Record:
    return pipeline.Record(index=i, question_id=f"q{i}", image_id="img", question="q ?", answers=["a"], qa_type=0,
                           ocr_texts=[], ocr_boxes=np.zeros((0, 4), np.float32), kind=kind)


def test_kind_subset_keeps_the_named_kinds_in_split_order():
    kinds = ["name", "colour", "count", "colour", "position", "colour", "count"]
    recs = [_rec(i, k) for i, k in enumerate(kinds)]
    assert pipeline.kind_subset(recs, ("colour",)) == [1, 3, 5]
    assert pipeline.kind_subset(recs, ("count", "colour")) == [1, 2, 3, 5, 6]


def test_kind_subset_errors_name_the_split_and_the_kinds():
    recs = [_rec(0, "name"), _rec(1, "colour")]
    with pytest.raises(pipeline.DatasetError, match=r"syn/train: data.train_kinds names \['color'\], not among the "
                       r"split's kinds \['colour', 'name'\]"):
        pipeline.kind_subset(recs, ("color",), "syn/train")
    with pytest.raises(pipeline.DatasetError, match="vivqa/train: data.train_kinds .* has none"):
        pipeline.kind_subset([_rec(0, ""), _rec(1, "")], ("colour",), "vivqa/train")


def test_indexed_source_subset_reads_only_those_examples_with_their_own_index():
    source = [{"id": i} for i in range(10)]
    full = pipeline._IndexedSource(source)
    assert len(full) == 10 and full[4] == ({"id": 4}, 4)
    sub = pipeline._IndexedSource(source, [7, 2, 9])
    assert len(sub) == 3
    assert [sub[i] for i in range(3)] == [({"id": 7}, 7), ({"id": 2}, 2), ({"id": 9}, 9)]
    with pytest.raises(IndexError):
        sub[3]


def test_subset_smaller_than_a_batch_is_refused_with_its_size():
    with pytest.raises(pipeline.DatasetError, match="syn/train: 3 examples is fewer than one global batch"):
        pipeline.train_iterator([{}] * 10, None, batch_size=4, seed=0, source_name="syn/train", indices=[1, 2, 3])
