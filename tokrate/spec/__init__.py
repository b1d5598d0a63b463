"""Frozen run specifications.

A :class:`RunSpec` is everything a benchmark run needs, resolved and validated: it is
built from a TOML file (:func:`~tokrate.spec.config_file.load_spec`) with command-line overrides applied on top,
or directly in Python. Nothing below the CLI ever sees argv. Validation errors are
:class:`~tokrate.errors.ConfigError` with a one-line message naming the file and key.
The package re-exports nothing: each name has one home. The dataclasses live in
:mod:`tokrate.spec.types`, loading (:func:`~tokrate.spec.config_file.load_spec`) in
:mod:`tokrate.spec.config_file`, and what ``tokrate run``'s command line adds to a
config in :mod:`tokrate.spec.command_line`.
"""
