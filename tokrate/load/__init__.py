"""The measuring process: ``run_benchmark``'s pipeline, the load plan, live progress,
stop signals, capacity search, scraping, the worker backends and, in :mod:`.worker`,
what runs in each worker (engine, sender, events, loop lag, stopping).

Nothing here imports polars, numpy or matplotlib (``tests/processes/test_lean_process.py``): the
measuring process's memory and CPU stay the load's.
"""
