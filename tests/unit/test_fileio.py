"""Files tokrate writes cannot be redirected, and files it reads back cannot hang or
exhaust it (issue 41, items 2 and 3): hostile run folders, made by hand here, as a CI
artifact from elsewhere could ship them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.synthetic import default_synthetic_tiers, synthetic_run

from tokrate import fileio
from tokrate.cli import main


def _old_temp_names(folder: Path, names: list[str], target: Path) -> list[Path]:
    """Symlinks to ``target`` under the temporary names the old write_atomic used for
    this process (``.NAME.<pid>.tmp``): it opened them with O_TRUNC and wrote through."""
    links = []
    for name in names:
        link = folder / f".{name}.{os.getpid()}.tmp"
        link.symlink_to(target)
        links.append(link)
    return links


def test_report_never_writes_through_planted_temp_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tokrate report` on a run folder that ships symlinks under the temporary names of
    every file it writes: the report is built, the link targets are untouched."""
    # One model: every file the report writes is written all the same.
    tiers = default_synthetic_tiers()[:1]
    run = synthetic_run(tmp_path / "run", tiers=tiers, concurrency=(1, 4), requests_per_level=6)
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious\n")
    (run / "charts").mkdir()
    links = _old_temp_names(run, ["report.html", "summary.md", "summary.json"], victim)
    charts = ["ttft_cdf.svg", "ttft_cdf.png", "throughput_vs_latency.svg"]
    links += _old_temp_names(run / "charts", charts, victim)
    assert main(["report", str(run), "--format", "svg"]) == 0, capsys.readouterr().err
    assert victim.read_bytes() == b"precious\n"
    assert (run / "report.html").read_bytes().startswith(b"<!DOCTYPE html>")
    assert all(link.is_symlink() for link in links)  # left alone, never renamed over


def test_a_planted_temp_name_is_skipped_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The random temporary name drawn first is a planted symlink (the draw is made
    predictable here): the create fails (O_EXCL | O_NOFOLLOW) and the next name is used."""
    draws = iter(["aaaa", "bbbb"])
    monkeypatch.setattr(fileio.secrets, "token_hex", lambda _n: next(draws))
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    (tmp_path / ".out.json.aaaa.tmp").symlink_to(victim)
    fileio.write_atomic(tmp_path / "out.json", b"{}")
    assert (tmp_path / "out.json").read_bytes() == b"{}"
    assert victim.read_bytes() == b"keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".out.json.aaaa.tmp",
        "out.json",
        "victim",
    ]


def test_a_symlink_at_the_target_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    (tmp_path / "run.json").symlink_to(victim)
    fileio.write_atomic(tmp_path / "run.json", b"new")
    assert not (tmp_path / "run.json").is_symlink()
    assert (tmp_path / "run.json").read_bytes() == b"new" and victim.read_bytes() == b"keep"


def test_a_failed_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    def fail(_f: object) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        fileio.write_atomic_with(tmp_path / "x.parquet", fail)
    assert list(tmp_path.iterdir()) == []


def test_create_new_refuses_an_existing_name_or_link(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileExistsError):
        fileio.create_new(tmp_path / "link")
    assert not (tmp_path / "nowhere").exists()
    fd = fileio.create_new(tmp_path / "records.jsonl")
    os.close(fd)
    with pytest.raises(FileExistsError):
        fileio.create_new(tmp_path / "records.jsonl")


def test_open_log_refuses_a_symlink_and_a_fifo(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        fileio.open_log(tmp_path / "link")
    assert not (tmp_path / "elsewhere").exists()
    os.mkfifo(tmp_path / "fifo")  # no reader: ENXIO at once, never a hang
    with pytest.raises((OSError, fileio.FileRefused)):
        fileio.open_log(tmp_path / "fifo")
    with fileio.open_log(tmp_path / "log.jsonl") as f:
        f.write(b"a\n")
    with fileio.open_log(tmp_path / "log.jsonl") as f:
        f.write(b"b\n")
    assert (tmp_path / "log.jsonl").read_bytes() == b"a\nb\n"


def test_read_regular_refuses_fifo_device_and_oversize(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(fileio.FileRefused, match="FIFO"):
        fileio.read_regular(tmp_path / "fifo", 1 << 20)
    (tmp_path / "zero").symlink_to("/dev/zero")
    with pytest.raises(fileio.FileRefused, match="character device"):
        fileio.read_regular(tmp_path / "zero", 1 << 20)
    (tmp_path / "big").write_bytes(b"x" * 2000)
    with pytest.raises(fileio.FileRefused, match="2,000 bytes, over the 1,000 bytes limit"):
        fileio.read_regular(tmp_path / "big", 1000)
    assert fileio.read_regular(tmp_path / "big", 2000) == b"x" * 2000
