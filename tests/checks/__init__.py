"""Tests of qualify.checks."""
