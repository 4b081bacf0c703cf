"""PostgreSQL's dates and timestamps through Debezium's PostgreSQL connector (issue 51, replicator.dialects
.pg_dates). The published numbers are what Debezium 3.5.0.Final published for a table
``tt (id int, d date, ts timestamp, tstz timestamptz, ts3 timestamp(3))`` of PostgreSQL 15, by the
snapshot (``op: "r"``) and by streaming (``op: "c"``), with a Connect worker in UTC; the expected texts are
PostgreSQL's own values."""

from __future__ import annotations

import pytest

from tests.dialects.golden import raw_records

FIELDS = [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "version": 1, "field": "d"},
    {
        "type": "int64",
        "optional": True,
        "name": "io.debezium.time.MicroTimestamp",
        "version": 1,
        "field": "ts",
    },
    {
        "type": "string",
        "optional": True,
        "name": "io.debezium.time.ZonedTimestamp",
        "version": 1,
        "field": "tstz",
    },
    {"type": "int64", "optional": True, "name": "io.debezium.time.Timestamp", "version": 1, "field": "ts3"},
]


def message(op: str, after: dict, version: str = "3.5.0.Final") -> dict:
    snapshot = "true" if op == "r" else "false"
    return {
        "schema": {
            "type": "struct",
            "fields": [
                {"type": "struct", "fields": FIELDS, "optional": True, "field": "before"},
                {"type": "struct", "fields": FIELDS, "optional": True, "field": "after"},
            ],
            "name": "pg.public.tt.Envelope",
        },
        "payload": {
            "before": None,
            "after": after,
            "source": {
                "version": version,
                "connector": "postgresql",
                "db": "shop",
                "schema": "public",
                "table": "tt",
                "snapshot": snapshot,
                "lsn": 26379040 + after["id"],
                "ts_ms": 1796625753578,
            },
            "op": op,
            "ts_ms": 1796625753578,
        },
    }


def decoded(messages: list[dict]) -> tuple[list[dict], list[tuple]]:
    """The events, and the notices (database, schema, table, text) the decoded table carries."""
    from replicator.commands.inspect import event_records
    from replicator.decode import notice_rows
    from replicator.dialects import decode

    events = decode(raw_records(messages, source="mem"), "debezium")
    notices = notice_rows(events)
    return event_records(events), [tuple(r.values()) for r in notices.to_pylist()] if notices else []


# PostgreSQL's value -> (snapshot's published d, ts, tstz, ts3), (streaming's); the texts the mirror takes
VALUES = {
    "0001-01-01 00:00:00": (
        (-719162, -62135769600000000, "0000-12-30T00:00:00.000000Z", -62135769600000),
        (-719162, -62135596800000000, "0001-01-01T00:00:00.000000Z", -62135596800000),
    ),
    "0001-03-01 12:00:00.5": (
        (-719103, -62130628799500000, "0001-02-27T12:00:00.000000Z", -62130628799500),
        (-719103, -62130455999500000, "0001-03-01T12:00:00.000000Z", -62130455999500),
    ),
    "1000-06-01 00:00:00": (
        (-354134, -30596659200000000, "1000-06-07T00:00:00.000000Z", -30596659200000),
        (-354134, -30597177600000000, "1000-06-01T00:00:00.000000Z", -30597177600000),
    ),
    "1582-10-15 00:00:00": (
        (-141427, -12219292800000000, "1582-10-15T00:00:00.000000Z", -12219292800000),
        (-141427, -12219292800000000, "1582-10-15T00:00:00.000000Z", -12219292800000),
    ),
}


def row(key: int, published: tuple) -> dict:
    return dict(zip(("id", "d", "ts", "tstz", "ts3"), (key, *published), strict=True))


@pytest.mark.parametrize("value", list(VALUES))
def test_the_snapshots_julian_timestamps_are_read_on_postgresqls_calendar(value):
    """The snapshot published timestamps before 1582-10-15 on the Julian calendar (year 1 two days off,
    year 1000 six); they decode to PostgreSQL's values, as streaming's do. Dates came right."""
    snapshot, streaming = VALUES[value]
    rows, notices = decoded([message("r", row(1, snapshot)), message("c", row(2, streaming))])
    for r in rows:
        assert r["after"]["d"] == value.split(" ")[0]
        assert r["after"]["ts"] == r["after"]["ts3"] == value
        assert r["after"]["tstz"] == streaming[2]  # (written as the instant's day and time in UTC)
    assert bool(notices) == value.startswith("1582-10-15")  # (1582-10-05..14's published day too)


def test_a_newer_connector_is_not_corrected_but_noticed():
    """After 3.5.0 the snapshot's reading may have changed (Debezium's pull request 7470): the values are
    kept as published, and the columns noticed (a warning naming them, once per table)."""
    snapshot, _ = VALUES["0001-01-01 00:00:00"]
    rows, notices = decoded([message("r", row(1, snapshot), version="3.6.0.Final")])
    assert rows[0]["after"]["ts"] == "0000-12-30 00:00:00"
    [(table, text)] = [((d, s, t), text) for d, s, t, text in notices]
    assert table == ("shop", "public", "tt") and "['ts', 'ts3', 'tstz']" in text


def test_the_ten_skipped_days_are_noticed():
    """PostgreSQL's 1582-10-14 (no day of the Julian/Gregorian switch) is published by the snapshot as
    1582-10-24, a real date too: kept, and the columns noticed; streaming publishes it right."""
    snapshot = (-141418, -12218515200000000, "1582-10-24T00:00:00.000000Z", -12218515200000)
    streaming = (-141428, -12219379200000000, "1582-10-14T00:00:00.000000Z", -12219379200000)
    rows, notices = decoded([message("r", row(1, snapshot)), message("c", row(2, streaming))])
    assert rows[0]["after"]["d"] == "1582-10-24" and rows[1]["after"]["d"] == "1582-10-14"
    [(*table, text)] = notices
    assert table == ["shop", "public", "tt"]
    assert "['d', 'ts', 'ts3', 'tstz']" in text and "ten days late" in text


@pytest.mark.parametrize(
    ("which", "published"),
    [
        ("infinity", (-622191234, 9223372036825200000, "infinity", 9223372036825200)),  # snapshot
        ("-infinity", (-625821272, -9223372036832400000, "-infinity", -9223372036832400)),
        ("infinity", (-2147472692, 9223372036825200000, "infinity", 9223372036825200)),  # streaming
        ("-infinity", (-2147472691, -9223372036832400000, "-infinity", -9223372036832400)),
    ],
)
def test_infinity_is_a_dead_letter_naming_the_column_and_the_value(which, published):
    """No Delta date or timestamp is PostgreSQL's ``infinity``: the row is a dead letter whose error names
    each column and what PostgreSQL held, never a wrong date."""
    rows, _ = decoded([message("r", row(1, published)), message("c", row(2, published))])
    for r in rows:
        for column, value in zip(("d", "ts", "tstz", "ts3"), published, strict=True):
            assert f"{column} is PostgreSQL's '{which}' (published as {value})" in r["error"]


def test_a_table_keeps_each_of_its_notices():
    """A table may need several warnings (a DEFAULT the JsonConverter may have written for a NULL, and
    doubtful snapshot dates): each is kept, none replaces the other."""
    message_ = message("r", row(1, VALUES["1582-10-15 00:00:00"][0]))
    for image in message_["schema"]["fields"]:
        image["fields"] = [{**f, "default": "x"} if f["field"] == "tstz" else f for f in FIELDS]
    _rows, notices = decoded([message_, message("c", row(2, VALUES["1582-10-15 00:00:00"][1]))])
    texts = [text for *_table, text in notices]
    assert len(texts) == 2 and any("replace.null.with.default" in t for t in texts), texts
    assert any("ten days late" in t for t in texts), texts
