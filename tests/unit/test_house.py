"""The shape of the house, checked: what docs/architecture.md promises about where
things live that no linter checks for us."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_test_module_imports_another_test_module() -> None:
    """What two test modules share lives in tests/helpers, so running one test file
    never depends on another's name or on the order pytest collects them."""
    offenders = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            if any(name.split(".")[-1].startswith("test_") for name in names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_the_root_of_tokrate_holds_only_leaves() -> None:
    """Everything with a stage lives in the folder of its stage; the root keeps the
    package, its entry point and the leaves every stage shares (at most 10 modules)."""
    modules = sorted(p.name for p in (ROOT / "tokrate").glob("*.py"))
    assert modules == [
        "__init__.py",
        "__main__.py",
        "_version.py",
        "errors.py",
        "fileio.py",
        "hardware.py",
        "physics.py",
        "redact.py",
        "textfmt.py",
        "tomlfile.py",
    ]


def test_no_package_below_tokrate_re_exports_a_name() -> None:
    """Each name has one home: a package's __init__ lists in ``__all__`` only what it
    defines itself, never a name it imports (only ``tokrate`` itself, the public API,
    gathers names). The stage packages that once did (client, sim, spec) bind nothing."""
    offenders = []
    for init in sorted((ROOT / "tokrate").rglob("__init__.py")):
        if init.parent == ROOT / "tokrate":
            continue
        tree = ast.parse(init.read_text(encoding="utf-8"))
        imported = {
            (alias.asname or alias.name)
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tokrate")
            for alias in node.names
        }
        listed: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
            ):
                listed |= {
                    elt.value for elt in ast.walk(node.value) if isinstance(elt, ast.Constant)
                }
        offenders += [f"{init.relative_to(ROOT)}: {name}" for name in sorted(imported & listed)]
    assert offenders == []
    for package in ("client", "sim", "spec"):
        body = ast.parse((ROOT / "tokrate" / package / "__init__.py").read_text()).body
        assert [type(node) for node in body] == [ast.Expr], package  # the docstring alone


#: The modules of tokrate/ that write files, and what they write. A run folder's files
#: have one writer each: the store (run.json, records.jsonl, summary.json,
#: capacity.json, comparison.json/.md, the latest-good pointer), the loaded run
#: (records.parquet), the server-metrics formats (server_metrics.jsonl while the run
#: measures, server_metrics.parquet after), the report
#: (report.html, summary.md, charts/). The simulator's truth log is not a run folder's.
_WRITERS = {
    "tokrate/runfolder/store.py": "a run folder's files (module doc)",
    "tokrate/runfolder/loaded_run.py": "records.parquet",
    "tokrate/runfolder/server_metrics.py": "server_metrics.parquet",
    "tokrate/runfolder/server_samples.py": "server_metrics.jsonl (the scraper's, lean)",
    "tokrate/runfolder/calibration.py": "tokrate calibrate --output FILE",
    "tokrate/report/build.py": "report.html, summary.md, charts/",
    "tokrate/report/history_pages.py": "tokrate history's pages (not a run folder)",
    "tokrate/spec/init_template.py": "tokrate init's config file",
    "tokrate/cli/_analysis_commands.py": "tokrate compare --output FILE, --junit FILE",
    "tokrate/cli/_run.py": "tokrate run --junit FILE, --metrics-file FILE",
}
_WRITE_CALLS = (
    "write_atomic",
    "write_atomic_with",
    "write_parquet",
    "write_text",
    "write_bytes",
    "write_csv",
)


def test_each_file_has_one_writer() -> None:
    """Only the modules of _WRITERS call a file-writing function (the simulator aside),
    so "where is a record written" has one answer per file."""
    writers = set()
    for path in sorted((ROOT / "tokrate").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("tokrate/sim/") or rel == "tokrate/fileio.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name in _WRITE_CALLS:
                    writers.add(rel)
    assert writers == set(_WRITERS)


#: Calls that open, create, rename or make a file or folder by path: only tokrate.fileio
#: makes them (issue 41: every file is created O_EXCL | O_NOFOLLOW under a random name
#: and renamed; nothing opens an existing path to write). ``mkdir`` of a new run folder
#: (RunStore, which refuses one that exists) and of the calibration's cache folder are
#: the two left outside, both on a path the user chose.
_FILE_CALLS = ("open", "replace", "rename", "write_text", "write_bytes", "mkdir", "fdopen")
#: Of those, the names other objects use too: only ``os.NAME`` (or the builtin) counts.
_OS_CALLS = ("open", "replace", "rename", "fdopen")
_FILE_CALLS_ALLOWED = {
    ("tokrate/runfolder/store.py", "mkdir"),
    ("tokrate/runfolder/calibration.py", "mkdir"),
}


def test_only_fileio_opens_files_to_write() -> None:
    offenders = []
    for path in sorted((ROOT / "tokrate").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "tokrate/fileio.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            owner = func.value if isinstance(func, ast.Attribute) else None
            if name in _OS_CALLS and not (
                (owner is None and name == "open")
                or (owner is not None and ast.unparse(owner) == "os")
            ):
                continue  # str.replace, dataclasses' replace, webbrowser.open: no file
            if name in _FILE_CALLS and (rel, name) not in _FILE_CALLS_ALLOWED:
                offenders.append(f"{rel}:{node.lineno} {name}")
    assert offenders == []


#: Calls that read a file by path. A run-folder file is read only through the guard
#: (tokrate.runfolder.files; issue 41: a FIFO or /dev/zero in a run folder hung or
#: exhausted report, compare and history): the parquet readers get the file the guard
#: opened. Left outside: the bundled prompt sets (package data) and calibrate's own
#: truth log in a folder it created.
_READ_CALLS = ("read_bytes", "read_text", "read_parquet", "read_parquet_schema", "scan_parquet")
_READ_CALLS_ALLOWED = {
    ("tokrate/spec/bundled.py", "read_bytes"),
    ("tokrate/load/calibrate.py", "read_bytes"),
    ("tokrate/runfolder/loaded_run.py", "read_parquet"),
    ("tokrate/runfolder/loaded_run.py", "read_parquet_schema"),
    ("tokrate/runfolder/server_metrics.py", "read_parquet"),
}


def test_run_folder_files_are_read_only_through_the_guard() -> None:
    offenders = []
    for path in sorted((ROOT / "tokrate").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("tokrate/sim/") or rel == "tokrate/fileio.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                name = node.func.attr
                if name in _READ_CALLS and (rel, name) not in _READ_CALLS_ALLOWED:
                    offenders.append(f"{rel}:{node.lineno} {name}")
    assert offenders == []
