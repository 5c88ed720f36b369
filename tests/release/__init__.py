"""Tests of qualify.release."""
