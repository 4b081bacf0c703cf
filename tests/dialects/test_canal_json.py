from __future__ import annotations

import pytest

from tests.dialects.golden import check_golden, params


@pytest.mark.parametrize("case", params("canal-json"))
def test_golden(case):
    check_golden(case, "canal-json")


@pytest.mark.parametrize("case", params("canal-json"))
def test_auto_detection_agrees(case):
    """Every canal example decodes the same under `auto` (parameterised mysqlType or canal DDL types tell
    canal from its DRS look-alike)."""
    check_golden(case, "auto")
