from __future__ import annotations

import pytest

from tests.dialects.golden import check_golden, params


@pytest.mark.parametrize("case", params("debezium"))
def test_golden(spark, case):
    check_golden(spark, case, "debezium")
