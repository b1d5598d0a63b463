"""The measuring process: ``run_benchmark``'s pipeline, the load plan, the engine and its
sender, live progress, stop signals, capacity search and the worker backends.

Nothing here imports polars, numpy or matplotlib (``tests/processes/test_lean_process.py``): the
measuring process's memory and CPU stay the load's.
"""
