"""Test helpers, one package, imported as ``from helpers.<module> import ...``:

- :mod:`helpers.runfolders`: seeded synthetic run folders (compare, history, report);
- :mod:`helpers.hostile_server`: a misbehaving HTTP server on 127.0.0.1;
- :mod:`helpers.documents`: typed run.json / summary.json from the dicts tests write.
"""
