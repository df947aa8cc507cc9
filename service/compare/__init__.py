"""Comparing a pull request's head with its base: generated code (codediff)."""
