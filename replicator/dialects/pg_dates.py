"""PostgreSQL dates and timestamps that Debezium's PostgreSQL connector publishes as no date, or wrong
(issue 51; the values below as Debezium 3.5.0.Final published them in tests/test_e2e_postgres.py).

**Infinity.** PostgreSQL's ``date``/``timestamp``/``timestamptz`` hold ``infinity`` and ``-infinity``. Delta's
dates and timestamps end at years 1 and 9999, so no mirror value is the same: such a row is a dead letter
whose error names the column and the value (:func:`infinity_reason`), never a wrong date.

**The snapshot's calendar.** The snapshot (``op: "r"``) reads rows over JDBC as ``java.sql.Timestamp``,
whose calendar is the Julian one before 1582-10-15, while PostgreSQL's is the proleptic Gregorian one
(debezium/debezium pull request 7470, "Fix Julian/Gregorian calendar jump for Postgres timestamp"): a
``timestamp '0001-01-01 00:00'`` is published by the snapshot as 0000-12-30 (two days off, six in year
1000, ten in 1582), by streaming right. The snapshot's value is the Julian reading of the database's
label, so before 1582-10-15 it is undone exactly (:func:`snapshot_calendar`). Dates are read as
``LocalDate`` and come right, except the ten days 1582-10-05..14 that the Julian/Gregorian switch skipped:
the snapshot publishes them ten days later, as 1582-10-15..24, which are also real dates. Values published
in those ten days cannot be told apart and are noticed (a warning naming the table and column). Connector
versions after 3.5.0 are not corrected (the pull request changes the snapshot's reading), only noticed."""

from __future__ import annotations

import re
from typing import Any

# Debezium 3.5's numbers for PostgreSQL's infinities: streaming / snapshot (date: epoch days as int32,
# overflowed; timestamp: PgJDBC's DATE_POSITIVE_INFINITY / DATE_NEGATIVE_INFINITY in ms, times 1000 in us)
DAYS = {-2147472692: "infinity", -622191234: "infinity", -2147472691: "-infinity", -625821272: "-infinity"}
MILLIS = {9223372036825200: "infinity", -9223372036832400: "-infinity"}
MICROS = {k * 1000: v for k, v in MILLIS.items()}
INFINITE_TEXT = frozenset(("infinity", "-infinity"))  # io.debezium.time.ZonedTimestamp's
INFINITE = {
    "io.debezium.time.Date": DAYS,
    "org.apache.kafka.connect.data.Date": DAYS,
    "io.debezium.time.Timestamp": MILLIS,
    "org.apache.kafka.connect.data.Timestamp": MILLIS,
    "io.debezium.time.MicroTimestamp": MICROS,
}
ZONED = "io.debezium.time.ZonedTimestamp"
TIMESTAMPS = frozenset(("datetime", "timestamp"))  # source types (debezium_values.LOGICAL_TYPES) of both
SWITCH = -141427  # 1582-10-15 in epoch days: the first Gregorian day of java.sql.Timestamp
SKIPPED = 10  # 1582-10-05..14: no Julian/Gregorian day, published ten days later
CORRECTED_UP_TO = (3, 5, 0)  # the connector versions seen to read the snapshot so (3.5.0.Final)
_LABEL = re.compile(r"^(-?\d{4,})-(\d\d)-(\d\d)(.*)$", re.DOTALL)


def infinity_reason(column: str, name: str | None, value: Any) -> str | None:
    """Why a column's value (of the logical type ``name``) is no date: PostgreSQL's ``infinity`` /
    ``-infinity`` (None: not one)."""
    if name == ZONED:
        which = value if value in INFINITE_TEXT else None
    else:
        which = INFINITE.get(name or "", {}).get(value) if type(value) is int else None
    if which is None:
        return None
    return f"{column} is PostgreSQL's '{which}' (published as {value}), beyond Delta's years 1 to 9999"


def proleptic_days(year: int, month: int, day: int) -> int:
    """Epoch days of a proleptic Gregorian date, any year (days_from_civil, H. Hinnant)."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def julian_label(days: int) -> tuple[int, int, int]:
    """The Julian calendar's (year, month, day) of epoch days (astronomical years: 0 is 1 BC)."""
    c = days + 2440588 + 32082  # Julian day number + 32082
    d = (4 * c + 3) // 1461
    e = c - 1461 * d // 4
    m = (5 * e + 2) // 153
    return d - 4800 + m // 10, m + 3 - 12 * (m // 10), e - (153 * m + 2) // 5 + 1


def version(src: dict[str, Any]) -> tuple[int, ...] | None:
    found = re.match(r"^(\d+)\.(\d+)\.(\d+)", str(src.get("version") or ""))
    return tuple(int(g) for g in found.groups()) if found else None


def snapshot_calendar(
    image: dict[str, str | None] | None, types: dict[str, str | None], src: dict[str, Any]
) -> tuple[dict[str, str | None] | None, list[str]]:
    """A snapshot row's timestamps before 1582-10-15 back on PostgreSQL's calendar (connector versions
    up to 3.5.0), and the columns whose value may be ten days late (noticed, not changed)."""
    if not image:
        return image, []
    known = (version(src) or (0,)) <= CORRECTED_UP_TO
    out, doubtful = dict(image), []
    for name, text in image.items():
        kind = types.get(name)
        if text is None or (kind not in TIMESTAMPS and kind != "date"):
            continue
        found = _LABEL.match(text)
        if found is None:
            continue
        days = proleptic_days(*(int(g) for g in found.groups()[:3]))
        if days >= SWITCH + SKIPPED:
            continue
        if kind == "date":  # (read as LocalDate: right before the ten days)
            if days >= SWITCH:
                doubtful.append(name)
            continue
        if days >= SWITCH or not known:
            doubtful.append(name)
            continue
        year, month, day = julian_label(days)
        if year >= 1:
            out[name] = f"{year:04d}-{month:02d}-{day:02d}{found.group(4)}"
    return out, doubtful


def doubtful_notice(columns: list[str]) -> str:
    after = ".".join(map(str, CORRECTED_UP_TO))
    return (
        f"columns {sorted(columns)} hold snapshot dates or timestamps Debezium's PostgreSQL connector may "
        "have published ten days late (it reads PostgreSQL's 1582-10-05..14 as 1582-10-15..24, and reads "
        f"timestamps before 1582-10-15 on the Julian calendar, not corrected after version {after}"
        "): compare them with the database (docs/how-to/postgresql-debezium.md)"
    )
