"""qualify: evidence-based qualification of quantized checkpoint releases."""

__version__ = "0.1.0"
