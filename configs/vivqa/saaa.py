"""SAAA (Kazemi & Elqursh 2017, "Show, Ask, Attend, and Answer"), a classifier over the top-K training
answers, on ViVQA (Tran et al., PACLIC 2021), scored with exact match.

Usage (see configs/vivqa/mlpag.py for the data layout)::

    python -m openvivqa_jax.main --config configs/vivqa/saaa.py --workdir runs/vivqa_saaa \
        --config.data.manual_dir=~/data/vivqa

Data, splits (``train[:90%]`` / ``train[90%:]`` / ``test``), metrics and best metric (EM) are
configs/vivqa/mlpag.py's; the model is configs/openvivqa/saaa.py's ``images`` variant (LSTM 1024, two
glimpses of stacked attention over CNN grid features, K = 3000 answers, cut to the number of distinct
training answers). Classification suits ViVQA: its answers are short and repeat (colours, counts, object
names), so a closed answer list covers most test answers.
"""

import importlib.util
import os

import ml_collections


def _load_module(relpath: str):
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), relpath)
    spec = importlib.util.spec_from_file_location("configs_" + relpath.replace("/", "_")[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def get_config() -> ml_collections.ConfigDict:
    """Returns the ViVQA SAAA config."""
    c = _load_module("openvivqa/saaa.py").get_config("images")
    return _load_module("vivqa/mlpag.py").vivqa_data(c)
