"""The checkpoint levels' checks: ``structure`` (the manifest's claims against the files, the source's
identity), ``source_config`` (the checkpoint's configuration is the source's), ``format`` (the
MXFP8 layout and quantization config) and ``reproduction`` (every byte re-made from the source).

Each ``check_*`` function returns :class:`~qualify.report.model.Evidence`; the suites record it.
"""
