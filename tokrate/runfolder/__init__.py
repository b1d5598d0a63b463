"""The run folder: every file format a run writes (records, run.json, summary.json,
capacity.json, server metrics), each as one frozen type with one reader, and the store
that writes them.
"""
