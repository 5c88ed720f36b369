"""Tests of qualify.mxfp8."""
