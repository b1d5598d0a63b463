"""The lean renderers: text and tables drawn from typed run-folder documents with rich
only, never polars, numpy or matplotlib, so the process that measured a run can print
them (the lean-wall contract in pyproject.toml).

:mod:`.run_tables` draws what ``tokrate run`` prints (the summary and capacity tables),
:mod:`.comparison_text` a comparison (terminal table, markdown, JSON, verdict line),
:mod:`.quality_text` the answer-quality table, :mod:`.tier_text` the tier pick in words
and :mod:`.stream_words` what is said of bunched streams; summary.md and report.html use
the same words.
"""
