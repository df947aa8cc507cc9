"""Generated code of a test at base and at head: normalised, its graphs paired, compared and diffed.

Two runs of the same code under inductor differ in more than the code: the AOT graph counter depends on how many
graphs the process compiled before (test order), Triton kernels name the cache file they were written to and the
hash of the compiler build, paths hold a user name or a temporary folder, and a warm cache writes the same graphs
in another order. `normalise` removes the first, `changed` compares graphs as a multiset, so that it says True only
when the compiler's output changed. Pure functions: callers cap what they read.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections import Counter, defaultdict, deque
from collections.abc import Sequence

# (pattern, replacement), applied in order; each one names what varies between two runs of the same code.
_VOLATILE: tuple[tuple[re.Pattern[str], str], ...] = (
    # "# AOT ID: ['3_inference']": a per-process counter of compiled graphs, so it moves with test order.
    (re.compile(r"(# AOT ID: \[')\d+_"), r"\1N_"),
    # Triton and template kernels: "# kernel path: /tmp/torchinductor_<user>/ab/cab…py" (the cache file).
    (re.compile(r"^(\s*# kernel path:).*$", re.M), r"\1 <cache path>"),
    # The Triton build's hash in each kernel's inductor_meta ('backend_hash': 'F00D…').
    (re.compile(r"""(['"]backend_hash['"]\s*:\s*)(['"])[^'"]*\2"""), r"\1'<hash>'"),
    # Paths of inductor's cache, of a temporary or a pytest folder (a header #include, a loaded .so).
    (re.compile(r"""(?:/[^\s'"()<>]*)?/(?:torchinductor_[^/\s'"]+|(?:tmp|var/folders)(?![\w.-])|pytest-of-[^/\s'"]+)"""
                r"""(?:/[^\s'"()<>,]*)?"""), "<tmp path>"),
    # Cache keys and content hashes: 52-character base32 file names ("c" + 51), 32+ hex digits.
    (re.compile(r"\b[a-z][a-z2-7]{51}\b"), "<hash>"),
    (re.compile(r"\b[0-9a-fA-F]{32,}\b"), "<hash>"),
    # A kernel or module name that ends in a hash (e.g. "kernel_cpp_3f9a0c21d4e5b6a7").
    (re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*?)_[0-9a-f]{16,31}\b"), r"\1_<hash>"),
    # Object addresses in a repr ("<function f at 0x7f3a2c1d5e40>").
    (re.compile(r"\b0x[0-9a-fA-F]{8,16}\b"), "0x<addr>"),
    # Wall-clock times written into comments (2026-11-23 04:31:02.123456, 2026-11-23T04:31:02Z).
    (re.compile(r"\b\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?\b"), "<time>"),
)
_TRAILING_SPACE = re.compile(r"[ \t]+$", re.M)

# Graphs pair when at least this share of their distinctive lines is common (Jaccard); lower pairs are a graph
# removed and another added, unless they are alone in the same gap (then it is the same graph, changed).
MIN_SIMILARITY = 0.3


@functools.lru_cache(maxsize=32)  # a page pairs, compares and diffs the same codes: normalise each once
def normalise(code: str) -> str:
    """The code with what differs between two runs of the same compilation replaced by placeholders."""
    code = code.replace("\r\n", "\n").replace("\r", "\n")
    for pattern, replacement in _VOLATILE:
        code = pattern.sub(replacement, code)
    return _TRAILING_SPACE.sub("", code).rstrip("\n") + "\n" if code.strip() else ""


def changed(base_codes: Sequence[str], head_codes: Sequence[str]) -> bool:
    """True if the head's generated code differs from the base's as a multiset of normalised graphs: a graph
    added, removed or rewritten. The order they were written in is not compared: a cold compile writes a graph's
    backward when the test runs it, a warm one loads it with its forward (AOT-autograd cache), and tests that
    share compiled frames compile them in whichever order they run."""
    return Counter(map(normalise, base_codes)) != Counter(map(normalise, head_codes))


def _line_sets(codes: Sequence[str]) -> list[frozenset[str]]:
    return [frozenset(line.strip() for line in normalise(code).splitlines() if line.strip()) for code in codes]


def _similarities(base: Sequence[str], head: Sequence[str]) -> list[list[float]]:
    """Jaccard similarity of the lines of each base graph with each head graph, ignoring the boilerplate every
    graph shares (imports, helpers) when there are enough graphs to tell what that is."""
    base_sets, head_sets = _line_sets(base), _line_sets(head)
    every = base_sets + head_sets
    common = frozenset.intersection(*every) if len(every) >= 3 else frozenset()

    def jaccard(one: frozenset[str], other: frozenset[str]) -> float:
        one, other = one - common, other - common
        union = len(one | other)
        return len(one & other) / union if union else 1.0

    return [[jaccard(b, h) for h in head_sets] for b in base_sets]


def _aligned(similarity: list[list[float]], n: int, m: int) -> list[tuple[int, int]]:
    """The order-preserving pairing of base and head graphs with the greatest total similarity (edit-distance
    style dynamic programme), only pairs at or above MIN_SIMILARITY."""
    best = [[0.0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            pair = similarity[i][j] + best[i + 1][j + 1] if similarity[i][j] >= MIN_SIMILARITY else -1.0
            best[i][j] = max(pair, best[i + 1][j], best[i][j + 1])
    pairs, i, j = [], 0, 0
    while i < n and j < m:
        if similarity[i][j] >= MIN_SIMILARITY and best[i][j] == similarity[i][j] + best[i + 1][j + 1]:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif best[i][j] == best[i + 1][j]:
            i += 1
        else:
            j += 1
    return pairs


def match_graphs(base: Sequence[str], head: Sequence[str]) -> list[tuple[int | None, int | None]]:
    """Pairs (base index, head index) in the head's graph order; (i, None) a graph only the base compiled (after
    the head graph paired with the base graph before it), (None, j) one only the head compiled.

    Identical graphs (once normalised) pair first, wherever each side wrote them (see `changed`). The others pair
    in order by similarity; between two such pairs, equally many unpaired ones on each side pair up by position
    (the same graph, rewritten)."""
    waiting: dict[str, deque[int]] = defaultdict(deque)
    for i, code in enumerate(base):
        waiting[normalise(code)].append(i)
    same = {j: waiting[normalise(code)].popleft() for j, code in enumerate(head) if waiting[normalise(code)]}
    paired_base = set(same.values())
    rest_base = [i for i in range(len(base)) if i not in paired_base]
    rest_head = [j for j in range(len(head)) if j not in same]
    pairs: list[tuple[int | None, int | None]] = [(i, j) for j, i in same.items()]
    pairs += [(None if b is None else rest_base[b], None if h is None else rest_head[h])
              for b, h in _in_order([base[i] for i in rest_base], [head[j] for j in rest_head])]
    after = {i: j for i, j in pairs if i is not None and j is not None}

    def place(pair: tuple[int | None, int | None]) -> tuple[int, int, int]:
        i, j = pair[0] or 0, pair[1]
        return (j, 0, 0) if j is not None else (max((after[k] for k in after if k < i), default=-1), 1, i)

    return sorted(pairs, key=place)


def _in_order(base: Sequence[str], head: Sequence[str]) -> list[tuple[int | None, int | None]]:
    """Graphs paired by similarity without crossing (graphs are compiled in program order), gaps by position."""
    pairs = _aligned(_similarities(base, head), len(base), len(head))
    result: list[tuple[int | None, int | None]] = []
    previous = (-1, -1)
    for anchor in [*pairs, (len(base), len(head))]:
        gap_base = list(range(previous[0] + 1, anchor[0]))
        gap_head = list(range(previous[1] + 1, anchor[1]))
        if len(gap_base) == len(gap_head):
            result.extend(zip(gap_base, gap_head, strict=True))
        else:
            result.extend((i, None) for i in gap_base)
            result.extend((None, j) for j in gap_head)
        if anchor != (len(base), len(head)):
            result.append(anchor)
        previous = anchor
    return result


def unified(base: str, head: str, context: int = 3) -> list[str]:
    """A unified diff (`---`/`+++` headers, `@@` hunks) of the normalised code; [] when they are the same."""
    return list(difflib.unified_diff(normalise(base).splitlines(), normalise(head).splitlines(),
                                     "base", "head", n=max(0, context), lineterm=""))
