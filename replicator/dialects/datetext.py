"""Epoch counts -> the date and clock text Spark wrote: proleptic Gregorian calendar, integer arithmetic (no
float, no time zone). Shared by Debezium's values (epoch days/ms/us/ns) and DRS JSON (epoch seconds)."""

from __future__ import annotations

import datetime as dt

_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()


def _year(year: int) -> str:
    """Spark's date text of a year: 4 digits, ``+`` beyond 9999, ``-`` before year 0 (proleptic)."""
    if year > 9999:
        return f"+{year}"
    return f"-{-year:04d}" if year < 0 else f"{year:04d}"


def day_text(days: int) -> str:
    """Epoch days -> ``YYYY-MM-DD`` (proleptic Gregorian, as Spark's DATE)."""
    ordinal = days + _EPOCH_ORDINAL
    if 1 <= ordinal <= 3_652_059:  # years 1..9999
        return dt.date.fromordinal(ordinal).isoformat()
    z = days + 719_468  # civil_from_days (H. Hinnant)
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return f"{_year(yoe + era * 400 + (month <= 2))}-{month:02d}-{day:02d}"


def clock_text(total: int, unit: int) -> str:
    """HH:MM:SS[.f] from a non-negative count of 1/unit seconds (hours are not wrapped: MySQL TIME); the
    fraction without trailing zeros."""
    seconds, fraction = divmod(total, unit)
    clock = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    if not fraction:
        return clock
    return f"{clock}.{str(fraction).rjust(len(str(unit)) - 1, '0').rstrip('0')}"
