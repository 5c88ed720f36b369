"""mxfp8"""
