"""The checkpoint levels' checks that need more than one input: the MXFP8 format (``format``) and
bit-exact reproduction from the source (``reproduction``). Each returns
:class:`~qualify.report.model.Evidence`; the structure checks live beside the manifest they read.
"""
