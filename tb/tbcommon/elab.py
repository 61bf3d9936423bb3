"""Amaranth objects a test constructs but never builds."""

from __future__ import annotations

import contextlib
import gc
import warnings


@contextlib.contextmanager
def never_built():
    """Construct Amaranth elaboratables that are never elaborated (a refusal in their
    ``__init__``, an attribute read) without their ``UnusedElaboratable`` warning.

    Amaranth warns when such an object is garbage-collected, which happens in whatever test
    runs then; inside the block the warning is ignored and, on leaving it, everything the
    block dropped is collected, so nothing is left to warn later.  Drop references the
    test keeps (``del``, an exception info's traceback) inside the block.
    """
    from amaranth.hdl import UnusedElaboratable

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        try:
            yield
        finally:
            gc.collect()
