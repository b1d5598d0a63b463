"""What a run sends: prompt sources (files, bundled sets, traces, generated workloads),
token counting, model sizes and the endpoint x model targets.

Nothing here measures, and nothing here imports polars: the measuring process loads
these modules.
"""
