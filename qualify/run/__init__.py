"""One qualification run from its inputs to its verdict: resolving the draft and source, the levels
in order, the suites run in-process by pytest with the plugin that turns outcomes into checks,
and the report folder.
"""
