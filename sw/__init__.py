"""chipotle: an open, synthesisable LLM inference accelerator and its host stack.

The host stack lives in this package (``sw/`` in the repository); the gateware is
``chipotle.hw`` (``hw/``) and the simulation flows are ``chipotle.sim`` (``sim/``).
"""

__version__ = "0.1.0"
