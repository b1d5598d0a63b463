"""A run's work that needs polars, in child processes, so the measuring process never
loads the analysis stack: after the load, one child finalizes (records.parquet,
server_metrics.parquet, summary.json, run.json), builds the report and checks the
baseline (``python -m tokrate.finish``; child.py is the protocol both processes speak);
during a capacity search, one child judges the probes' records
(``python -m tokrate.finish.probe_judge``; probe_judge_child.py is its protocol). The
measuring process imports only child, baseline_ref and probe_judge_child.
"""
