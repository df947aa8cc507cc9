"""service.compare.codediff: what normalising hides, how graphs pair, when code counts as changed."""

from __future__ import annotations

import pytest

from service.compare.codediff import changed, match_graphs, normalise, unified
from tests.inductor_pair import compiled_codes

TRITON_KERNEL = """\
# kernel path: /tmp/torchinductor_{user}/ab/cabcdefghijklmnopqrstuvwxyz234567abcdefghijklmnopqrstu.py
# Topologically Sorted Source Nodes: [sin, add], Original ATen: [aten.sin, aten.add]
triton_poi_fused_add_sin_0 = async_compile.triton('triton_poi_fused_add_sin_0', '''
@triton_heuristics.pointwise(
    size_hints={{'x': 128}},
    inductor_meta={{'kernel_name': 'triton_poi_fused_add_sin_0', 'backend_hash': '{hash}', 'num_load': 2}},
)
@triton.jit
def triton_poi_fused_add_sin_0(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    tmp0 = tl.load(in_ptr0 + (x0), xmask)
    tmp1 = tl_math.sin(tmp0)
''', device_str='cuda')
"""


@pytest.mark.parametrize(("one", "other"), [
    ("# AOT ID: ['0_inference']\nx = 1\n", "# AOT ID: ['17_inference']\nx = 1\n"),
    (TRITON_KERNEL.format(user="runner", hash="A" * 64), TRITON_KERNEL.format(user="root", hash="0F" * 32)),
    ('#include "/tmp/torchinductor_root/sk/cskh5dx62fglpphcrl6723dnmowdabouerrzy3dmqcngbxwfa7bv.h"\n',
     '#include "/tmp/torchinductor_ci/xx/cxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.h"\n'),
    ("load('/var/folders/9x/abc/T/tmpq1w2e3/k.so')\n", "load('/tmp/tmp8u7y6t/k.so')\n"),
    ("    # <function f at 0x7f3a2c1d5e40>\n", "    # <function f at 0x7f99aa1d0000>\n"),
    ("# compiled 2026-11-23 04:31:02.123456\n", "# compiled 2026-11-24T10:00:00Z\n"),
    ("kernel_cpp_3f9a0c21d4e5b6a7(buf0)\n", "kernel_cpp_0123456789abcdef(buf0)\n"),
    ("x = 1  \r\ny = 2\r\n\n\n", "x = 1\ny = 2\n"),
])
def test_what_differs_between_two_runs_of_the_same_code_is_normalised_away(one: str, other: str) -> None:
    assert one != other
    assert normalise(one) == normalise(other)
    assert not changed([one], [other])
    assert unified(one, other) == []


@pytest.mark.parametrize(("one", "other"), [
    ("auto tmp1 = tmp0.sin();\n", "auto tmp1 = tmp0.cos();\n"),
    ("tmp2 = tmp0 / tmp1\n", "tmp2 = tmp0 / tmp3\n"),
    ("x = y/tmp0\n", "x = y/tmp1\n"),  # "tmp" as a variable, not the folder
    ("buf0 = empty_strided_cpu((8, 16), (16, 1), torch.float32)\n",
     "buf0 = empty_strided_cpu((8, 32), (32, 1), torch.float32)\n"),
    ("c = 0x1f\n", "c = 0x2f\n"),  # small hex constants are code, not addresses
    ("XBLOCK : tl.constexpr = 1024\n", "XBLOCK : tl.constexpr = 512\n"),
])
def test_a_real_change_of_the_code_stays_a_change(one: str, other: str) -> None:
    assert changed([one], [other])
    diff = unified(one, other)
    assert diff[:2] == ["--- base", "+++ head"]
    assert f"-{one.rstrip()}" in diff and f"+{other.rstrip()}" in diff


def test_a_graph_added_or_removed_is_a_change() -> None:
    assert changed(["a = 1\n"], ["a = 1\n", "b = 2\n"])
    assert changed(["a = 1\n", "b = 2\n"], ["a = 1\n"])
    assert changed(["a = 1\n", "a = 1\n"], ["a = 1\n"])  # a multiset: the same graph twice is two graphs
    assert not changed([], [])


def test_the_same_graphs_written_in_another_order_are_unchanged() -> None:
    # A cold compile writes forward 4, forward 5, then the backwards as they run (5, 4); a warm AOT-autograd cache
    # loads each forward with its backward: 4, 4, 5, 5. The counters differ too (another test order).
    cold = ["# AOT ID: ['4_forward']\nf4\n", "# AOT ID: ['5_forward']\nf5\n",
            "# AOT ID: ['5_backward']\nb5\n", "# AOT ID: ['4_backward']\nb4\n"]
    warm = ["# AOT ID: ['7_forward']\nf4\n", "# AOT ID: ['7_backward']\nb4\n",
            "# AOT ID: ['8_forward']\nf5\n", "# AOT ID: ['8_backward']\nb5\n"]
    assert not changed(cold, warm)
    assert match_graphs(cold, warm) == [(0, 0), (3, 1), (1, 2), (2, 3)]
    assert changed(cold, [*warm[:3], warm[3].replace("b5", "b5 + 1")])


def test_real_inductor_code_of_the_same_function_is_unchanged_across_compilations() -> None:
    codes = compiled_codes()
    (f,), (f_again,) = codes["f"], codes["f_again"]
    assert f != f_again  # the AOT graph counter moved on, and more may differ in another torch
    assert normalise(f) == normalise(f_again)
    assert not changed(codes["f"], codes["f_again"])


def test_real_inductor_code_of_a_changed_function_diffs_to_the_changed_operation() -> None:
    codes = compiled_codes()
    assert changed(codes["f"], codes["g"])
    diff = unified(codes["f"][0], codes["g"][0], context=1)
    removed = [line for line in diff if line.startswith("-") and not line.startswith("---")]
    added = [line for line in diff if line.startswith("+") and not line.startswith("+++")]
    assert any("sin()" in line for line in removed) and any("cos()" in line for line in added)
    assert all("sin" in line for line in removed) and all("cos" in line for line in added)  # nothing else
    assert sum(line.startswith("@@") for line in diff) >= 2  # kernel and its call, separate hunks at context 1


def test_a_graph_break_pairs_the_unbroken_graph_with_the_more_similar_half() -> None:
    codes = compiled_codes()
    first, second = codes["two_graphs"]
    # base compiled one graph like the head's second (cos * 3); the head broke it and added the sin graph first
    assert match_graphs([second], [first, second]) == [(None, 0), (0, 1)]
    assert match_graphs([first, second], [second]) == [(0, None), (1, 0)]
    assert match_graphs([first, second], [first, second]) == [(0, 0), (1, 1)]


@pytest.mark.parametrize(("base", "head", "pairs"), [
    ([], [], []),
    (["a\nb\nc\n"], [], [(0, None)]),
    ([], ["a\nb\nc\n"], [(None, 0)]),
    # alone in the same place: the same graph, rewritten, however little is left
    (["a\nb\nc\n"], ["x\ny\nz\n"], [(0, 0)]),
    # similar graphs pair in order; one without a counterpart stands alone
    (["a\nb\nc\n", "p\nq\nr\n", "u\nv\nw\n"], ["a\nb\nc2\n", "u\nv\nw\n"], [(0, 0), (1, None), (2, 1)]),
    (["a\nb\nc\n", "u\nv\nw\n"], ["a\nb\nc\n", "new\nnew2\nnew3\n", "u\nv\nw2\n"], [(0, 0), (None, 1), (1, 2)]),
    # identical graphs pair wherever each side wrote them (a warm cache writes them in another order) ...
    (["a\nb\nc\n", "u\nv\nw\n"], ["u\nv\nw\n", "a\nb\nc\n"], [(1, 0), (0, 1)]),
    # ... changed ones only in order, which wins over a better match that would cross (program order)
    (["a\nb\nc\n", "u\nv\nw\n"], ["u\nv\nw2\n", "a\nb\nc2\n"], [(0, None), (1, 0), (None, 1)]),
    # a graph only the base has stands after the head graph paired with the base graph before it
    (["a\nb\nc\n", "p\nq\nr\n", "u\nv\nw\n"], ["u\nv\nw\n", "a\nb\nc\n"], [(2, 0), (0, 1), (1, None)]),
])
def test_graphs_pair_by_order_and_similarity(base: list[str], head: list[str],
                                             pairs: list[tuple[int | None, int | None]]) -> None:
    assert match_graphs(base, head) == pairs


def test_shared_boilerplate_does_not_pair_different_graphs() -> None:
    boilerplate = "".join(f"import module{i}\n" for i in range(40))
    base = [boilerplate + "kernel_a(x)\nbuf = a\n", boilerplate + "kernel_b(x)\nbuf = b\n"]
    head = [boilerplate + "kernel_c(x)\nbuf = c\n", boilerplate + "kernel_a(x)\nbuf = a\n",
            boilerplate + "kernel_b(x)\nbuf = b\n"]
    assert match_graphs(base, head) == [(None, 0), (0, 1), (1, 2)]


def test_unified_diff_has_context_lines_and_hunk_headers() -> None:
    base = "".join(f"line {i}\n" for i in range(20))
    head = base.replace("line 10\n", "line ten\n")
    diff = unified(base, head, context=2)
    assert diff == ["--- base", "+++ head", "@@ -9,5 +9,5 @@", " line 8", " line 9", "-line 10", "+line ten",
                    " line 11", " line 12"]
    assert len(unified(base, head, context=0)) == 5
