"""``replicator status --html``: the page, opened in headless chromium, shows a lag and a throughput chart
per table (found by their colours in the screenshot), the recent batches and the dead letters by error."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from replicator.commands.report import LAG_NOW, PALETTE, ROWS_COLOR, collect_report, write_report
from tests.helpers import Runner, canal, cli, job, order

ES = 1_700_000_000_000


def chromium() -> str:
    found = next((shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)), None)
    if found is None:
        message = "chromium is not installed (apt-get install chromium; .ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def screenshot(page: Path, png: Path) -> None:
    result = subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={png.parent / 'chromium-profile'}",
            "--window-size=1200,1400",
            f"--screenshot={png}",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert png.exists(), result.stderr[-3000:]


def colour_pixels(png: Path, colour: str) -> int:
    """Pixels within a small distance of ``colour`` (#rrggbb): anti-aliasing blends only the edges."""
    import numpy as np
    from PIL import Image

    image = np.asarray(Image.open(png).convert("RGB"), dtype=np.int32)
    target = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)], dtype=np.int32)
    return int((np.abs(image - target).sum(axis=2) <= 30).sum())


def mirror_some_batches(spark, tmp_path: Path):
    runner = Runner(spark, job(tmp_path))
    for b in range(4):
        runner.messages(
            tmp_path,
            [
                canal("INSERT", [order(10 * b + i) for i in range(1, 4)], es=ES + 1000 * b),
                canal("INSERT", [order(10 * b + 1)], es=ES + 1000 * b + 1, table="customers"),
            ],
        )
    runner.messages(tmp_path, ["not json at all"])
    return runner.config


def test_report_charts_render_in_headless_chromium(spark, tmp_path):
    config = mirror_some_batches(spark, tmp_path)
    report = collect_report(config)
    assert sorted(report["throughput"]) == ["shop.customers", "shop.orders"]
    assert [len(report["lag"][t]["stream"]) for t in ("shop.customers", "shop.orders")] == [4, 4]
    assert report["dead_letters"]["pending"] == 1

    page = write_report(config, tmp_path / "report.html")
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"<script|https?://(?!www\.w3\.org/2000/svg)", text)  # self-contained
    assert "not json at all" in text and "Recent batches" in text
    charts = re.findall(r"data-table='([^']+)' data-kind='(\w+)' data-color='(#[0-9a-f]{6})'", text)
    assert [(t, k) for t, k, _c in charts] == [
        ("shop.customers", "lag"),
        ("shop.customers", "throughput"),
        ("shop.orders", "lag"),
        ("shop.orders", "throughput"),
    ]

    png = tmp_path / "report.png"
    screenshot(page, png)
    for table, kind, colour in charts:  # (a throughput chart's own colour is its events line alone)
        assert colour_pixels(png, colour) > 120, f"the {kind} chart of {table} did not render"
    assert colour_pixels(png, ROWS_COLOR) > 120  # the net-rows lines, dark
    unused = [c for c in PALETTE if c not in {c for _t, _k, c in charts}]
    assert colour_pixels(png, unused[0]) < 20  # the count tells a drawn chart from none


@pytest.mark.slow
def test_cli_status_html(spark, tmp_path):
    mirror_some_batches(spark, tmp_path)
    (tmp_path / "job.yaml").write_text(
        "name: test-job\nsource: {type: files, path: landing, dialect: canal-json}\n"
        "target: {path: lake}\nstate: {path: state}\n",
        encoding="utf-8",
    )
    out = tmp_path / "out" / "report.html"
    out.parent.mkdir()
    done = cli("status", "--config", str(tmp_path / "job.yaml"), "--html", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == f"wrote {out}"
    assert out.read_text(encoding="utf-8").count("<svg") == 4


def test_after_a_retry_every_point_is_inside_its_chart_and_retries_are_their_own_series(spark, tmp_path):
    """A retry batch's id is 10^12 + n and its events are old: drawn by time, as a series of its own (hollow
    dots), never stretching the stream's line past the chart or as a lag spike of the stream."""
    import time as clock

    from replicator.commands.deadletters import retry
    from replicator.commands.report import (
        HEIGHT,
        PAD_BOTTOM,
        PAD_LEFT,
        PAD_RIGHT,
        PAD_TOP,
        RETRY_COLOR,
        WIDTH,
    )
    from tests.test_deadletters import config, debezium, item

    unkeyed = Runner(spark, config(tmp_path, keys=False))
    unkeyed.messages(tmp_path, [debezium("c", item(i, f"v{i}"), pos=i) for i in range(1, 4)])
    keyed_config = config(tmp_path, keys=True)
    keyed = Runner(spark, keyed_config)
    keyed.batch_id = 1
    now = int(clock.time() * 1000)
    for b in range(3):
        keyed.messages(tmp_path, [_recent(item(10 + b, "n"), now, b)])
    assert retry(keyed_config).batch_id is not None
    keyed.messages(tmp_path, [_recent(item(20, "n"), now, 3)])

    report = collect_report(keyed_config)
    lag = report["lag"]["shop.items"]
    assert len(lag["retries"]) == 1 and lag["retries"][0][1] > 1e6  # the old events: its own point
    # the stream's lag: the batches that applied to the table (not batch 0's dead letters), recent events
    assert len(lag["stream"]) == 4 and max(v for _t, v in lag["stream"]) < 600
    times = [t for t, _v in lag["stream"]]
    assert times == sorted(times)
    flow = report["throughput"]["shop.items"]
    assert flow["events"] and flow["rows"] and flow["retries"]

    page = write_report(keyed_config, tmp_path / "report.html")
    text = page.read_text(encoding="utf-8")
    circles = re.findall(
        r'<circle cx="([\d.]+)" cy="([\d.]+)" r="[\d.]+" fill="([^"]+)" stroke="([^"]+)"', text
    )
    assert circles and all(
        PAD_LEFT <= float(x) <= WIDTH - PAD_RIGHT and PAD_TOP <= float(y) <= HEIGHT - PAD_BOTTOM
        for x, y, _f, _s in circles
    ), circles
    assert sum(1 for _x, _y, fill, stroke in circles if stroke == RETRY_COLOR and fill == "white") == 2
    assert text.count("</title></circle>") == len(circles)  # a value on hover for every point
    assert "input events/s" in text and "net rows changed/s" in text and LAG_NOW in text

    png = tmp_path / "report.png"
    screenshot(page, png)
    assert colour_pixels(png, RETRY_COLOR) > 20  # the retry points are drawn
    charts = re.findall(r"data-kind='(\w+)' data-color='(#[0-9a-f]{6})'", text)
    for kind, colour in charts:
        assert colour_pixels(png, colour) > 120, f"the {kind} chart did not render"


def _recent(row: dict, now_ms: int, n: int) -> dict:
    from tests.test_deadletters import debezium

    message = debezium("c", row, pos=100 + n)
    message["source"]["ts_ms"] = message["ts_ms"] = now_ms + n
    return message


def test_lag_axis_in_durations_two_throughput_colours_one_lag_figure_no_empty_dead_letter_table():
    """Issue 53, item 13, on a report of two batches an hour apart with lags of days and of months."""
    import datetime as dt

    from replicator.commands.report import ROWS_COLOR, render

    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    later = at + dt.timedelta(hours=1)
    table = {
        "table": "shop.orders",
        "phase": "incremental",
        "rows": 3,
        "dead_letters": 0,
        "lag_seconds": 4440.0,
        "last_position": "b.1:4",
        "last_event_time": at,
    }
    report = {
        "job": "j",
        "generated_at": later,
        "batches": [],
        "tables": [table],
        "lag": {"shop.orders": {"stream": [(at, 3 * 86400.0), (later, 200 * 86400.0)], "retries": []}},
        "throughput": {
            "shop.orders": {"events": [(at, 10.0), (later, 20.0)], "rows": [(at, 5.0)], "retries": []}
        },
        "dead_letters": {"pending": 0, "retried": 0, "discarded": 0, "groups": []},
    }
    text = render(report)
    lag_chart = text.split("data-kind='lag'")[1].split("</figure>")[0]
    ticks = [
        t for t in re.findall(r'text-anchor="end" font-size="10">([^<]+)</text>', lag_chart) if "UTC" not in t
    ]
    assert ticks and all(t.endswith((" d", " y")) for t in ticks), ticks  # not 50M (seconds)
    assert "200 d" in lag_chart  # the hover text of the last point
    flow = text.split("data-kind='throughput'")[1].split("</figure>")[0]
    colour = re.search(r"data-color='(#[0-9a-f]{6})'", text.split("data-kind='throughput'")[1]).group(1)
    strokes = set(re.findall(r'<polyline [^>]*stroke="(#[0-9a-f]{6})"', flow))
    assert strokes == {colour, ROWS_COLOR}, strokes  # events and rows: two colours
    headers = re.findall(r"<th>([^<]+)</th>", text.split("<h2>Recent batches")[0])
    assert [h for h in headers if "lag" in h] == [LAG_NOW]  # one lag figure per table, named
    assert "1 h 14 min" in text
    dead = text.split("<h2>Dead letters")[1]
    assert "<table" not in dead and "no pending dead letters" in dead
