"""The job page shows the op-family coverage a built-in suite recorded (issue 20), and an untrusted coverage.json
(hostile names, wrong types, too big, not JSON) never breaks the page or reaches it unescaped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from service.config import Settings
from service.store import Store
from service.web.browser import coverage_view
from tests.browser.seed import SeededTest, seed_job, seed_run


def _attempt_dir(settings: Settings, store: Store) -> tuple[str, Path]:
    run = seed_run(store)
    job = seed_job(settings, store, run, [SeededTest("correctness/test_breadth_models.py::test_a")])
    return job.id, settings.artifacts_dir / run.id / job.id / "1"


def test_job_page_shows_covered_and_uncovered_families(client: FlaskClient, settings: Settings,
                                                       store: Store) -> None:
    job_id, directory = _attempt_dir(settings, store)
    (directory / "coverage.json").write_text(json.dumps({
        "format": 1, "torch": "2.13.0+cpu", "device": "cpu", "denominator": 8, "cache_hits": 3,
        "covered": ["aten.cumsum", "aten.bitwise_xor", "<script>alert(1)</script>", 7],
        "uncovered": ["aten.sort", "aten.topk"],
    }))
    page = client.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "2 of 8 op families (25.0 %) compiled on cpu with torch 2.13.0+cpu." in page
    assert "3 graphs came whole from the compile cache" in page
    assert "aten.bitwise_xor aten.cumsum" in page and "aten.sort aten.topk" in page
    assert "<script>alert" not in page and "alert(1)" not in page  # not a family name: dropped, not shown
    assert f'href="/jobs/{job_id}/files/coverage.json"' in page


@pytest.mark.parametrize("content", [
    b"not json", b"[1, 2]", json.dumps({"denominator": "8", "covered": []}).encode(),
    json.dumps({"denominator": True, "covered": []}).encode(), json.dumps({"denominator": 0}).encode(),
    b'{"denominator": 5, "covered": [' + b'"aten.x",' * (coverage_view.MAX_BYTES // 9) + b'"aten.y"]}',
])
def test_malformed_or_oversized_coverage_is_left_out(client: FlaskClient, settings: Settings, store: Store,
                                                     content: bytes) -> None:
    job_id, directory = _attempt_dir(settings, store)
    (directory / "coverage.json").write_bytes(content)
    response = client.get(f"/jobs/{job_id}")
    assert response.status_code == 200
    assert 'id="coverage"' not in response.get_data(as_text=True)


def test_a_job_without_coverage_has_no_section(client: FlaskClient, settings: Settings, store: Store) -> None:
    job_id, _directory = _attempt_dir(settings, store)
    assert 'id="coverage"' not in client.get(f"/jobs/{job_id}").get_data(as_text=True)
