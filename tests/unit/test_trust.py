"""Who runs at once, and who may command compile-ci on a pull request."""

from __future__ import annotations

import pytest

from service.github.trust import author_is_trusted, may_command


@pytest.mark.parametrize(("association", "trusted"), [
    ("OWNER", True), ("MEMBER", True), ("COLLABORATOR", True),
    ("CONTRIBUTOR", False), ("FIRST_TIME_CONTRIBUTOR", False), ("FIRST_TIMER", False), ("MANNEQUIN", False),
    ("NONE", False),
])
def test_author_association_decides_who_runs_without_approval(association: str, trusted: bool) -> None:
    assert author_is_trusted(association) is trusted


@pytest.mark.parametrize(("commenter", "role", "permission", "author", "association", "allowed"), [
    ("maria", "admin", "admin", "eve", "NONE", True),
    ("maria", "maintain", "write", "eve", "NONE", True),
    ("maria", "write", "write", "eve", "NONE", True),
    ("maria", "triage", "read", "eve", "NONE", False),
    ("maria", "read", "read", "eve", "NONE", False),
    ("maria", "", "none", "eve", "NONE", False),
    # an organisation's custom role is judged by the base permission GitHub reports with it
    ("maria", "ci-operator", "write", "eve", "NONE", True),
    # the author of a trusted pull request may rerun their own work without write access
    ("tom", "read", "read", "tom", "MEMBER", True),
    ("Tom", "read", "read", "tom", "COLLABORATOR", True),
    # ...but the author of an untrusted one may not approve or rerun it
    ("eve", "", "none", "eve", "FIRST_TIME_CONTRIBUTOR", False),
    ("eve", "read", "read", "eve", "CONTRIBUTOR", False),
    # and trust is not borrowed from someone else's pull request
    ("eve", "read", "read", "tom", "MEMBER", False),
])
def test_permission_outcomes(commenter: str, role: str, permission: str, author: str, association: str,
                             allowed: bool) -> None:
    verdict = may_command(commenter=commenter, role_name=role, permission=permission, pr_author=author,
                          pr_association=association)
    assert verdict.allowed is allowed
    assert f"@{commenter}" in verdict.reason
    if not allowed:
        assert "write access" in verdict.reason
