"""Talking to a serving endpoint: the OpenAI client and ``/metrics``, prompt sets, the speculative
decoding counters and acceptance statistics, the paired comparison of two drafts, throughput,
and the local vLLM CPU servers the fixture profile serves from.
"""
