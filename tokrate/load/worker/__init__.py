"""The worker side of a load: what runs in each worker (a thread, a process or a Ray
actor) on its shard of the plan.

:mod:`.engine` runs a worker's scenarios (``run_worker``), :mod:`.sender` sends one
planned request and builds its record, :mod:`.settings` is what a worker is given,
:mod:`.events` what it emits to the driver, :mod:`.looplag` watches its event loop and
:mod:`.stopping` is the stop flag both sides share. Nothing here imports the driver's
modules of load/ (the layers contract inside load/ in pyproject.toml).
"""
