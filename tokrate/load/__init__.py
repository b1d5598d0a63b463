"""The measuring process: ``run_benchmark``'s pipeline (run.py: prepare, measure and
finish, each a module; the confirmation of a regression), the load plan, live output,
stop signals, capacity search, scraping, the worker backends and, in :mod:`.worker`,
what runs in each worker (engine, sender, events, loop lag, stopping).

Nothing here imports polars, numpy or matplotlib (``tests/processes/test_lean_process.py``): the
measuring process's memory and CPU stay the load's.
"""
