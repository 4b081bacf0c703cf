"""A landed file's records: each non-blank line is one record with its exact bytes and its line number, the
same whether the file is read or mapped, split by Arrow (the usual file) or line by line (the rest)."""

from __future__ import annotations

import mmap
from pathlib import Path

import pyarrow as pa
from hypothesis import example, given
from hypothesis import strategies as st

from replicator.sources import _split_plain, file_chunk, map_file, split_file

# Bytes that make a line special: LF ends it, CR before LF is dropped, lines of JSON whitespace alone are
# blank (\x0b, \x0c are no JSON whitespace: such a line is a record, a dead letter, never dropped unseen).
pieces = st.lists(
    st.sampled_from(
        [b"\n", b"\r", b" ", b"\t", b"\x0b", b"\x0c", "\u2028".encode(), b"{}", b"a", b"\xff", b"\r\n"]
    ),
    max_size=24,
)


def expected(content: bytes) -> tuple[list[bytes], list[int]]:
    """The rule, spelled out: split on LF, drop one trailing CR, skip lines of only JSON whitespace."""
    records, numbers = [], []
    for number, line in enumerate(content.split(b"\n"), start=1):
        line = line[:-1] if line.endswith(b"\r") else line
        if line.strip(b" \t\r"):
            records.append(line)
            numbers.append(number)
    return records, numbers


@given(parts=pieces)
@example(parts=[b"a", b"\n", b"a", b"\n"])  # the usual file: split by Arrow
@example(parts=[b"a", b"\n", b" ", b"a"])  # a line starting with a space, not blank
@example(parts=[b"a", b"\n", b"\n", b"a"])  # a blank line
@example(parts=[])
def test_a_file_splits_into_its_lines_read_or_mapped(tmp_path_factory, parts):
    content = b"".join(parts)
    path = tmp_path_factory.mktemp("landing") / "part.jsonl"
    path.write_bytes(content)
    mapped = map_file(path.as_uri())
    assert type(mapped) is (mmap.mmap if content else bytes)
    for source in (content, mapped):
        records, numbers = split_file(str(path), source)
        assert records.to_pylist() == expected(content)[0]
        assert list(numbers) == expected(content)[1]


def test_a_chunk_names_its_file_and_lines(tmp_path: Path):
    path = tmp_path / "part.jsonl"
    path.write_bytes(b'{"a":1}\n\n{"b":2}\r\n')
    chunk = file_chunk(path.as_uri(), 7, map_file(path.as_uri()))
    assert chunk.column("raw").to_pylist() == [b'{"a":1}', b'{"b":2}']
    assert chunk.column("offset").to_pylist() == [1, 3]
    assert chunk.column("partition").to_pylist() == [7, 7]
    assert chunk.column("source").to_pylist() == [path.as_uri()] * 2


def test_the_usual_file_is_split_by_arrow():
    """LF-ended lines with no blank line go the one-pass way (the general loop would give the same records,
    at five times the cost)."""
    for content in (b'{"a":1}\n{"b":2}\n', b'{"a":1}\n{"b":2}'):
        split = _split_plain(content)
        assert split is not None
        records, numbers = split
        assert records.type == pa.binary()
        assert (records.to_pylist(), list(numbers)) == ([b'{"a":1}', b'{"b":2}'], [1, 2])
    assert _split_plain(b'{"a":1}\r\n') is None
