"""The MXFP8 format's constants (OCP MX v1.0: E4M3 elements, E8M0 scales, 32-element blocks).

One home for every number of the format; the codec, the statistics and the format checks
read them from here.
"""

from __future__ import annotations

#: Elements that share one scale, along the input (K) axis.
BLOCK_SIZE = 32

#: E4M3 (float8_e4m3fn): the largest finite magnitude.
E4M3_MAX = 448.0
#: floor(log2(448)): OCP's shift from the block amax to the scale exponent.
E4M3_EMAX = 8
#: The low seven bits of an E4M3 byte, its magnitude; E4M3FN has no infinities, and a
#: magnitude of all ones (bytes 0x7F and 0xFF) is its only NaN encoding.
E4M3_MAGNITUDE_MASK = 0x7F
E4M3_NAN_MAGNITUDE = 0x7F
#: The two E4M3 NaN bytes: the largest byte as int8 and the largest as uint8.
E4M3_POSITIVE_NAN = 0x7F
E4M3_NEGATIVE_NAN = 0xFF

#: E8M0 scale bytes: a biased power-of-two exponent, 0xFF reserved for NaN.
E8M0_BIAS = 127
E8M0_NAN = 0xFF
#: The smallest and largest unbiased exponent an E8M0 byte other than 0xFF encodes.
E8M0_MIN_EXPONENT = -127
E8M0_MAX_EXPONENT = 127

#: Where an amax-derived E8M0 scale puts a non-zero block's largest |element|: [224, 448]
#: for the round-up (ModelOpt/RCEIL) rule (an amax just above 448 * 2**k scales to just
#: above 224, which E4M3 rounds to 224), [256, 448] for OCP's floor rule.
BLOCK_MAX_RANGE = (E4M3_MAX / 2, E4M3_MAX)

#: The safetensors dtype names of the two tensors an MXFP8 linear weight is stored as.
ELEMENT_DTYPE = "F8_E4M3"
SCALE_DTYPE = "U8"
