"""The serving runtime as a container: the launch plan (the seed's ``docker run``), the container's
lifecycle and readiness, GPU preflight, load evidence from its log, the images built locally
(stand-in and vLLM CPU), and the vLLM CPU plugin that the harness's servers load.
"""
