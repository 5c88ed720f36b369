"""Tests of qualify.runtime."""
