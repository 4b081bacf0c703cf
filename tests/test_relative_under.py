"""replicator.paths.relative_under: lexically first, resolved (links followed) only when that fails."""

from __future__ import annotations

import os

from replicator.paths import relative_under


def test_lexical_resolved_and_outside(tmp_path):
    target = tmp_path / "lake"
    (target / "shop" / "orders").mkdir(parents=True)
    assert relative_under(target, target / "shop" / "orders") == "shop/orders"
    assert relative_under(str(target), f"{target}/shop/../shop/orders") == "shop/orders"
    os.symlink(target, tmp_path / "link")  # the same folder under another name: under it once resolved
    assert relative_under(target, tmp_path / "link" / "shop" / "orders") == "shop/orders"
    assert relative_under(target, tmp_path / "elsewhere") is None
    assert relative_under(target, target) is None
