"""Tests of qualify.run."""
