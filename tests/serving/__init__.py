"""Tests of qualify.serving."""
