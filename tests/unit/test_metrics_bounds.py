"""A job writes its tests' metrics.json: what the store keeps of it is bounded and typed, whatever the job wrote."""

from __future__ import annotations

import json
from pathlib import Path

from service.jobs.outcome import MAX_ITEM, MAX_ITEMS, MAX_METRICS, MAX_TEXT, bounded_metrics, read_json


def test_only_numbers_short_strings_and_short_string_lists_are_kept() -> None:
    hostile = {
        "graph_breaks": 2, "compile_time_s": 1.5, "nodeid": "x" * 100_000,
        "graph_break_reasons": ["r" * 10_000] * 1_000 + [{"nested": 1}],  # type: ignore[list-item]
        "nested": {"deep": ["x"] * 10}, "k" * 500: 1,
        **{f"extra_{i}": i for i in range(1_000)},
    }
    kept = bounded_metrics(hostile)
    assert kept["graph_breaks"] == 2 and kept["compile_time_s"] == 1.5
    assert len(kept["nodeid"]) == MAX_TEXT  # type: ignore[arg-type]
    reasons = kept["graph_break_reasons"]
    assert isinstance(reasons, list) and len(reasons) == MAX_ITEMS and all(len(r) == MAX_ITEM for r in reasons)
    assert "nested" not in kept and "k" * 500 not in kept and len(kept) == MAX_METRICS


def test_an_oversized_file_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps({"outcome": "passed", "pad": "x" * 1_000_000}))
    assert read_json(path) == {}
    path.write_text(json.dumps({"outcome": "passed"}))
    assert read_json(path) == {"outcome": "passed"}
