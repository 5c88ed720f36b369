"""Tests of qualify.checkpoint."""
