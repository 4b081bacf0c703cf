from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replicator import types
from replicator.types import ColumnType, arrow_type, column_type, parse_values


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("tinyint(4)", pa.int8()),
        ("tinyint(3) unsigned", pa.int16()),
        ("smallint unsigned", pa.int32()),
        ("mediumint(9)", pa.int32()),
        ("int(11)", pa.int32()),
        ("int(10) unsigned", pa.int64()),
        ("bigint(20)", pa.int64()),
        ("bigint(20) unsigned zerofill", pa.decimal128(20, 0)),
        ("decimal(12,2)", pa.decimal128(12, 2)),
        ("numeric(38,0)", pa.decimal128(38, 0)),
        ("decimal(65,30)", pa.string()),
        ("decimal", pa.string()),
        ("float", pa.float64()),
        ("double precision", pa.float64()),
        ("varchar(255)", pa.string()),
        ("text", pa.string()),
        ("enum('a','b')", pa.string()),
        ("json", pa.string()),
        ("date", pa.date32()),
        ("datetime(6)", pa.timestamp("us")),
        ("timestamp(3)", pa.timestamp("us", tz="UTC")),
        ("timestamp without time zone", pa.timestamp("us")),
        ("timestamp(6) with time zone", pa.timestamp("us", tz="UTC")),
        ("time(3)", pa.string()),
        ("year(4)", pa.int16()),
        ("bit(1)", pa.bool_()),
        ("bit(10)", pa.int64()),
        ("bit(64)", pa.decimal128(20, 0)),
        ("binary(16)", pa.binary()),
        ("longblob", pa.binary()),
        ("bytea", pa.binary()),
        ("boolean", pa.bool_()),
        ("NUMBER(10,2)", pa.decimal128(10, 2)),
        ("jdbc:4", pa.int32()),
        ("jdbc:93", pa.timestamp("us")),
        ("jdbc:-3", pa.binary()),
        ("integer[]", pa.string()),
    ],
)
def test_type_mapping(source, expected):
    assert arrow_type(source) == expected


def test_unknown_types_are_strings_and_flagged():
    assert column_type("geometrycollectionz") == ColumnType(pa.string(), known=False)
    assert column_type("GeometryCollectionZ(3)") == ColumnType(pa.string(), known=False)
    assert column_type("varchar(8)") == ColumnType(pa.string(), known=True)  # a string, but a known one


@pytest.mark.parametrize(
    ("target", "values", "expected", "bad"),
    [
        (pa.int8(), ["127", "-128", "128", None], [127, -128, None, None], [2]),
        (pa.int64(), ["9223372036854775807", "1.5", ""], [9223372036854775807, None, None], [1, 2]),
        (
            pa.decimal128(20, 0),
            ["18446744073709551615", "-1"],
            [Decimal("18446744073709551615"), Decimal(-1)],
            [],
        ),
        (
            pa.decimal128(5, 2),
            ["-999.99", "0.10", "1.005", "1000.00"],
            [Decimal("-999.99"), Decimal("0.10"), None, None],
            [2, 3],
        ),
        (pa.float64(), ["1.2510357E7", "-0.0", "abc"], [12510357.0, -0.0, None], [2]),
        (pa.bool_(), ["1", "0", "true", "f", "2"], [True, False, True, False, None], [4]),
        (pa.date32(), ["2024-02-29", "2023-02-29"], [dt.date(2024, 2, 29), None], [1]),
        (pa.binary(), ["00ff7f", "zz"], [b"\x00\xff\x7f", None], [1]),
        (pa.string(), ["", None, "多字节"], ["", None, "多字节"], []),
    ],
)
def test_parse_values_is_strict(target, values, expected, bad):
    typed, errors = parse_values(pa.array(values, pa.string()), target)
    assert typed.to_pylist() == expected
    assert [e.row for e in errors] == bad


def test_timestamps_wall_clock_in_source_zone_or_explicit_offset():
    typed, errors = parse_values(
        pa.array(["2024-07-01 08:00:00.123456", "2024-07-01T00:00:00Z", "2024-07-01 02:00:00+02:00"]),
        pa.timestamp("us", tz="UTC"),
        timezone="Asia/Shanghai",
    )
    assert not errors
    assert typed.to_pylist() == [
        dt.datetime(2024, 7, 1, 0, 0, 0, 123456, tzinfo=dt.UTC),
        dt.datetime(2024, 7, 1, 0, 0, tzinfo=dt.UTC),
        dt.datetime(2024, 7, 1, 0, 0, tzinfo=dt.UTC),
    ]


def test_zero_dates_policy():
    values = pa.array(["0000-00-00 00:00:00", "2024-01-01 00:00:00"])
    typed, errors = parse_values(values, pa.timestamp("us"))
    assert typed.to_pylist()[0] is None and not errors
    _typed, errors = parse_values(values, pa.timestamp("us"), zero_dates="dead_letter")
    assert [e.row for e in errors] == [0]


# Pieces of the texts a column of timestamps or decimals may hold, common and odd.
_TIME_TEXTS = st.sampled_from(
    [
        "2024-01-01 10:00:00", "2024-07-01T08:00:00.123456", "2024-01-01T", "2024-01-01",
        " 2024-01-01 10:00:00 ", "0000-00-00 00:00:00", "2024-07-01T00:00:00Z", "2024-07-01 02:00:00+02:00",
        "2024-07-01 02:00:00-05", "2024-03-10 02:30:00", "20240101T100000", "abcdefghijTk", "",
    ]
)  # fmt: skip
_NUMBER_TEXTS = st.sampled_from(
    [
        "123.45",
        "-999.99",
        "1e3",
        "1E-2",
        " 12.5 ",
        "-0000000000123.4",
        "0.001",
        "99999999999",
        "1" * 40,
        "x",
        "",
    ]
)


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.none() | _TIME_TEXTS, max_size=12),
    target=st.sampled_from([pa.timestamp("us"), pa.timestamp("us", tz="UTC"), pa.date32()]),
    timezone=st.sampled_from(["UTC", "Asia/Shanghai"]),
)
def test_a_time_column_skips_only_work_it_does_not_need(values, target, timezone):
    """parse_values skips the rewrite of ISO "T"s where no text has one, and the zone lookup for UTC: the
    column gives what the full path gives (every text rewritten, UTC looked up as Etc/UTC), errors too."""
    column = pa.array(values, pa.string())
    got = parse_values(column, target, timezone=timezone)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(types, "_byte_at", lambda *_: True)
        full = parse_values(column, target, timezone="Etc/UTC" if timezone == "UTC" else timezone)
    assert got[0].equals(full[0])
    assert got[1] == full[1]


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.none() | _NUMBER_TEXTS, max_size=12),
    target=st.sampled_from([pa.decimal128(p, s) for p, s in [(5, 2), (12, 2), (38, 38), (20, 0)]]),
)
def test_a_decimal_column_is_read_exactly(values, target):
    """Each text becomes its exact decimal, or is refused where it is not a number, needs rounding or has
    a whole part wider than the column (Python's decimal as the reference): checking the whole part's
    width only where a text is long enough to exceed it, and finding exponents by plain search, change
    nothing."""
    typed, errors = parse_values(pa.array(values, pa.string()), target)
    expected = [_exact_decimal(v, target) for v in values]
    assert typed.to_pylist() == [None if e is _REFUSED else e for e in expected]
    assert [e.row for e in errors] == [i for i, e in enumerate(expected) if e is _REFUSED]


_REFUSED = object()


def _exact_decimal(text: str | None, target: pa.Decimal128Type) -> Decimal | object | None:
    import decimal

    if text is None:
        return None
    with decimal.localcontext(decimal.Context(prec=200)):
        try:
            value = Decimal(text.strip())
        except decimal.InvalidOperation:
            return _REFUSED
        scaled = value.quantize(Decimal(1).scaleb(-target.scale))
        if scaled != value or len(scaled.as_tuple().digits) > target.precision:
            return _REFUSED
        return scaled
