"""A run's work after the load: finalizing the run folder and checking a ``--baseline``,
in a child process so the measuring process never loads the analysis stack.
"""
