"""Who is trusted (pure): which PR authors run at once, and who may give comment commands."""

from __future__ import annotations

from dataclasses import dataclass

# GitHub's author_association of the pull request's author. CONTRIBUTOR / FIRST_TIME_CONTRIBUTOR / NONE
# describe anyone on the internet, whose code must not run on our hosts before a maintainer has read it.
TRUSTED_ASSOCIATIONS = frozenset({"OWNER", "MEMBER", "COLLABORATOR"})
# role_name of GET /repos/{owner}/{repo}/collaborators/{username}/permission; its `permission` field folds
# maintain into write and triage into read, so admin/write there mean the same.
WRITE_ROLES = frozenset({"admin", "maintain", "write"})
WRITE_PERMISSIONS = frozenset({"admin", "write"})


def author_is_trusted(author_association: str) -> bool:
    return author_association.upper() in TRUSTED_ASSOCIATIONS


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str


def may_command(*, commenter: str, role_name: str, permission: str, pr_author: str, pr_association: str
                ) -> Verdict:
    """Write access to the repository, or authorship of a pull request that is itself trusted."""
    if role_name.lower() in WRITE_ROLES or permission.lower() in WRITE_PERMISSIONS:
        return Verdict(True, f"@{commenter} has {role_name or permission} access")
    if commenter.lower() == pr_author.lower() and author_is_trusted(pr_association):
        return Verdict(True, f"@{commenter} is the author of this trusted pull request")
    have = role_name or permission
    have = "no" if have.lower() in ("", "none") else have
    return Verdict(False, f"@{commenter} has {have} access to this repository; commands need write access "
                          "(or authorship of a pull request from a trusted author)")
