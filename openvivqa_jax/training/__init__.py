"""What every trainer shares (answer generation, the span reader, the relevance encoder), below the tasks:

* :mod:`.state`: the train state, learning-rate schedules, optimizers and frozen parameters;
* :mod:`.checkpoints`: orbax checkpoint managers, resuming, restoring the parameters of a run;
* :mod:`.run_log`: ``metrics.jsonl`` and the means of the step metrics; :mod:`.tensorboard_writer`: TensorBoard
  scalars without TensorFlow;
* :mod:`.interrupts`: Ctrl-C and SIGTERM (a checkpoint, then one line);
* :mod:`.sharding`: the device mesh and the parameter shardings.

Nothing here imports a task.
"""
