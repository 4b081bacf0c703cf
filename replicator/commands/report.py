"""``replicator status --html FILE``: one self-contained HTML page (no server, no scripts, no network) from
the engine's state: per table, lag and throughput over the recent batches as inline SVG charts; the
tables now; the recent batches; pending dead letters by error (docs/operations.md).

- Throughput: the rows a batch changed in a table (inserted + updated + deleted, from the batch summaries)
  per second of that batch.
- Lag: when a batch finished minus the newest source event time it applied to the table; the event times
  come from the change log (``changelog.enabled``, the default). Without a change log the lag charts say
  so and only the current lag (the table registry) is shown.
"""

from __future__ import annotations

import datetime as dt
import html
from pathlib import Path
from typing import Any

from replicator.config import JobConfig
from replicator.model import table_label

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
WIDTH, HEIGHT, PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 520, 180, 72, 12, 12, 28
RECENT_ROWS = 25


def collect_report(config: JobConfig, last_batches: int = 500) -> dict[str, Any]:
    from replicator.commands.deadletters import summarize
    from replicator.commands.status import collect_status

    status = collect_status(config, last_batches)
    batches = status["batches"]
    for b in batches:
        b["finished_at"] = dt.datetime.fromisoformat(b["finished_at"])
    return {
        "job": config.name,
        "generated_at": dt.datetime.now(dt.UTC),
        "tables": status["tables"],
        "batches": batches,
        "throughput": throughput_series(batches),
        "lag": lag_series(config, batches),
        "dead_letters": summarize(config),
    }


def throughput_series(batches: list[dict[str, Any]]) -> dict[str, list[tuple[dt.datetime, float]]]:
    series: dict[str, list[tuple[dt.datetime, float]]] = {}
    for b in batches:
        seconds = max(b["duration_ms"], 1) / 1000
        for name, counts in (b["tables"] or {}).items():
            changed = sum(int(counts.get(k) or 0) for k in ("inserted", "updated", "deleted"))
            series.setdefault(name, []).append((b["finished_at"], changed / seconds))
    return series


def lag_series(
    config: JobConfig, batches: list[dict[str, Any]]
) -> dict[str, list[tuple[dt.datetime, float]]] | None:
    """Per table, per batch: finished_at - the newest event time the batch applied (None: no change log)."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    path = Path(config.state.path) / "changelog"
    if not batches or not DeltaTable.is_deltatable(str(path)):
        return None
    finished = {b["batch_id"]: b["finished_at"] for b in batches}
    data = (
        DeltaTable(str(path))
        .to_pyarrow_dataset()
        .to_table(
            columns=["batch_id", "database", "schema", "table", "event_time"],
            filter=ds.field("batch_id").isin(pa.array(list(finished), pa.int64())),
        )
    )
    newest = data.group_by(["batch_id", "database", "schema", "table"]).aggregate([("event_time", "max")])
    series: dict[str, list[tuple[dt.datetime, float]]] = {}
    for r in sorted(newest.to_pylist(), key=lambda r: r["batch_id"]):
        if r["event_time_max"] is None or r["table"] is None:
            continue
        at = finished[r["batch_id"]]
        lag = (at - r["event_time_max"]).total_seconds()
        series.setdefault(table_label((r["database"], r["schema"], r["table"])), []).append((at, lag))
    return series


# ---- rendering ---------------------------------------------------------------------------------------------
def _number(value: float) -> str:
    """Short axis labels: 950, 12.5k, 95.5M."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}"


def svg_chart(points: list[tuple[dt.datetime, float]], color: str, unit: str) -> str:
    """A line chart (time -> value) as inline SVG: axes, the line, a dot per point, min/max labels."""
    inner_w, inner_h = WIDTH - PAD_LEFT - PAD_RIGHT, HEIGHT - PAD_TOP - PAD_BOTTOM
    t0, t1 = points[0][0], points[-1][0]
    span = max((t1 - t0).total_seconds(), 1e-9)
    top = max(max(v for _t, v in points), 0) * 1.1 or 1.0
    bottom = min(min(v for _t, v in points), 0)

    def xy(t: dt.datetime, v: float) -> tuple[float, float]:
        x = PAD_LEFT + (inner_w / 2 if len(points) == 1 else (t - t0).total_seconds() / span * inner_w)
        y = PAD_TOP + inner_h - (v - bottom) / (top - bottom) * inner_h
        return round(x, 1), round(y, 1)

    coords = [xy(t, v) for t, v in points]
    line = " ".join(f"{x},{y}" for x, y in coords)
    dots = "".join(f'<circle cx="{x}" cy="{y}" r="3" fill="{color}"/>' for x, y in coords[-200:])
    axis = "#999"
    base_y = PAD_TOP + inner_h
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img">'
        f'<line x1="{PAD_LEFT}" y1="{PAD_TOP}" x2="{PAD_LEFT}" y2="{base_y}" stroke="{axis}"/>'
        f'<line x1="{PAD_LEFT}" y1="{base_y}" x2="{WIDTH - PAD_RIGHT}" y2="{base_y}" stroke="{axis}"/>'
        f'<text x="{PAD_LEFT - 4}" y="{PAD_TOP + 10}" text-anchor="end" font-size="11">'
        f"{_number(top)} {html.escape(unit)}</text>"
        f'<text x="{PAD_LEFT - 4}" y="{base_y}" text-anchor="end" font-size="11">{_number(bottom)}</text>'
        f'<text x="{PAD_LEFT}" y="{HEIGHT - 8}" font-size="11">{t0:%Y-%m-%d %H:%M:%S}</text>'
        f'<text x="{WIDTH - PAD_RIGHT}" y="{HEIGHT - 8}" text-anchor="end" font-size="11">'
        f"{t1:%H:%M:%S} UTC</text>"
        f'<polyline points="{line}" fill="none" stroke="{color}" stroke-width="2.5"/>{dots}</svg>'
    )


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
            ["table", "phase", "rows", "dead letters", "lag now (s)", "last position", "last event time"],
            [
                [
                    t["table"],
                    t["phase"],
                    t["rows"],
                    t["dead_letters"],
                    None if t["lag_seconds"] is None else f"{t['lag_seconds']:.0f}",
                    t["last_position"],
                    t["last_event_time"],
                ]
                for t in report["tables"]
            ],
        )
    )
    names = sorted({t["table"] for t in report["tables"]} | set(report["throughput"]))
    colors = iter(PALETTE * (2 * len(names) // len(PALETTE) + 1))
    for name in names:
        parts.append(f"<h3>{html.escape(name)}</h3><div class='charts'>")
        lag = report["lag"]
        for kind, series, unit, caption in (
            ("lag", None if lag is None else lag.get(name), "s", "lag: batch end - newest event time"),
            ("throughput", report["throughput"].get(name), "rows/s", "throughput: rows changed per second"),
        ):
            color = next(colors)
            if series:
                chart = svg_chart(series, color, unit)
            elif kind == "lag" and lag is None:
                chart = "<p class='none'>no change log (changelog.enabled: false): no lag history</p>"
            else:
                chart = "<p class='none'>no batches in the window</p>"
            parts.append(
                f"<figure class='chart' data-table='{html.escape(name)}' data-kind='{kind}' "
                f"data-color='{color}'>{chart}<figcaption>{caption}</figcaption></figure>"
            )
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
    parts.append(f"<h2>Dead letters: {dead['pending']} pending, {dead['retried']} retried</h2>")
    parts.append(
        _table(
            ["count", "table", "error", "batches", "example"],
            [
                [g["count"], g["table"], g["error"], f"{g['first_batch']}-{g['last_batch']}", g["example"]]
                for g in dead["groups"]
            ],
        )
    )
    parts.append("</body></html>\n")
    return "".join(parts)


def write_report(config: JobConfig, path: str | Path, last_batches: int = 500) -> Path:
    target = Path(path)
    target.write_text(render(collect_report(config, last_batches)), encoding="utf-8")
    return target
