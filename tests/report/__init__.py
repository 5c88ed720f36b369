"""Tests of qualify.report."""
