"""`mq status`'s tables at the widths people use: whole headers, one line per row,
nothing wrapped or cut (whole columns left out, and said so); a silent source shown as what
it is (a lower bound as of a time, the seconds since, an estimate), with the detail below."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from mq.cli import output
from mq.cli.status import FLOW_COLUMNS, _print_flows, flow_rows

NOW = 1_700_000_000_000


def flow(name: str, state: str, **status) -> dict:
    doc = {"state": state, "error": "", "lag_records": 0, "lag_ms": 0, "replication_latency_p99_ms": 45,
           "updated_at_ms": NOW - 400, "source_unreachable": False, "source_heard_at_ms": NOW - 300,
           "lag_as_of_ms": NOW - 300, "source_rate_per_s": 12.5, "lag_records_estimate": None, **status}
    return {"name": name, "source": "east", "target": "west", "mode": "active-passive",
            "process": {"pid": 123456, "alive": True}, "mirror_installed": True, "mirror_status": doc}


FLOWS = [
    flow("east-to-west", "stalled", lag_records=1234, lag_ms=None, source_unreachable=True,
         source_heard_at_ms=NOW - 12_000, lag_as_of_ms=NOW - 12_400, source_rate_per_s=380.0,
         lag_records_estimate=5794,
         error="source region east unreachable: orders-0: no answer from the source for 5234 ms "
               "(link down or source leader unreachable)"),
    flow("east-to-south", "running", lag_records=17, lag_ms=40),
]


def render(width: int, monkeypatch) -> list[str]:
    buf = io.StringIO()
    monkeypatch.setattr(output, "_stdout", Console(file=buf, width=width, force_terminal=True,
                                                   color_system=None, highlight=False, soft_wrap=True))
    monkeypatch.setattr("mq.cli.status.time.time", lambda: NOW / 1000)
    _print_flows(FLOWS)
    return buf.getvalue().splitlines()


@pytest.mark.parametrize("width", [80, 120])
def test_the_flows_table_fits_the_terminal_with_whole_headers_and_one_line_per_flow(width, monkeypatch):
    lines = render(width, monkeypatch)
    header = next(line for line in lines if "FLOW" in line)
    start = lines.index(header)
    table = lines[start:start + 4]  # header, rule, two flows
    assert all(len(line) <= width for line in table), "\n".join(table)
    shown = header.split()
    assert {"FLOW", "STATE", "LAG", "LAG-ESTIMATE", "SOURCE-HEARD"} <= set(shown)
    assert all(h in {c.upper().replace(" ", "-") for c, _ in FLOW_COLUMNS} for h in shown)  # none cut or wrapped
    assert "…" not in "\n".join(lines)
    stalled, running = table[2].split(), table[3].split()
    assert stalled[:1] == ["east-to-west"] and "stalled" in stalled and ">=1234" in stalled and "~5794" in stalled
    assert running[:1] == ["east-to-south"] and "running" in running and "17" in running
    assert lines[start + 4].strip() == ""  # nothing of a flow spills onto a second line
    left_out = [line for line in lines if "left out to fit" in line]
    if width == 80:  # some columns must go, and a line says which
        assert left_out and "LAG-TIME" in left_out[0]
    assert all(len(line) <= width for line in lines), "\n".join(lines)  # the notes wrap at words
    text = " ".join(line.strip() for line in lines)
    assert re.search(r"east-to-west: stalled: source region east unreachable", text)
    assert "lag >= 1234 records as of" in text and "a lower bound" in text
    assert "estimate ~5794 records (last known rate 380 rec/s x 12 s)" in text
    assert "not heard for 12 s" in text


def test_piped_output_has_every_column(monkeypatch, capsys):
    monkeypatch.setattr(output, "_stdout", Console(file=io.StringIO(), width=80, highlight=False))
    _print_flows(FLOWS)  # not a terminal: print_table writes to stdout, 200 columns at least
    header = next(line for line in capsys.readouterr().out.splitlines() if "FLOW" in line)
    assert header.split() == [c.upper().replace(" ", "-") for c, _ in FLOW_COLUMNS]


def test_a_reachable_flow_has_exact_figures_and_no_estimate():
    rows, notes = flow_rows([FLOWS[1]], NOW)
    [row] = rows
    cells = dict(zip((c for c, _ in FLOW_COLUMNS), row))
    assert (cells["lag"], cells["lag estimate"], cells["source heard"]) == ("17", "-", "0 s ago")
    assert notes == []


def silent_partition(p: int, *, lag: int, rate: float, seen_ms: int) -> dict:
    return {"topic": "orders", "partition": p, "lag_records": lag, "source_unreachable": True,
            "source_rate_per_s": rate, "source_seen_wall_ms": seen_ms}


def test_the_estimate_is_taken_to_now_while_the_flow_runs_and_frozen_when_it_stopped():
    parts = [silent_partition(0, lag=10, rate=100.0, seen_ms=NOW - 10_000),
             silent_partition(1, lag=0, rate=50.0, seen_ms=NOW - 10_000)]
    running = flow("east-to-west", "stalled", lag_records=10, source_unreachable=True,
                   source_heard_at_ms=NOW - 10_000, lag_as_of_ms=NOW - 10_000, source_rate_per_s=150.0,
                   lag_records_estimate=1_360, updated_at_ms=NOW - 1_000, partitions=parts,
                   error="source region east unreachable")
    [row], notes = flow_rows([running], NOW)
    cells = dict(zip((c for c, _ in FLOW_COLUMNS), row))
    assert cells["lag"] == ">=10" and cells["lag estimate"] == "~1510"  # 10 + 150 rec/s x 10 s, now
    assert "estimate ~1510 records (last known rate 150 rec/s x 10 s)" in notes[1]

    # Failed over 8 s after the last answer, looked at a minute later.
    for p in parts:
        p["source_seen_wall_ms"] = NOW - 60_000
    status = {k: v for k, v in running["mirror_status"].items() if k != "state"}
    status.update(error="", reason="west promoted; at least 10 (estimate ~1210) records at risk",
                  updated_at_ms=NOW - 52_000, source_heard_at_ms=NOW - 60_000)
    stopped = flow("east-to-west", "failed-over", **status)
    [row], notes = flow_rows([stopped], NOW)
    cells = dict(zip((c for c, _ in FLOW_COLUMNS), row))
    assert cells["lag estimate"] == "~1210"  # as of the fail-over, 8 s after the last answer: not 60 s
    assert notes[0] == "east-to-west: failed-over: west promoted; at least 10 (estimate ~1210) records at risk"
    assert notes[1].startswith("east-to-west: when the flow stopped (") and "not heard for 8 s" in notes[1]


@pytest.mark.parametrize("width", [80, 120])
def test_the_links_table_keeps_a_cut_links_state_whole(width, monkeypatch):
    from mq.cli.status import _print_links

    def link(name: str, state: str, cut_mode) -> dict:
        return {"name": name, "state": state, "cut_mode": cut_mode, "latency_ms": 40, "jitter_ms": 5,
                "bandwidth_mbit": None, "loss": 0.0, "connections": 7, "bytes": 524_288,
                "control": "127.0.0.1:23102", "stall_left_ms": 0}

    buf = io.StringIO()
    monkeypatch.setattr(output, "_stdout", Console(file=buf, width=width, force_terminal=True,
                                                   color_system=None, highlight=False, soft_wrap=True))
    _print_links([link("east->west", "cut", "blackhole"), link("west->east", "up", None)])
    lines = buf.getvalue().splitlines()
    assert all(len(line) <= width for line in lines), "\n".join(lines)
    rows = [line.split() for line in lines if line.strip().startswith(("east->west", "west->east"))]
    assert rows[0][:3] == ["east->west", "cut", "(blackhole)"] and rows[1][:2] == ["west->east", "up"]
    assert "…" not in buf.getvalue()
    header = next(line for line in lines if "LINK" in line).split()
    assert header[:3] == ["LINK", "STATE", "LATENCY"]
    assert ("CONTROL" in header) == (width == 120)
