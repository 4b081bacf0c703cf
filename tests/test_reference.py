"""The job-file reference page (docs/reference/job-file.md) is generated from replicator/config.py's models:
the committed page must be what the models say, and every key must have a description."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from replicator.commands import reference
from replicator.config import JobConfig


def test_committed_page_matches_the_models():
    committed = reference.PAGE.read_text(encoding="utf-8")
    assert committed == reference.render(), "run: python -m replicator.commands.reference"


def test_every_key_of_the_job_file_is_on_the_page():
    page = reference.render()
    keys = []
    pending = [(JobConfig, "")]
    while pending:
        model, prefix = pending.pop()
        for name, info in model.model_fields.items():
            if info.exclude:
                continue
            keys.append(f"{prefix}{name}")
            for inner in reference._models(info.annotation):
                listed = "[]" if str(info.annotation).startswith("list[") else ""
                pending.append((inner, f"{prefix}{name}{listed}."))
    assert len(keys) > 50
    for key in keys:
        assert f"| `{key}` |" in page, key
    assert "| `tables.route[].match` | string | required |" in page
    assert "| `trigger.interval` | duration | `10 seconds` |" in page
    assert "| `source.max_decompressed_bytes` | integer (≥ 1024) | `67108864` |" in page


def test_a_key_without_a_description_fails():
    class Sample(BaseModel):
        documented: int = Field(default=1, description="has one")
        forgotten: str = "x"

    with pytest.raises(reference.MissingDescription, match=r"Sample\.forgotten \(sample\.forgotten\)"):
        reference._sections(Sample, "sample.", [], set())


def test_check_reports_a_stale_page(tmp_path, capsys):
    page = tmp_path / "job-file.md"
    page.write_text("# old\n", encoding="utf-8")
    assert reference.main(["--check", "--output", str(page)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert reference.main(["--output", str(page)]) == 0
    assert reference.main(["--check", "--output", str(page)]) == 0
