"""Numbers over stored runs: metrics, statistics, buffering, comparability, regression
verdicts and history. Pure functions over what the run folder holds; nothing here
measures or draws.
"""
