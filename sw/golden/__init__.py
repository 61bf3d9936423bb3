"""The golden integer model: chipotle's hardware arithmetic, specified once, bit for bit.

``chipotle.golden.numerics``
    The primitives (one rounding rule, int8 matrix product, tables, RMSNorm, softmax, RoPE,
    SiLU, argmax) that the RTL and the ISA-level simulator implement.
``chipotle.golden.quantize``
    Offline (host, float) preparation: calibration, int8 weights, multipliers, tables:
    `QuantizedModel`.
``chipotle.golden.model``
    `GoldenModel`: the integer-only forward step (decode and batched prefill) with traces.
``chipotle.golden.measure``
    ``python -m chipotle.golden.measure``: accuracy against the float reference.

The formats and algorithms are specified in ``docs/numerics.md``.
"""

from .model import GoldenModel
from .quantize import LOGIT_FRAC_BITS, Margins, QLayer, QLinear, QNorm, QuantizedModel, quantize

__all__ = ["GoldenModel", "QuantizedModel", "QLinear", "QNorm", "QLayer", "Margins", "quantize",
           "LOGIT_FRAC_BITS"]
