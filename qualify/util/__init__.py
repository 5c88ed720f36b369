"""Small tools with no knowledge of checkpoints: atomic writes, the strict JSON reader, redaction,
escaping for terminals and Markdown, identifiers, progress display, local ports.

Imports nothing of the harness but :mod:`qualify.errors`.
"""
