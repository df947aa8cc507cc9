"""Deciding what runs: which results a job reuses by content, and from which job (DESIGN §14)."""
