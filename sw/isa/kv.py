"""The address map of a tile's share of the KV cache (`KvLayout`), shared by all sides.

One definition used by the gateware's KV store (``chipotle.hw.tile.kvstore``, which
re-exports it), by the ``kvapp`` instruction of the ISA simulator (``chipotle.isasim``), by
the host that writes the layout into a tile's KV registers, and by the compiler.  The map is
described in ``docs/tile.md`` ("KV store") and the instruction in ``docs/isa.md``.
"""

from dataclasses import dataclass

__all__ = ["KvLayout", "KvRangeError", "KV_ADDR_BITS", "kv_slot"]

#: Width of a word address in the tile SRAM (the KV map must end at or below ``2**16``).
KV_ADDR_BITS = 16


class KvRangeError(ValueError):
    """A KV store layout that ends past the ``2**KV_ADDR_BITS`` word addresses."""


@dataclass(frozen=True)
class KvLayout:
    """Address map of the KV cache share held by one tile (word addresses).

    Block ``i = layer * n_kv_heads + head`` starts at ``base + i * block_words`` and holds

    * K: ``max_pos`` rows of ``k_row_words`` words: with ``k_header``, first one header word
      (the row's scale code, ``docs/numerics.md``: K is quantised per position and head),
      then ``k_data_words = ceil(head_size / W)`` data words; K[p, d] is byte ``d % W`` of
      word ``k_data(layer, head, p) + d // W``;
    * then V: ``max_pos`` rows of ``v_row_words = ceil(head_size / W)`` words; V[p, d] is
      byte ``d % W`` of word ``v_row(layer, head, p) + d // W``.

    Bytes past ``head_size`` in a K or V row are padding: the store never writes them and
    the matrix and vector units never read them as data.  A K row with a header has the
    layout of the ISA's records (a header word, then the padded int8 data).

    Parameters
    ----------
    n_layers, n_kv_heads : int
        Layers, and KV heads per layer, held by this tile.
    head_size : int
        Elements of a K or V vector.
    max_pos : int
        Positions held: the capacity.
    base : int
        Word address of the first block.
    word_bytes : int
        W, bytes per SRAM word.
    k_header : bool
        Each K row starts with one header word (copied by ``APPEND``, skipped by
        ``STREAM_K``).
    """

    n_layers: int
    n_kv_heads: int
    head_size: int
    max_pos: int
    base: int = 0
    word_bytes: int = 8
    k_header: bool = False

    def __post_init__(self):
        for name in ("n_layers", "n_kv_heads", "head_size", "max_pos", "word_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        if not isinstance(self.base, int) or self.base < 0:
            raise ValueError(f"base must be a non-negative integer, not {self.base!r}")
        if self.n_layers > 256 or self.n_kv_heads > 256:
            raise ValueError("n_layers and n_kv_heads must be at most 256 (8-bit fields)")
        if self.max_pos > 2 ** 16 - 1 or self.head_size > 2 ** 16 - 1:
            raise ValueError("max_pos and head_size must be below 2**16 (16-bit fields)")
        if self.end > 2 ** KV_ADDR_BITS:
            raise KvRangeError(f"the KV store ends at word {self.end}, past 2**{KV_ADDR_BITS}")

    @property
    def capacity(self):
        """Positions each (layer, head) can hold (``max_pos``)."""
        return self.max_pos

    @property
    def k_data_words(self):
        """Data words per K row, ``ceil(head_size / W)``."""
        return -(-self.head_size // self.word_bytes)

    @property
    def k_header_words(self):
        """Header words per K row (1 with ``k_header``, else 0)."""
        return int(bool(self.k_header))

    @property
    def k_row_words(self):
        """Words per K row, header included."""
        return self.k_header_words + self.k_data_words

    @property
    def v_row_words(self):
        """Words per V row, ``ceil(head_size / W)``."""
        return -(-self.head_size // self.word_bytes)

    @property
    def k_block_words(self):
        """Words of the K part of a block."""
        return self.max_pos * self.k_row_words

    @property
    def block_words(self):
        """Words per (layer, head) block."""
        return self.k_block_words + self.max_pos * self.v_row_words

    @property
    def size_words(self):
        """Words used by the whole store."""
        return self.n_layers * self.n_kv_heads * self.block_words

    @property
    def end(self):
        """First word address after the store."""
        return self.base + self.size_words

    def block(self, layer, head):
        """Return the word address of the block of ``(layer, head)``.

        Raises
        ------
        ValueError
            If ``layer`` or ``head`` is outside the layout.
        """
        self._check(layer, head)
        return self.base + (layer * self.n_kv_heads + head) * self.block_words

    def k_row(self, layer, head, pos):
        """Return the word address of K row ``pos`` of ``(layer, head)`` (its header, if any).

        Raises
        ------
        ValueError
            If ``layer`` or ``head`` is outside the layout, or ``pos`` is not in
            ``[0, max_pos)`` (another block's row, or the V rows, would be named).
        """
        self._check_pos(pos)
        return self.block(layer, head) + pos * self.k_row_words

    def k_data(self, layer, head, pos):
        """Return the word address of element 0 of K row ``pos`` of ``(layer, head)``.

        Raises ValueError as `k_row`.
        """
        return self.k_row(layer, head, pos) + self.k_header_words

    def v_row(self, layer, head, pos):
        """Return the word address of V row ``pos`` of ``(layer, head)``.

        Raises ValueError as `k_row`.
        """
        self._check_pos(pos)
        return self.block(layer, head) + self.k_block_words + pos * self.v_row_words

    def registers(self):
        """Return the values of the tile's KV layout registers, in register order.

        ``(base, n_layers, n_kv_heads, head_size, max_pos)``: what a host writes from
        ``KV_BASE`` on (``chipotle.hw.tile.netif.Reg``); the ISA's K rows are records, so
        the layout must have ``k_header``.

        Raises
        ------
        ValueError
            If the layout has no K header word.
        """
        if not self.k_header:
            raise ValueError("a tile's KV registers describe K records: k_header must be True")
        return (self.base, self.n_layers, self.n_kv_heads, self.head_size, self.max_pos)

    def capacity_in(self, sram_words):
        """Return the positions a tile with ``sram_words`` words reports for this layout.

        ``max_pos`` when the whole map lies inside the SRAM, else 0 (every append refused):
        the value of the ``KV_CAPACITY`` register.
        """
        return self.max_pos if self.end <= sram_words else 0

    def _check_pos(self, pos):
        if not 0 <= pos < self.max_pos:
            raise ValueError(f"`pos` must be in [0, {self.max_pos}) (max_pos), not {pos}")

    def _check(self, layer, head):
        if not (0 <= layer < self.n_layers and 0 <= head < self.n_kv_heads):
            raise ValueError(f"(layer, head) must be within ({self.n_layers}, "
                             f"{self.n_kv_heads}), not ({layer}, {head})")


def kv_slot(layer, head):
    """Return the value of a ``kvapp`` slot operand naming ``(layer, head)``: ``layer << 8 | head``.

    Raises
    ------
    ValueError
        If ``layer`` or ``head`` is not an integer in ``[0, 255]``.
    """
    for name, v in (("layer", layer), ("head", head)):
        if not isinstance(v, int) or not 0 <= v <= 255:
            raise ValueError(f"`{name}` must be an integer in [0, 255], not {v!r}")
    return layer << 8 | head
