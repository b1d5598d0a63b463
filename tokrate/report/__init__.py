"""The report: numbers to bytes (charts, report.html, summary.md, the terminal tables).

``build_report`` (:mod:`tokrate.report.build`) turns stored runs into report.html,
summary.md and charts/. :mod:`tokrate.report.terminal` holds the lean renderers: the
tables ``tokrate run`` and ``tokrate compare`` print and the words the report shares,
drawn without polars, numpy or matplotlib, so the process that measured a run can
import them (the lean-wall contract in pyproject.toml). Importing this package loads
nothing.
"""
