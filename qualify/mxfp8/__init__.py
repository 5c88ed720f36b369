"""MXFP8 numerics as pure functions (no I/O): the format's constants, the reference quantizer and
dequantizer with its scale recipes, and the per-weight error statistics.
"""
