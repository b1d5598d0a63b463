"""A comparison as JUnit XML (``--junit PATH`` on ``tokrate run --baseline`` and
``tokrate compare``), so CI test reports (GitHub's test-report actions, GitLab's
``artifacts:reports:junit``) show what regressed.

One ``<testsuite name="tokrate compare">`` with one ``<testcase>`` per row of the
comparison: target × level × judged metric (``classname`` the target and level,
``name`` the metric). A regressed row has a ``<failure>`` whose message is the row's
verdict line (``sim-70b c=8 ttft_p95: 1.92x slower [1.80, 2.05], regressed``); an
inconclusive or not comparable row is ``<skipped>`` with the reason; every other row
passes. A night with no comparison (the first, before any ``latest-good``) writes the
same document with no testcase and the reason as its ``verdict`` property
(:func:`junit_without_comparison`), so a CI step that uploads the file never finds it
missing. Built with the standard library's ElementTree, which escapes every name and
message (target labels come from users and servers). Pure: returns bytes.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from tokrate.report.terminal.comparison_text import describe_change, headline
from tokrate.runfolder.comparison import Comparison, MetricResult

__all__ = ["junit_without_comparison", "junit_xml"]


def _verdict_line(r: MetricResult) -> str:
    return f"{r.label} {r.metric}: {describe_change(r)}, {r.verdict}"


def _classname(r: MetricResult) -> str:
    """Target and level, as the comparison names them (``sim-70b c=8``)."""
    return r.label if r.scenario in r.label else f"{r.label} {r.scenario}"


def _suites(verdict: str, tests: int, failures: int, skipped: int) -> tuple[ET.Element, ET.Element]:
    """The ``<testsuites>`` root and its one ``<testsuite>``, with the verdict property."""
    counts = {"tests": str(tests), "failures": str(failures), "skipped": str(skipped)}
    suites = ET.Element("testsuites", {"name": "tokrate", **counts, "errors": "0"})
    suite = ET.SubElement(suites, "testsuite", {"name": "tokrate compare", **counts, "errors": "0"})
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="verdict", value=verdict)
    return suites, suite


def _document(suites: ET.Element) -> bytes:
    ET.indent(suites)
    document: bytes = ET.tostring(suites, encoding="utf-8", xml_declaration=True)
    return document + b"\n"


def junit_without_comparison(reason: str) -> bytes:
    """The JUnit XML document of a run that was not compared (``reason``: the baseline
    line, e.g. no baseline run yet): no testcase, the reason as the verdict property."""
    suites, _ = _suites(reason, 0, 0, 0)
    return _document(suites)


def junit_xml(c: Comparison) -> bytes:
    """The JUnit XML document of ``c`` (module doc), UTF-8 with an XML declaration."""
    rows = list(c.results)
    failures = sum(1 for r in rows if r.verdict == "regressed")
    skipped = sum(1 for r in rows if r.verdict in ("inconclusive", "not_comparable"))
    suites, suite = _suites(headline(c), len(rows), failures, skipped)
    for r in rows:
        case = ET.SubElement(suite, "testcase", classname=_classname(r), name=r.metric, time="0")
        if r.verdict == "regressed":
            line = _verdict_line(r)
            failure = ET.SubElement(case, "failure", message=line, type="regressed")
            threshold = r.threshold if r.threshold is not None else "none"
            failure.text = (
                f"{line}\nbaseline {r.baseline} -> current {r.current} ({r.unit});"
                f" threshold {threshold}"
            )
        elif r.verdict in ("inconclusive", "not_comparable"):
            reason = r.reason or r.verdict.replace("_", " ")
            ET.SubElement(case, "skipped", message=f"{r.verdict.replace('_', ' ')}: {reason}")
    return _document(suites)
