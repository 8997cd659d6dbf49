"""TFDS dataset builders for openvivqa_jax (one package per dataset, TFDS folder convention).

Every VQA builder yields the common feature schema of :mod:`tfds_builders.common`, so that every
model runs on every dataset. Importing a builder package registers it with TFDS.
"""
