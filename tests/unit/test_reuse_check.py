"""When reused results hold (service/planning/reuse_check.py): every reused group's key and the run-time compiler
fingerprint equal to the source's; and the job's surface.json, which says its fingerprint, read as untrusted data."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from service.jobs.surface_file import SURFACE_FILE, agreed, read_fingerprint
from service.planning.reuse_check import disagreement
from service.store.reuse import JobInputs
from suites.shard_plan import CORPUS_GROUP


def inputs(job: str, fingerprint: str | None = "", reused: tuple[str, ...] = (), **changed: object) -> JobInputs:
    fields: dict[str, object] = {"suites": "s", "build": "image-1", "device": "cpu", "torch": "", "config": "c",
                                 "keys": {CORPUS_GROUP: "k-corpus", "zoo.vit:examples": "k-vit"}}
    return JobInputs(job_id=job, attempt=1, fingerprint=fingerprint, reused=list(reused), **{**fields, **changed})


REUSED = (CORPUS_GROUP, "zoo.vit:examples")


@pytest.mark.parametrize(("mine", "theirs", "said"), [
    (inputs("head", reused=REUSED), inputs("base"), ""),
    (inputs("head", reused=(CORPUS_GROUP,), keys={CORPUS_GROUP: "k-corpus", "zoo.vit:examples": "other"}),
     inputs("base"), ""),  # a group it runs may differ
    (inputs("head", reused=REUSED, keys={CORPUS_GROUP: "k-corpus", "zoo.vit:examples": "other"}), inputs("base"),
     "the files zoo.vit:examples imports differ from job base's"),
    (inputs("head", reused=REUSED, build="image-2", keys={CORPUS_GROUP: "x", "zoo.vit:examples": "y"}),
     inputs("base"), "the inputs of the built-in corpus differ from job base's (suite code, image, torch or config)"),
    (inputs("head", reused=REUSED, keys={CORPUS_GROUP: "k-corpus"}), inputs("base"),
     "the files zoo.vit:examples imports differ"),  # no key of its own (its closure could not be read): unsure
    (inputs("head", "f00d", reused=REUSED), inputs("base"),
     "the compiler fingerprint at run time (f00d) differs from job base's (none changed)"),
    (inputs("head", None, reused=REUSED), inputs("base"), "this job's compiler fingerprint is unknown"),
    (inputs("head", reused=REUSED), inputs("base", None), "job base's compiler fingerprint is unknown"),
    (inputs("head", reused=REUSED), None, "its source recorded no inputs"),
])
def test_reused_results_hold_only_when_every_input_is_the_same(mine: JobInputs, theirs: JobInputs | None,
                                                                said: str) -> None:
    found = disagreement(mine, theirs)
    assert (found == "") if not said else said in found, found


def write(out: Path, data: object) -> None:
    (out / SURFACE_FILE).write_text(data if isinstance(data, str) else json.dumps(data))


@pytest.mark.parametrize(("content", "read"), [
    ({"fingerprint": "", "changes": []}, ""),
    ({"fingerprint": "0123456789abcdef0123456789abcdef", "changes": [{"place": "aten.sin"}]},
     "0123456789abcdef0123456789abcdef"),
    ({"fingerprint": "unknown-12-34"}, "unknown-12-34"),
    ({"fingerprint": "x" * 121}, None),  # longer than any fingerprint the suites write
    ({"fingerprint": "<img src=x>"}, None),
    ({"fingerprint": ["a"]}, None),
    ([], None),
    ("not json", None),
    ('{"fingerprint": NaN}', None),
    # What reused results are checked by: `reuse` (installed requirements' own patches left out) when written.
    ({"fingerprint": "0123456789abcdef0123456789abcdef", "reuse": ""}, ""),
    ({"fingerprint": "", "reuse": "fedcba9876543210fedcba9876543210"}, "fedcba9876543210fedcba9876543210"),
    ({"fingerprint": "", "reuse": "<b>"}, None),  # a bad `reuse` is unsure, never the other field
    ({"fingerprint": "", "reuse": None}, None),
])
def test_a_jobs_surface_file_is_read_bounded_and_checked_for_shape(tmp_path: Path, content: object,
                                                                   read: str | None) -> None:
    write(tmp_path, content)
    assert read_fingerprint(tmp_path) == read


def test_a_link_or_a_huge_surface_file_is_unsure(tmp_path: Path) -> None:
    assert read_fingerprint(tmp_path) is None  # none written: a job that ended first, or an older image
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"fingerprint": ""}))
    os.symlink(secret, tmp_path / SURFACE_FILE)  # never followed
    assert read_fingerprint(tmp_path) is None
    (tmp_path / SURFACE_FILE).unlink()
    write(tmp_path, '{"fingerprint": "", "pad": "' + "x" * (5 * 1024 * 1024) + '"}')
    assert read_fingerprint(tmp_path) is None


def test_shards_agree_or_the_job_is_unsure() -> None:
    assert agreed(["", ""]) == "" and agreed(["a1", "a1"]) == "a1"
    assert agreed(["", "a1"]) is None and agreed(["", None]) is None and agreed([]) is None
