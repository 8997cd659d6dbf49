"""Dataset analysis: the OpenViVQA paper's §3 statistics, Fleiss' kappa and a guideline checker.

Modules:

* :mod:`.records`: the :class:`~.records.QA` record and readers (a built TFDS dataset through the training
  data source, a release JSON file, ViVQA's CSV).
* :mod:`.stats`: per-split statistics (paper §3.3.1, Table 2, Figures 4-5), OCR coverage.
* :mod:`.linguistic`: the word / phrase / sentence level of a text (paper §3.3.2, Table 4), by a stated
  heuristic (no Vietnamese dependency parser ships inside a PyPI package).
* :mod:`.kappa`: Fleiss' kappa (paper eq. 2-4; Fleiss 1971) and percent agreement from an agreement file.
* :mod:`.guideline`: one rule per row of the paper's Table 1, plus the price form of §3.2.4.
* :mod:`.figures`: PNG figures (length histograms, Text/Non-text split, linguistic levels).

The command line is :mod:`openvivqa_jax.analyze`.
"""

from openvivqa_jax.analysis.records import AnalysisInputError, EmptySplitError, QA

__all__ = ["AnalysisInputError", "EmptySplitError", "QA"]
