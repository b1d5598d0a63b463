"""How long `tokrate history` takes over 200 run folders (not a test; prints a table).

Builds 200 synthetic run folders (two tiers, 30 requests each, a planted 30% slowdown
of sim-70b from run 150 on) in a temporary folder, then times load_history and
build_history (charts, HTML, table, CSV) and prints where the change was marked.

    .venv/bin/python benchmarks/history_200.py [--runs 200]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from helpers.runfolders import make_records, summary_of, write_run

from tokrate.analysis.history import load_history
from tokrate.report.history_pages import build_history


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    change_at = args.runs * 3 // 4
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        for i in range(args.runs):
            rid = f"run-{i:03d}"
            recs = make_records(
                rid, seed=i, n=30, slow={"sim-70b": 1.3} if i >= change_at else None
            )
            stamp = f"2026-{1 + i // 600:02d}-{1 + (i // 24) % 25:02d}T{i % 24:02d}:00:00Z"
            write_run(root, rid, recs, started_at=stamp, summary=summary_of(rid, recs))
        t1 = time.perf_counter()
        history = load_history(root)
        t2 = time.perf_counter()
        out, _ = build_history(root)
        t3 = time.perf_counter()
        marked = history.changes.filter(history.changes["run_id"] == f"run-{change_at:03d}")
        print(f"{'step':<28}{'seconds':>10}")
        print(f"{'write synthetic folders':<28}{t1 - t0:>10.2f}")
        print(f"{'load_history (read+bands)':<28}{t2 - t1:>10.2f}")
        print(f"{'build_history (all output)':<28}{t3 - t2:>10.2f}")
        print(f"runs read: {history.runs}; changes marked: {history.changes.height}")
        print(f"at the planted change (run-{change_at:03d}):")
        for row in marked.iter_rows(named=True):
            print(f"  {row['model']} {row['metric']}: {row['change']}")
        print(f"output: {out} (deleted on exit)")


if __name__ == "__main__":
    main()
