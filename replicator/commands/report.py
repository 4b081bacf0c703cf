"""``replicator status --html FILE``: one self-contained HTML page (no server, no scripts, no network) from
the engine's state: per table, lag and throughput over the recent batches as inline SVG charts; the
tables now; the recent batches; pending dead letters by error (docs/operations.md).

- Charts are drawn against the batches' end times (never their ids: a retry's id is 10^12 + n), every
  point inside the chart, with value ticks and each point's time and value on hover.
- Throughput: a table's input events (the change log's rows) per second of wall time (since the job's
  previous batch ended), and its net rows changed (inserted + updated + deleted) per second, a second line.
- Lag: when a batch finished minus the newest source event time it applied to the table; the event times
  come from the change log (``changelog.enabled``, the default). Without a change log the lag charts say
  so and only the current lag (the table registry) is shown.
- Retries of dead letters (old events, re-driven) are a series of their own (hollow dots), off the scale
  of the lines.
"""

from __future__ import annotations

import datetime as dt
import html
from pathlib import Path
from typing import Any

from replicator.commands.status import human_duration
from replicator.config import JobConfig
from replicator.model import table_label
from replicator.storage import location

# Distinct saturated colours, one per chart in page order (tests find each chart by its colour).
PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#9467bd",
    "#ff7f0e",
    "#17becf",
    "#8c564b",
    "#e377c2",
    "#bcbd22",
    "#7f7f7f",
)
WIDTH, HEIGHT, PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 520, 196, 56, 40, 24, 28
RECENT_ROWS = 25


RETRY_COLOR = "#ff00ff"  # retried dead letters: their own series, hollow dots, in every chart


def collect_report(config: JobConfig, last_batches: int = 500) -> dict[str, Any]:
    from replicator.commands.deadletters import summarize
    from replicator.commands.status import collect_status

    status = collect_status(config, last_batches)
    batches = status["batches"]
    for b in batches:
        b["finished_at"] = dt.datetime.fromisoformat(b["finished_at"])
    events = table_events(config, batches)
    return {
        "job": config.name,
        "generated_at": dt.datetime.now(dt.UTC),
        "tables": status["tables"],
        "batches": batches,
        "throughput": throughput_series(batches, events),
        "lag": lag_series(config, batches),
        "dead_letters": summarize(config),
    }


def _retry(batch_id: int) -> bool:
    from replicator.commands.deadletters import RETRY_BATCH_BASE

    return batch_id >= RETRY_BATCH_BASE


def _wall(batches: list[dict[str, Any]]) -> dict[int, float]:
    """Per batch, the wall time it stands for: since the job's previous batch ended (idle time included:
    events per second of wall time), the first one its own duration."""
    seconds, previous = {}, None
    for b in sorted(batches, key=lambda b: b["finished_at"]):
        own = max(b["duration_ms"], 1) / 1000
        since = (b["finished_at"] - previous).total_seconds() if previous is not None else own
        seconds[b["batch_id"]] = max(since, own, 1e-3)
        previous = b["finished_at"]
    return seconds


Series = dict[str, list[tuple[dt.datetime, float]]]


def throughput_series(
    batches: list[dict[str, Any]], events: dict[tuple[int, str], int] | None = None
) -> dict[str, dict[str, list[tuple[dt.datetime, float]]]]:
    """Per table: ``events`` (its input events per second of wall time, from the change log), ``rows``
    (net rows it inserted, updated or deleted per second of wall time), ``retries`` (the events of retry
    batches, same unit), each a time series."""
    wall = _wall(batches)
    series: dict[str, dict[str, list[tuple[dt.datetime, float]]]] = {}
    for b in sorted(batches, key=lambda b: b["finished_at"]):
        seconds = wall[b["batch_id"]]
        for name, counts in (b["tables"] or {}).items():
            changed = sum(int(counts.get(k) or 0) for k in ("inserted", "updated", "deleted"))
            table = series.setdefault(name, {"events": [], "rows": [], "retries": []})
            count = (events or {}).get((b["batch_id"], name))
            if _retry(b["batch_id"]):
                table["retries"].append(
                    (b["finished_at"], (count if count is not None else changed) / seconds)
                )
                continue
            if count is not None:
                table["events"].append((b["finished_at"], count / seconds))
            table["rows"].append((b["finished_at"], changed / seconds))
    return series


def _changelog(config: JobConfig, batches: list[dict[str, Any]], columns: list[str]) -> Any:
    import pyarrow as pa
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    path = location(config.state.path) / "changelog"  # (an object under an s3:// state.path)
    if not batches or not DeltaTable.is_deltatable(str(path)):
        return None
    ids = pa.array([b["batch_id"] for b in batches], pa.int64())
    return (
        DeltaTable(str(path))
        .to_pyarrow_dataset()
        .to_table(columns=columns, filter=ds.field("batch_id").isin(ids))
    )


def table_events(config: JobConfig, batches: list[dict[str, Any]]) -> dict[tuple[int, str], int]:
    """(batch id, table) -> the input events of the table in the batch (the change log's rows)."""
    data = _changelog(config, batches, ["batch_id", "database", "schema", "table"])
    if data is None:
        return {}
    counts = data.group_by(["batch_id", "database", "schema", "table"]).aggregate([("batch_id", "count")])
    return {
        (r["batch_id"], table_label((r["database"], r["schema"], r["table"]))): r["batch_id_count"]
        for r in counts.to_pylist()
        if r["table"] is not None
    }


def lag_series(config: JobConfig, batches: list[dict[str, Any]]) -> dict[str, dict[str, Any]] | None:
    """Per table: ``stream`` and ``retries`` series of (batch end, batch end - the newest event time the
    batch applied), in time order (None: no change log)."""
    data = _changelog(config, batches, ["batch_id", "database", "schema", "table", "event_time"])
    if data is None:
        return None
    finished = {b["batch_id"]: b["finished_at"] for b in batches}
    # Only where the batch applied to the table: the change log also holds events that became dead letters.
    applied = {(b["batch_id"], name) for b in batches for name in b["tables"] or {}}
    newest = data.group_by(["batch_id", "database", "schema", "table"]).aggregate([("event_time", "max")])
    series: dict[str, dict[str, Any]] = {}
    for r in sorted(newest.to_pylist(), key=lambda r: finished[r["batch_id"]]):
        if r["event_time_max"] is None or r["table"] is None:
            continue
        name = table_label((r["database"], r["schema"], r["table"]))
        if (r["batch_id"], name) not in applied:
            continue
        at = finished[r["batch_id"]]
        lag = (at - r["event_time_max"]).total_seconds()
        table = series.setdefault(
            table_label((r["database"], r["schema"], r["table"])), {"stream": [], "retries": []}
        )
        table["retries" if _retry(r["batch_id"]) else "stream"].append((at, lag))
    return series


# ---- rendering ---------------------------------------------------------------------------------------------
def _number(value: float) -> str:
    """Short axis labels: 950, 12.5k, 95.5M."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}"


def _ticks(low: float, high: float, count: int = 4) -> list[float]:
    """About ``count`` round values from ``low`` to ``high`` (1, 2 or 5 times a power of ten apart)."""
    import math

    span = max(high - low, 1e-9)
    raw = span / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


DURATION_UNITS = (("y", 365.25 * 86400), ("d", 86400.0), ("h", 3600.0), ("min", 60.0), ("s", 1.0))


def _duration_ticks(low: float, high: float) -> list[tuple[float, str]]:
    """Round ticks of a seconds axis in the largest time unit it spans: ``10 min``, ``2 h``, ``1.5 y``
    (not ``50M`` seconds)."""
    name, size = next(((n, z) for n, z in DURATION_UNITS if max(abs(low), abs(high)) >= z), ("s", 1.0))
    return [(v * size, f"{v:g} {name}") for v in _ticks(low / size, high / size)]


def svg_chart(
    lines: list[tuple[str, list[tuple[dt.datetime, float]], str, str]], unit: str, durations: bool = False
) -> str:
    """A chart of time series as inline SVG: ``lines`` of (label, points, colour, style) where style is
    ``line`` (a line with dots), ``dashed`` or ``dots`` (hollow dots only: retries). Time on x (every
    series' points inside it), value ticks on y, a legend, and each dot's time and value on hover;
    ``durations``: the values are seconds, shown as durations (ticks and hover text)."""
    inner_w, inner_h = WIDTH - PAD_LEFT - PAD_RIGHT, HEIGHT - PAD_TOP - PAD_BOTTOM
    points = [p for _label, series, _c, _s in lines for p in series]
    t0, t1 = min(t for t, _v in points), max(t for t, _v in points)
    span = max((t1 - t0).total_seconds(), 1e-9)
    # The value axis fits the lines; marks (retries: old events, a lag of months) are pinned inside it
    # and their own value is in their hover text.
    scaled = [v for _label, series, _c, style in lines if style != "dots" for _t, v in series]
    scaled = scaled or [v for _t, v in points]
    top = max(max(scaled), 0) * 1.1 or 1.0
    bottom = min(min(scaled), 0)
    single = t0 == t1

    def xy(t: dt.datetime, v: float) -> tuple[float, float]:
        x = PAD_LEFT + (inner_w / 2 if single else (t - t0).total_seconds() / span * inner_w)
        v = min(max(v, bottom), top)
        y = PAD_TOP + inner_h - (v - bottom) / (top - bottom) * inner_h
        return round(x, 1), round(y, 1)

    axis, base_y = "#999", PAD_TOP + inner_h
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img">',
        f'<line x1="{PAD_LEFT}" y1="{PAD_TOP}" x2="{PAD_LEFT}" y2="{base_y}" stroke="{axis}"/>',
        f'<line x1="{PAD_LEFT}" y1="{base_y}" x2="{WIDTH - PAD_RIGHT}" y2="{base_y}" stroke="{axis}"/>',
    ]
    ticks = _duration_ticks(bottom, top) if durations else [(v, _number(v)) for v in _ticks(bottom, top)]
    for value, text in ticks:
        _x, y = xy(t0, value)
        parts.append(
            f'<line x1="{PAD_LEFT - 3}" y1="{y}" x2="{PAD_LEFT}" y2="{y}" stroke="{axis}"/>'
            f'<text x="{PAD_LEFT - 5}" y="{y + 4}" text-anchor="end" font-size="10">{text}</text>'
        )
    parts.append(
        f'<text x="4" y="{PAD_TOP - 2}" font-size="10">{html.escape(unit)}</text>'
        f'<text x="{PAD_LEFT}" y="{HEIGHT - 6}" font-size="10">{t0:%Y-%m-%d %H:%M:%S}</text>'
        f'<text x="{WIDTH - PAD_RIGHT}" y="{HEIGHT - 6}" text-anchor="end" font-size="10">'
        f"{t1:%H:%M:%S} UTC</text>"
    )
    for x in (PAD_LEFT + inner_w / 2,) if not single else ():
        middle = t0 + (t1 - t0) / 2
        parts.append(
            f'<line x1="{x}" y1="{base_y}" x2="{x}" y2="{base_y + 3}" stroke="{axis}"/>'
            f'<text x="{x}" y="{HEIGHT - 6}" text-anchor="middle" font-size="10">{middle:%H:%M:%S}</text>'
        )
    legend_x = PAD_LEFT + 8
    for label, series, color, style in lines:
        if not series:
            continue
        ordered = sorted(series)
        coords = [xy(t, v) for t, v in ordered]
        if style != "dots":
            dash = ' stroke-dasharray="5,3"' if style == "dashed" else ""
            path = " ".join(f"{x},{y}" for x, y in coords)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2.5"{dash}/>')
        fill = "white" if style == "dots" else color
        for (t, v), (x, y) in list(zip(ordered, coords, strict=True))[-200:]:
            shown = human_duration(v) if durations else f"{v:,.2f} {html.escape(unit)}"
            parts.append(
                f'<circle cx="{x}" cy="{y}" r="3.5" fill="{fill}" stroke="{color}" stroke-width="1.5">'
                f"<title>{html.escape(label)} {t:%Y-%m-%d %H:%M:%S} UTC: {shown}</title>"
                "</circle>"
            )
        legend = html.escape(label)
        parts.append(f'<text x="{legend_x}" y="12" font-size="10" fill="{color}">{legend}</text>')
        legend_x += 8 + 6 * len(label)
    parts.append("</svg>")
    return "".join(parts)


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape('' if v is None else str(v))}</td>" for v in row) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


STYLE = """
body { font: 14px system-ui, sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; } h3 { font-size: 14px; margin: 16px 0 4px; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; }
figure { margin: 0; } figcaption { font-size: 12px; color: #555; }
table { border-collapse: collapse; font-size: 12px; }
td, th { border: 1px solid #ddd; padding: 3px 6px; text-align: left; }
.none { color: #777; font-style: italic; width: 520px; }
"""


LAG_CAPTION = (
    "lag at each batch's end: batch end - the newest source event time that batch applied to the table "
    "(a batch of old events, a late update, shows a long lag; the table's lag now is in the table above)"
)
FLOW_CAPTION = (
    "throughput: input events per second of wall time (solid), net rows changed per second (dashed, black)"
)
ROWS_COLOR = "#000000"  # throughput's net-rows line: apart from every chart colour and the text (#222)
LAG_NOW = "lag now (now - newest applied event)"


def _figure(name: str, kind: str, color: str, lines: list[Any], unit: str, caption: str, no_log: bool) -> str:
    if any(series for _l, series, _c, _s in lines):
        chart = svg_chart(lines, unit, durations=kind == "lag")
    elif no_log:
        chart = "<p class='none'>no change log (changelog.enabled: false): no lag history</p>"
    else:
        chart = "<p class='none'>no batches in the window</p>"
    return (
        f"<figure class='chart' data-table='{html.escape(name)}' data-kind='{kind}' "
        f"data-color='{color}'>{chart}<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def render(report: dict[str, Any]) -> str:
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>replicator: {html.escape(report['job'])}</title><style>{STYLE}</style></head><body>",
        f"<h1>replicator job {html.escape(report['job'])}</h1>",
        f"<p>generated {report['generated_at']:%Y-%m-%d %H:%M:%S} UTC from the last "
        f"{len(report['batches'])} batches</p>",
        "<h2>Tables</h2>",
    ]
    parts.append(
        _table(
            [
                "table",
                "phase",
                "rows",
                "dead letters",
                LAG_NOW,
                "last position",
                "last event time",
            ],
            [
                [
                    t["table"],
                    t["phase"],
                    t["rows"],
                    t["dead_letters"],
                    human_duration(t["lag_seconds"]),
                    t["last_position"],
                    t["last_event_time"],
                ]
                for t in report["tables"]
            ],
        )
    )
    names = sorted({t["table"] for t in report["tables"]} | set(report["throughput"]))
    colors = iter(PALETTE * (2 * len(names) // len(PALETTE) + 1))
    lag = report["lag"]
    for name in names:
        parts.append(f"<h3>{html.escape(name)}</h3><div class='charts'>")
        color = next(colors)
        lags = None if lag is None else lag.get(name)
        lines = (
            [
                ("stream", lags["stream"], color, "line"),
                ("retried dead letters", lags["retries"], RETRY_COLOR, "dots"),
            ]
            if lags
            else []
        )
        parts.append(_figure(name, "lag", color, lines, "lag", LAG_CAPTION, lag is None))
        color = next(colors)
        flow = report["throughput"].get(name)
        lines = (
            [
                ("input events/s", flow["events"], color, "line"),
                ("net rows changed/s", flow["rows"], ROWS_COLOR, "dashed"),
                ("retried dead letters", flow["retries"], RETRY_COLOR, "dots"),
            ]
            if flow
            else []
        )
        parts.append(_figure(name, "throughput", color, lines, "per s", FLOW_CAPTION, False))
        parts.append("</div>")

    parts.append("<h2>Recent batches</h2>")
    recent = list(reversed(report["batches"]))[:RECENT_ROWS]
    parts.append(
        _table(
            ["batch", "finished", "ms", "records", "events", "applied", "filtered", "dead letters", "tables"],
            [
                [
                    b["batch_id"],
                    f"{b['finished_at']:%Y-%m-%d %H:%M:%S}",
                    b["duration_ms"],
                    b["records_in"],
                    b["events"],
                    b["applied"],
                    b["filtered"],
                    b["dead_letters"],
                    ", ".join(sorted(b["tables"] or {})),
                ]
                for b in recent
            ],
        )
    )
    dead = report["dead_letters"]
    parts.append(
        f"<h2>Dead letters: {dead['pending']} pending, {dead['retried']} retried, "
        f"{dead.get('discarded', 0)} discarded</h2>"
    )
    if dead["groups"]:
        parts.append(
            _table(
                ["count", "table", "error", "batches", "example"],
                [
                    [
                        g["count"],
                        g["table"],
                        g["error"],
                        f"{g['first_batch']}-{g['last_batch']}",
                        g["example"],
                    ]
                    for g in dead["groups"]
                ],
            )
        )
    else:
        parts.append("<p class='none'>no pending dead letters</p>")
    parts.append("</body></html>\n")
    return "".join(parts)


def write_report(config: JobConfig, path: str | Path, last_batches: int = 500) -> Path:
    target = Path(path)
    target.write_text(render(collect_report(config, last_batches)), encoding="utf-8")
    return target
