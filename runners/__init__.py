"""Runners: where a job's test command actually executes (a subprocess here, a container in production)."""
