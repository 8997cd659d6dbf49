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

import ml_collections

from openvivqa_jax.config_files import config_module, load_config


def get_config() -> ml_collections.ConfigDict:
    """Returns the ViVQA SAAA config."""
    c = load_config("../openvivqa/saaa.py", "images", relative_to=__file__)
    return config_module("mlpag.py", relative_to=__file__).vivqa_data(c)
