"""Tests of qualify.util."""
