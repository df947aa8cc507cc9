"""Judging a pull request against its base: per-test verdicts, compile-ledger deltas, budgets, code changes."""
