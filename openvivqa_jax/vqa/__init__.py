"""Answer generation (and the classifiers of the comparison), the package's main task: config ``task = "vqa"`` or
none, ``python -m openvivqa_jax.main --config configs/default.py --workdir DIR``.

Laid out as every task of the package (config, model, loop, evaluation):

- :mod:`.config`: the plan of ``config.evals`` (what runs after training), checked with the other config values;
- the models are :mod:`openvivqa_jax.models`; :mod:`.experiment`: a run's fixed parts (train-state spec, text
  assets of :mod:`.assets`, the dataset's splits); :mod:`.decoding`: greedy and beam search;
- :mod:`.train`: the train loop; :mod:`.evals`: the evaluation it calls down into (decode a split, score, print
  and write the tables), and ``--mode evaluate``;
- :mod:`.inference`, :mod:`.workdir`, :mod:`.report`: answering from a trained run (``predict``).

Nothing is imported here: :mod:`openvivqa_jax.config_check` reads :mod:`.config` before JAX is imported.
"""
