"""Keras model definitions used by tfmp's scripts, tests and benchmarks."""
