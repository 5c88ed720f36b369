"""Scenario tests: the real CLI, containers and servers, whole runs, the bad-input corpus."""
