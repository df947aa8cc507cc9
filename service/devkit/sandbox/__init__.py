"""Sandbox mode: the whole service on one machine with the GitHub emulator standing in for GitHub."""
