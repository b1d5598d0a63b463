"""Test helpers, one package, imported as ``from helpers.<module> import ...``:

- :mod:`helpers.runfolders`: seeded synthetic run folders (compare, history, report);
- :mod:`helpers.hostile_server`: a misbehaving HTTP server on 127.0.0.1;
- :mod:`helpers.documents`: typed run.json / summary.json from the dicts tests write;
- :mod:`helpers.specs`: ``sim_spec(url, out, **load)``, the RunSpec of a small run
  against a loopback server or the embedded simulator (use it for every new run test);
- :mod:`helpers.workers`: what the worker-backend tests share (processes and Ray);
- :mod:`helpers.synthetic`: run folders whose records follow the bandwidth physics
  (``synthetic_run``), for the report's tests and benchmarks/report_million.py;
- :mod:`helpers.netns_cluster`: the multi-node Ray cluster in network namespaces
  (tests/cluster; ``skewed_clock/`` makes one of its nodes read a wrong wall clock).

No test module imports another test module; what two of them share lives here.
"""
