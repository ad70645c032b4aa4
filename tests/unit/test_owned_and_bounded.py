"""Files the tool does not own, files written whole, every stop signal, bounds on what a server says
(tuner.private, tuner.cli.output, tuner.interrupts, tuner.bench.sse/accumulate, tuner.gate)."""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

import pandas as pd
import pytest

import tuner.sglang.server as server_mod
from tuner.bench.accumulate import StreamAccumulator
from tuner.bench.settings import Api
from tuner.bench.sse import SseParser, StreamLimit
from tuner.bench.types import ErrorClass
from tuner.bench.workload import RequestSpec
from tuner.cli.output import csv_safe, write_file
from tuner.cli.parallel import exit_code
from tuner.gate.checks import parse_reply
from tuner.interrupts import STOP_SIGNALS, Interrupts
from tuner.private import atomic_open, open_private, private_dir, read_regular, write_private

# -- modes: only what the tool created -----------------------------------------------------------


def test_an_existing_shared_folder_keeps_its_mode(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    private_dir(shared / "runs" / "study")
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777
    assert stat.S_IMODE((shared / "runs").stat().st_mode) == 0o700
    assert stat.S_IMODE((shared / "runs" / "study").stat().st_mode) == 0o700
    here = tmp_path / "here"
    here.mkdir(mode=0o755)
    here.chmod(0o755)
    private_dir(here)  # `log_dir: .`: the folder is the user's
    assert stat.S_IMODE(here.stat().st_mode) == 0o755


def test_an_existing_file_keeps_its_mode_and_a_fifo_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("old\n")
    log.chmod(0o644)
    with open_private(log) as fh:
        fh.write("new\n")
    assert stat.S_IMODE(log.stat().st_mode) == 0o644
    with open_private(tmp_path / "fresh.log") as fh:
        fh.write("x")
    assert stat.S_IMODE((tmp_path / "fresh.log").stat().st_mode) == 0o600
    os.mkfifo(tmp_path / "pipe.log")
    with pytest.raises(OSError):
        open_private(tmp_path / "pipe.log")  # a FIFO: refused at once (a reader-less one would block)


# -- files written whole ------------------------------------------------------------------------


def test_a_planted_symlink_is_never_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    target = tmp_path / "report.html"
    # every name a predictable temporary file could have had, planted
    for name in (f".report.{os.getpid()}.tmp.html", ".report.html.tmp", "report.html"):
        (tmp_path / name).symlink_to(victim)
    write_file(target, "<html>report</html>", "--html")
    assert victim.read_text() == "precious\n"
    assert target.read_text() == "<html>report</html>" and not target.is_symlink()


def test_a_failed_write_leaves_neither_a_partial_file_nor_a_temporary_one(tmp_path: Path) -> None:
    target = tmp_path / "front.csv"
    target.write_text("old,complete\n")
    with pytest.raises(KeyboardInterrupt), atomic_open(target) as fh:  # a stop in the middle of writing
        fh.write("new,par")
        raise KeyboardInterrupt
    assert target.read_text() == "old,complete\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["front.csv"]


def test_temporary_names_are_random_and_exclusive(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    with atomic_open(target) as first, atomic_open(target) as second:  # two writers at once
        first.write("1")
        second.write("2")
        temps = sorted(p.name for p in tmp_path.iterdir())
    assert len(temps) == 2 and all(t.startswith(".out.json.") and t.endswith(".tmp") for t in temps)
    assert target.read_text() == "1" and not [p for p in tmp_path.iterdir() if p.name != "out.json"]
    write_private(tmp_path / "secret.json", "{}")
    assert stat.S_IMODE((tmp_path / "secret.json").stat().st_mode) == 0o600


def test_only_regular_files_of_bounded_size_are_read(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="not a regular file"):
        read_regular(Path("/dev/zero"), 1024)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(OSError, match="not a regular file"):
        read_regular(tmp_path / "fifo", 1024)  # nobody writes to it: refused, not waited on
    big = tmp_path / "big"
    big.write_bytes(b"x" * 2048)
    with pytest.raises(OSError, match="larger than"):
        read_regular(big, 1024)
    assert read_regular(big, 4096) == b"x" * 2048


# -- CSV cells --------------------------------------------------------------------------------------


def test_csv_cells_that_start_like_a_formula_are_neutralised() -> None:
    frame = pd.DataFrame(
        {
            "chunked-prefill-size": ['=HYPERLINK("http://x","y")', "+1", "-2+3", "@SUM(A1)", "\tx", "4096"],
            "output_throughput": [1.0, -2.0, 3.0, 4.0, 5.0, 6.0],
            "=cmd|' /C calc'!A0": [1, 2, 3, 4, 5, 6],
        }
    )
    text = csv_safe(frame).to_csv(index=False)
    rows = text.splitlines()
    assert rows[0].startswith("chunked-prefill-size,output_throughput,'=cmd")
    cells = [r.split(",")[0] for r in rows[1:]]
    assert all(not c.lstrip('"').startswith(("=", "+", "-", "@", "\t")) for c in cells), cells
    assert "-2.0" in text and "4096" in text  # numbers stay numbers


# -- every stop signal --------------------------------------------------------------------------------


def test_every_stop_signal_is_handled_and_exits_128_plus_n() -> None:
    assert {signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2} <= set(STOP_SIGNALS)
    saved = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    stops = Interrupts()
    try:
        stops.install()
        for sig in STOP_SIGNALS:
            assert signal.getsignal(sig) == stops.handler, sig
        stops.handler(signal.SIGHUP, None)
        assert stops.exit_code() == 128 + signal.SIGHUP
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_a_parallel_run_counts_every_stop_signal_of_a_worker() -> None:
    assert exit_code([0, 128 + signal.SIGTERM], interrupted=False) == 130
    assert exit_code([0, 128 + signal.SIGHUP], interrupted=False) == 130
    assert exit_code([0, 1], interrupted=False) == 1


# -- what a server says, bounded -----------------------------------------------------------------------


def test_an_sse_event_without_its_end_is_cut_at_the_bound() -> None:
    parser = SseParser(max_event_bytes=1024)
    assert parser.feed(b"data: {}\n\n") == [b"{}"]
    with pytest.raises(StreamLimit, match="longer than 1,024 bytes"):
        for _ in range(10):
            parser.feed(b"data: " + b"x" * 200)


SPEC = RequestSpec(index=0, prompt="hi", input_tokens=2, output_tokens=16)


def _stream(usage: int) -> StreamAccumulator:
    acc = StreamAccumulator(Api.COMPLETIONS)
    for t in range(4):
        acc.add(b'{"choices": [{"text": "tok"}]}', float(t))
    acc.add(b'{"choices": [], "usage": {"completion_tokens": %d, "prompt_tokens": 2}}' % usage, 4.0)
    return acc


@pytest.mark.parametrize(
    ("usage", "phrase"), [(9_999_999, "more than the request's max_tokens 16"), (0, "is 0")]
)
def test_usage_is_judged_against_what_was_asked_and_streamed(usage: int, phrase: str) -> None:
    record = _stream(usage).record(SPEC, label="c1", t_queued=0.0, t_sent=0.0, status=200, error=None)
    assert record.error is ErrorClass.BAD_USAGE and phrase in record.error_text
    good = _stream(16).record(SPEC, label="c1", t_queued=0.0, t_sent=0.0, status=200, error=None)
    assert good.success and good.output_tokens == 16


@pytest.mark.parametrize(
    "info",
    [
        {"cuda_graph_bs": [1, 2, 10**18]},
        {"cuda_graph_max_bs": 200_000},
        {"cuda_graph_bs": [True, 2]},
        {"cuda_graph_max_bs": -4},
    ],
)
def test_implausible_batch_sizes_from_a_server_are_ignored(
    info: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_mod, "server_info", lambda *a, **k: info)
    assert server_mod.captured_sizes("http://127.0.0.1:1") is None


@pytest.mark.parametrize("details", ["lots", ["a"], 5])
def test_usage_details_of_any_shape_are_no_traceback(details: object) -> None:
    body = {
        "choices": [{"message": {"content": "4"}, "finish_reason": "stop"}],
        "usage": {"completion_tokens": 1, "completion_tokens_details": details},
    }
    assert parse_reply(body).reasoning_tokens is None


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 10**30, -5, True, "424242"])
def test_an_implausible_kv_pool_from_a_server_is_unknown(value: object) -> None:
    assert server_mod._kv_tokens({"max_total_num_tokens": value}) is None
    assert server_mod._kv_tokens({"internal_states": [{"memory_usage": {"token_capacity": value}}]}) is None


def test_a_reference_file_that_is_a_fifo_is_refused(tmp_path: Path) -> None:
    from tuner.errors import ConfigError
    from tuner.gate.reference import read_reference

    os.mkfifo(tmp_path / "ref.json")
    with pytest.raises(ConfigError, match="not a regular file"):
        read_reference(tmp_path / "ref.json")


@pytest.mark.parametrize("where", ["/dev/zero", "fifo"])
def test_a_dataset_that_is_not_a_regular_file_is_refused(where: str, tmp_path: Path) -> None:
    from tuner.bench.settings import Workload, WorkloadKind
    from tuner.bench.workload import load_dataset
    from tuner.errors import BenchmarkError

    path = Path(where) if where.startswith("/") else tmp_path / where
    if not path.exists():
        os.mkfifo(path)
    workload = Workload(kind=WorkloadKind.SHAREGPT, path=path)
    with pytest.raises(BenchmarkError, match="not a regular file"):
        load_dataset(workload)
