"""The torch versions a deployment runs (COMPILE_CI_TORCH_VERSIONS) and how a version shows in names (pure).

The first version is the deployment's default: its queues, job ids and check-run names are the ones compile-ci
always had (`cpu`, `<run>-<suite>-cpu`, `correctness (cpu)`), so runs, pages and check runs made before a second
version was added stay valid. Every other version adds itself to them: queue `cpu-torch2.14`, job id
`<run>-<suite>-cpu-torch2.14`, check run `correctness (cpu, torch 2.14)`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# major.minor: a deployment serves "2.14", whichever 2.14.x (or release candidate of it) its runner holds.
NAME = r"[0-9]{1,3}\.[0-9]{1,3}"
_NAME = re.compile(NAME)
_SUFFIX = re.compile(rf"-torch({NAME})$")
ADVISORY = "advisory"
DEFAULT_VERSIONS = "2.13"


@dataclass(frozen=True)
class TorchVersion:
    name: str  # "2.14"
    # Told to users before it is theirs (a release candidate): its check runs are never red, only neutral with the
    # failures listed, and the daily canary runs every repository's default branch on it.
    advisory: bool = False


def parse_versions(raw: str) -> tuple[tuple[TorchVersion, ...], list[str]]:
    """`"2.13, 2.14 advisory"` -> the versions (default first) and every problem with the text."""
    problems: list[str] = []
    versions: list[TorchVersion] = []
    for item in (part.strip() for part in raw.split(",")):
        words = item.split()
        if not words:
            continue
        name, flags = words[0], words[1:]
        if not _NAME.fullmatch(name):
            problems.append(f"{name!r} is not a torch version of the form major.minor (e.g. 2.14)")
        if flags not in ([], [ADVISORY]):
            problems.append(f"{item!r}: after the version only the word '{ADVISORY}' may follow")
        if any(v.name == name for v in versions):
            problems.append(f"{name} is listed more than once")
        versions.append(TorchVersion(name, flags == [ADVISORY]))
    if not versions:
        problems.append("lists no version (the first one is the deployment's default, e.g. 2.13)")
    elif versions[0].advisory:
        problems.append(f"the first version is the default and cannot be advisory ({versions[0].name})")
    return tuple(versions), problems


def advisory_of(versions: tuple[TorchVersion, ...]) -> TorchVersion | None:
    """The version the daily canary runs: the deployment's first advisory one, if any."""
    return next((v for v in versions if v.advisory), None)


def find(versions: tuple[TorchVersion, ...], name: str) -> TorchVersion | None:
    return next((v for v in versions if v.name == name), None)


def job_torch(versions: tuple[TorchVersion, ...], name: str) -> str:
    """What a job row carries for a version: "" for the deployment's default (so its names stay as they were)."""
    return "" if versions and versions[0].name == name else name


def queue_for(device: str, torch: str) -> str:
    """The Celery queue of a job's (device, torch): a worker serves one torch version (its runner's)."""
    return f"{device}-torch{torch}" if torch else device


def device_queues(devices: tuple[str, ...], versions: tuple[TorchVersion, ...]) -> tuple[str, ...]:
    """Every job queue of a deployment: each device on each version."""
    return tuple(queue_for(d, job_torch(versions, v.name)) for v in versions for d in devices)


def job_suffix(torch: str) -> str:
    return f"-torch{torch}" if torch else ""


def torch_of_job_id(job_id: str) -> str:
    """The version a job id names ("" for the default), so a message of ids only still reaches the right queue."""
    match = _SUFFIX.search(job_id)
    return match.group(1) if match else ""


def check_name(suite: str, device: str, torch: str) -> str:
    return f"{suite} ({device}, torch {torch})" if torch else f"{suite} ({device})"


def same_release(installed: str, name: str) -> bool:
    """Whether a runner's torch (`2.14.1+cu130`, `2.15.0rc1`) is version `name` (`2.14`)."""
    return re.match(rf"{re.escape(name)}(?![0-9])", installed) is not None


def split_lane(lane: str) -> tuple[str, str]:
    """`cpu-torch2.14` (a queue, or a history page's device part) -> ("cpu", "2.14"); `cpu` -> ("cpu", "")."""
    torch = torch_of_job_id(lane)
    return (lane.removesuffix(job_suffix(torch)), torch)
