"""``data.train_kinds``: training on the questions of some template kinds only (:func:`pipeline.kind_subset`,
the subset source of :func:`pipeline.train_iterator`), and ``data.train_kind_weights``: oversampling kinds by
repetition (:func:`pipeline.kind_weighted_indices`), with clear errors for datasets without kinds, for kinds that
a split does not have and for a malformed weights string."""

from __future__ import annotations

import grain
import numpy as np
import pytest

from openvivqa_jax.config_check import ConfigError, check_config, parse_kind_weights
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


def test_parse_kind_weights_reads_kind_equals_whole_number():
    assert parse_kind_weights("") == {}
    assert parse_kind_weights(" colour=4, count = 3 ,position=0,") == {"colour": 4, "count": 3, "position": 0}


@pytest.mark.parametrize("spec,what", [("colour:4", "item 'colour:4' is not kind=weight"),
                                       ("colour=-1", "item 'colour=-1' is not kind=weight"),
                                       ("colour=1.5", "item 'colour=1.5' is not kind=weight"),
                                       ("=2", "item '=2' is not kind=weight"),
                                       ("colour=2,colour=3", "names 'colour' twice")])
def test_parse_kind_weights_refuses_bad_items_naming_them(spec, what):
    with pytest.raises(ConfigError) as e:
        parse_kind_weights(spec)
    msg = str(e.value)
    assert msg.startswith(f"config value data.train_kind_weights={spec!r}") and what in msg, msg
    assert msg.endswith("(set it with --config.data.train_kind_weights=...)") and "\n" not in msg


def test_check_config_refuses_bad_kind_weights_before_anything_is_built():
    from conftest import load_config

    cfg = load_config("configs/tiny.py")
    cfg.data.train_kind_weights = "colour=4,count=3"
    check_config(cfg)
    cfg.data.train_kind_weights = "colour=four"
    with pytest.raises(ConfigError, match="item 'colour=four' is not kind=weight"):
        check_config(cfg)


def test_kind_weighted_indices_repeat_each_question_by_its_kind_weight():
    kinds = ["name", "colour", "count", "colour", "position"]
    recs = [_rec(i, k) for i, k in enumerate(kinds)]
    out = pipeline.kind_weighted_indices(recs, {"colour": 3, "position": 0})
    # name 1, colour 3 each, count 1 (not named), position left out.
    assert out == [0, 1, 1, 1, 2, 3, 3, 3]
    # Shares of an epoch: colour 6 of 8 questions.
    assert sum(1 for i in out if kinds[i] == "colour") / len(out) == 0.75


def test_kind_weighted_indices_errors_name_the_split_and_the_kinds():
    recs = [_rec(0, "name"), _rec(1, "colour")]
    with pytest.raises(pipeline.DatasetError, match=r"syn/train: data.train_kind_weights names \['color'\], not "
                       r"among the split's kinds \['colour', 'name'\]"):
        pipeline.kind_weighted_indices(recs, {"color": 2}, "syn/train")
    with pytest.raises(pipeline.DatasetError, match="vivqa/train: data.train_kind_weights .* has none"):
        pipeline.kind_weighted_indices([_rec(0, "")], {"colour": 2}, "vivqa/train")
    with pytest.raises(pipeline.DatasetError, match="syn/train: data.train_kind_weights .* leaves no training"):
        pipeline.kind_weighted_indices(recs, {"colour": 0, "name": 0}, "syn/train")


def test_weighted_stream_visits_each_question_as_often_as_its_weight():
    """One epoch of the shuffled stream over the weighted indices holds every copy once: the counts per source
    example equal the weights (the grain shuffle is a permutation of the indices)."""
    kinds = ["name", "colour", "count", "colour", "position", "name"]
    recs = [_rec(i, k) for i, k in enumerate(kinds)]
    idx = pipeline.kind_weighted_indices(recs, {"colour": 4, "count": 2})
    src = pipeline._IndexedSource([{"id": i} for i in range(len(kinds))], idx)
    ds = grain.MapDataset.source(src).seed(3).shuffle()
    seen = [ds[i][1] for i in range(len(ds))]
    assert sorted(seen) == sorted(idx)
    assert {i: seen.count(i) for i in set(seen)} == {0: 1, 1: 4, 2: 2, 3: 4, 4: 1, 5: 1}
