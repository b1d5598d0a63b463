"""A run's work after the load, in one child process so the measuring process never
loads the analysis stack: finalize (records.parquet, summary.json, run.json), the
report, the baseline check. ``python -m tokrate.finish`` is the child; child.py is the
protocol both processes speak (the parent imports only that module and baseline_ref).
"""
