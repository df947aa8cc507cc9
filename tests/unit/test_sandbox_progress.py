"""What the sandbox prints about the pull requests' comments: each one's markdown under its number, cut when long."""

from __future__ import annotations

from service.devkit.sandbox.progress import comments_of, where_to_look


def test_each_pull_requests_comment_is_shown_as_markdown_cut_after_its_limit() -> None:
    comments = [{"repository": "sandbox/model-zoo", "issue_number": 2, "id": 9, "body": "\n".join(
                    f"line {i}" for i in range(40))},
                {"repository": "sandbox/model-zoo", "issue_number": 1, "id": 8, "body": "## compile-ci\nall green"},
                {"repository": "someone/else", "issue_number": 1, "id": 7, "body": "not ours"}]
    assert comments_of(comments, "sandbox/model-zoo", max_lines=3) == [
        "PR #1, compile-ci's comment (2 lines of markdown):", "    ## compile-ci", "    all green",
        "PR #2, compile-ci's comment (40 lines of markdown):", "    line 0", "    line 1", "    line 2",
        "    … (37 more lines)"]


def test_where_to_look_names_the_pages_the_check_runs_and_the_comments() -> None:
    lines = where_to_look("http://127.0.0.1:1", "http://127.0.0.1:2", ("a/b",))
    assert [line.split()[-1] for line in lines] == [
        "http://127.0.0.1:1/", "http://127.0.0.1:2/_emulator/check-runs?repository=a/b",
        "http://127.0.0.1:2/_emulator/comments"]
