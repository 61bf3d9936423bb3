"""The one configuration object of a chip: mesh size and tile parameters.

`ChipConfig` is shared by the gateware (`chipotle.hw.chip.Chip`), the compiler
(`chipotle.compiler`), the driver (`chipotle.driver`), the ISA-level simulator
(`chipotle.isasim`) and the testbenches, so that every one of them sees the parameters the
RTL was elaborated with.  It builds the per-tile views: `tile_config` (gateware,
``chipotle.hw.tile.TileConfig``), `isa_config` (ISA, ``chipotle.isa.IsaConfig``) and `noc`
(network, ``chipotle.hw.noc.NocConfig``).

Members
-------
ChipConfig
    The dataclass.
CONFIGS
    Named configurations (``default``, ``small``, ``ulx3s``) used by ``make sim``, the
    benchmarks, the board builds and the regression.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import asdict, dataclass, fields, replace

__all__ = ["ChipConfig", "CONFIGS", "MAX_VEC_SLOTS", "SRAM_ADDR_BITS", "did_you_mean", "sram_reach"]

#: Bits of a tile's SRAM word address (``chipotle.hw.tile.sram.ADDR_WIDTH``): a tile's SRAM
#: holds at most ``2**16`` words, 512 KiB with 8-byte words (``ChipConfig.max_sram_bytes``).
SRAM_ADDR_BITS = 16


def sram_reach(word_bytes: int) -> int:
    """The most SRAM a tile's word addresses reach, bytes: ``2**SRAM_ADDR_BITS * word_bytes``."""
    return (1 << SRAM_ADDR_BITS) * word_bytes

#: The most vector-unit result slots a configuration may ask for (``ChipConfig.vec_slots``):
#: ``silu``, the slots' best customer, stops gaining at 6 (``docs/tile.md``, "Vector unit").
MAX_VEC_SLOTS = 8


def did_you_mean(word: str, known, spell=repr) -> str:
    """`` (did you mean 'x'?)`` for the closest of `known` to a misspelt `word`, else ``""``
    (`difflib.get_close_matches`, case-insensitive); `spell` writes the name meant (e.g.
    ``lambda b: f"BOARD={b}"``: ``(did you mean BOARD=ulx3s-85f?)``; default: `repr`).
    The one suggestion of every refusal of a misspelt name: configuration keys and names,
    boards, option choices, simulators."""
    lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(word.lower(), list(lower), n=1, cutoff=0.6)
    return f" (did you mean {spell(lower[close[0]])}?)" if close else ""


@dataclass(frozen=True)
class ChipConfig:
    """Parameters of a chip: a ``mesh_width`` x ``mesh_height`` mesh of identical tiles.

    Attributes
    ----------
    mesh_width, mesh_height : int
        Tiles per row and per column (default 4 x 4).  The host link enters the mesh at the
        west port of tile (0, 0) (``docs/noc.md``).
    sram_bytes : int
        SRAM per tile, bytes (default 128 KiB: the reach of the ISA's 17-bit immediate
        offsets); at most `max_sram_bytes` (512 KiB with 8-byte words).
    word_bytes : int
        W: bytes per SRAM word, per matrix-unit weight word and per flit payload (default 8;
        a power of two, at least 8).
    n_banks : int
        SRAM banks per tile (default 2), a power of two.
    max_m : int
        M: activation rows of the matrix unit (default 4): prompt tokens per prefill batch.
    lanes : int
        V: vector-unit lanes (default 8), even, 2 to 128 (``chipotle.hw.tile.vector.MAX_LANES``).
    vec_slots : int
        The vector unit's result slots (``VectorUnit(slots=)``, default 4; 1 to
        `MAX_VEC_SLOTS`): a
        writing pass keeps at most this many chunks between their first read and their last
        write.  The ISA simulator's estimate takes it (``CostModel.vec_slots``), so the
        estimate and the RTL agree (``docs/tile.md``, "Vector unit", "Timing").
    k_max : int
        Largest K (inner dimension) of the matrix unit (default 512).
    imem_words : int
        Instruction memory per tile, instructions of 128 bits (default 1024).
    n_counters : int
        Counters (semaphores) per tile (default 16).
    loop_depth : int
        Hardware loop stack depth (default 4).
    noc_fifo_depth : int
        Router input FIFO depth, flits (default 16).
    mcast_max_flits : int
        Longest multicast packet, head included (default 8).
    overlap : bool
        The controller's issue policy (``docs/tile.md``, "Issue policy"): True (default) lets
        a matrix instruction run under independent vector and scalar work; False issues one
        instruction at a time.  The ISA simulator's cycle estimate follows it.
    sram_latency : int
        L, cycles from a granted read on a tile SRAM's shared read/write port to its data
        (default 1; 2 registers the request beside the block RAMs, 3 also their read data:
        `chipotle.hw.tile.sram.SramSignature`, an FPGA timing cut; ``CostModel.sram_latency``
        for the estimate).

    Raises
    ------
    ValueError
        From ``__post_init__`` if a field is out of range (through ``IsaConfig`` and the
        mesh limits: 1 .. 15 columns, 1 .. 16 rows).
    """

    mesh_width: int = 4
    mesh_height: int = 4
    sram_bytes: int = 128 * 1024
    word_bytes: int = 8
    n_banks: int = 2
    max_m: int = 4
    lanes: int = 8
    vec_slots: int = 4
    k_max: int = 512
    imem_words: int = 1024
    n_counters: int = 16
    loop_depth: int = 4
    noc_fifo_depth: int = 16
    mcast_max_flits: int = 8
    overlap: bool = True
    sram_latency: int = 1

    def __post_init__(self):
        if not isinstance(self.overlap, bool):
            raise ValueError(f"ChipConfig.overlap must be a bool, not {self.overlap!r}")
        for f in fields(self):
            if f.name == "overlap":
                continue
            v = getattr(self, f.name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                letter = {"lanes": " (V)", "max_m": " (M)", "word_bytes": " (W)"}.get(f.name, "")
                raise ValueError(f"ChipConfig.{f.name}{letter} must be a positive integer, "
                                 f"not {v!r}")
        if not 1 <= self.mesh_width <= 15 or not 1 <= self.mesh_height <= 16:
            raise ValueError(f"the mesh must be 1..15 x 1..16 tiles (the host link takes the "
                             f"last column address), not {self.mesh_width} x "
                             f"{self.mesh_height}")
        if self.word_bytes < 8:
            raise ValueError(f"word_bytes must be at least 8 (the vector unit reads 8-byte "
                             f"words), not {self.word_bytes}")
        for name in ("word_bytes", "n_banks"):
            v = getattr(self, name)
            if v & (v - 1):
                raise ValueError(f"{name} must be a power of two (the SRAM's word and bank "
                                 f"addressing), not {v}")
        from .hw.tile.vector import MAX_LANES
        if self.lanes < 2 or self.lanes % 2 or self.lanes > MAX_LANES:
            raise ValueError(f"lanes (V) must be an even number from 2 to {MAX_LANES} (what "
                             f"the vector unit, chipotle.hw.tile.vector.VectorUnit, builds), "
                             f"not {self.lanes}")
        if self.sram_latency > 3:
            raise ValueError(f"sram_latency must be 1, 2 or 3 cycles (the SRAM's request and "
                             f"read-data registers), not {self.sram_latency}")
        if self.vec_slots > MAX_VEC_SLOTS:
            raise ValueError(f"vec_slots must be at most {MAX_VEC_SLOTS} (each slot is a "
                             f"register file of a chunk's result words), not "
                             f"{self.vec_slots}")
        if self.sram_bytes > self.max_sram_bytes:
            raise ValueError(f"sram_bytes must be at most {self.max_sram_bytes:,} bytes "
                             f"({self.max_sram_bytes // 1024} KiB: 2**{SRAM_ADDR_BITS} words "
                             f"of word_bytes = {self.word_bytes}, the reach of a tile's "
                             f"{SRAM_ADDR_BITS}-bit SRAM word addresses), not "
                             f"{self.sram_bytes:,} ({self.sram_bytes / 1024:g} KiB)")
        if self.sram_bytes % self.sram_granule:
            kib = self.sram_bytes // 1024           # the sizes either side that it takes
            near = [*self.sram_kib_sizes(1, kib)[-1:], *self.sram_kib_sizes(kib + 1)[:1]]
            raise ValueError(f"sram_bytes ({self.sram_bytes}) must be a multiple of "
                             f"word_bytes x n_banks ({self.sram_granule})"
                             + (f", e.g. sram_kib={' or '.join(map(str, near))}"
                                if near else ""))
        self.isa_config()  # the ISA's own checks
        self._check_gateware()

    def _check_gateware(self) -> None:
        """Raise ValueError if the tile's gateware refuses this configuration: the limits
        its network-interface and network configurations check beyond the ISA's (a multicast
        packet no longer than a router FIFO, ``mcast_max_flits <= noc_fifo_depth``; the
        network interface's register map, ``imem_words <= 65536``, ``n_counters <= 256``),
        without building a `Tile`.  Without it the RTL flows
        refused such a configuration with a traceback, after the ISA simulator had run it."""
        from .hw.tile.tile import netif_config
        try:
            netif_config(self.tile_config())      # what `Tile` builds, without the Tile
        except ValueError as e:
            msg = str(e).replace("fifo_depth (", "noc_fifo_depth (")
            if "mcast_max_flits" in msg:
                msg += (" (a multicast packet must fit a router FIFO: give mcast_max_flits "
                        "of at most noc_fifo_depth, or a deeper noc_fifo_depth)")
            raise ValueError(f"the tile's gateware cannot be built with this configuration: "
                             f"{msg}") from None

    # -- derived views ------------------------------------------------------------------------

    @property
    def n_tiles(self) -> int:
        """Tiles in the mesh."""
        return self.mesh_width * self.mesh_height

    @property
    def tiles(self) -> list[tuple[int, int]]:
        """Tile coordinates ``(x, y)``, row-major (the order of ``Chip.status``)."""
        return [(x, y) for y in range(self.mesh_height) for x in range(self.mesh_width)]

    @property
    def max_sram_bytes(self) -> int:
        """The largest ``sram_bytes`` the tile's word addresses reach, bytes:
        ``2**SRAM_ADDR_BITS * word_bytes``."""
        return sram_reach(self.word_bytes)

    @property
    def sram_granule(self) -> int:
        """The step of the SRAM sizes this configuration takes, bytes: ``word_bytes x
        n_banks`` (a whole number of words in every bank).  ``sram_bytes`` must be a multiple
        of it (``__post_init__`` checks it; `sram_kib_sizes` steps by it)."""
        return self.word_bytes * self.n_banks

    def sram_kib_sizes(self, lo_kib: int = 1, hi_kib: int | None = None) -> range:
        """The SRAM sizes this configuration takes, whole KiB (what ``sram_kib=`` gives),
        from `lo_kib` to `hi_kib` KiB inclusive, ascending: the multiples of `sram_granule`
        bytes that are whole KiB (a step of ``lcm(sram_granule, 1024)`` bytes), at most
        `max_sram_bytes`.  ``replace(sram_bytes=kib * 1024)`` accepts every one; the fit
        searches (``chipotle.compiler``) step or bisect through them, never past them.

        Parameters
        ----------
        lo_kib : int
            The smallest size wanted, KiB (default 1; below 1 counts as 1).
        hi_kib : int, optional
            The largest size wanted, KiB (default and at most ``max_sram_bytes // 1024``).

        Returns
        -------
        range
            KiB sizes (index and slice it to bisect); empty if none lies in the bounds.

        Raises
        ------
        TypeError
            If a bound is not an integer.
        """
        for v in (lo_kib, hi_kib):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
                raise TypeError(f"SRAM size bounds must be integers (KiB), not {v!r}")
        step = math.lcm(self.sram_granule, 1024) // 1024
        top = self.max_sram_bytes // 1024
        if hi_kib is not None:
            top = min(top, hi_kib)
        first = -(-max(lo_kib, 1) // step) * step
        return range(first, top // step * step + 1, step)

    @property
    def sram_words(self) -> int:
        """SRAM words per tile."""
        return self.sram_bytes // self.word_bytes

    def isa_config(self):
        """Return the ``chipotle.isa.IsaConfig`` of one tile."""
        from .isa.core import CostModel, IsaConfig
        return IsaConfig(sram_bytes=self.sram_bytes, word_bytes=self.word_bytes,
                         max_m=self.max_m, lanes=self.lanes, k_max=self.k_max,
                         imem_words=self.imem_words, n_counters=self.n_counters,
                         loop_depth=self.loop_depth, mcast_max_flits=self.mcast_max_flits,
                         max_packet_flits=255, read_words=self.n_banks,
                         cost=CostModel(vec_slots=self.vec_slots,
                                        sram_latency=self.sram_latency),
                         overlap=self.overlap)

    def tile_config(self):
        """Return the gateware's ``chipotle.hw.tile.TileConfig`` of one tile (no KV store)."""
        from .hw.tile.datapath import TileConfig
        return TileConfig(sram_bytes=self.sram_bytes, word_bytes=self.word_bytes,
                          n_banks=self.n_banks, max_m=self.max_m, k_max=self.k_max, kv=None,
                          imem_words=self.imem_words, n_counters=self.n_counters,
                          loop_depth=self.loop_depth, lanes=self.lanes,
                          vec_slots=self.vec_slots, mesh_width=self.mesh_width,
                          mesh_height=self.mesh_height,
                          noc_fifo_depth=self.noc_fifo_depth,
                          mcast_max_flits=self.mcast_max_flits, overlap=self.overlap,
                          sram_latency=self.sram_latency)

    @property
    def noc(self):
        """The network parameters (``chipotle.hw.noc.NocConfig``)."""
        return self.tile_config().noc

    # -- bandwidth figures (for the roofline) ---------------------------------------------------

    @property
    def sram_read_bytes_per_cycle(self) -> int:
        """Peak SRAM read bandwidth of the mesh, bytes per cycle: one word per tile per cycle
        on the matrix unit's read port (``docs/tile.md``)."""
        return self.n_tiles * self.word_bytes

    @property
    def sram_peak_read_bytes_per_cycle(self) -> int:
        """Everything the mesh's SRAM can read per cycle, bytes: on every tile the matrix
        unit's read port ``r`` (one word) and the shared read/write port ``rw``, whose wide
        read returns `n_banks` words (``docs/tile.md``, "SRAM"): ``tiles x W x (1 +
        n_banks)``, 384 on the 4 x 4 default.  The roofline figure divides by
        `sram_read_bytes_per_cycle` (the matrix units' feed: the weights can reach the MACs
        only through ``r``); the figures against this one say how much of the SRAM's whole
        read bandwidth a step uses (``docs/performance.md``, "Definitions")."""
        return self.n_tiles * self.word_bytes * (1 + self.n_banks)

    @property
    def peak_macs_per_cycle(self) -> int:
        """Peak int8 MACs per cycle of the mesh: W x M per tile."""
        return self.n_tiles * self.word_bytes * self.max_m

    # -- text forms -----------------------------------------------------------------------------

    def replace(self, **changes) -> ChipConfig:
        """Return a copy with `changes` applied (validated)."""
        return replace(self, **changes)

    def as_dict(self) -> dict:
        """Return the fields as a dict."""
        return asdict(self)

    def __str__(self) -> str:
        return (f"{self.mesh_width}x{self.mesh_height} tiles, {self.sram_bytes // 1024} KiB "
                f"SRAM/tile, W={self.word_bytes}, M={self.max_m}, V={self.lanes}, "
                f"vec_slots={self.vec_slots}"
                + (f", sram_latency={self.sram_latency}" if self.sram_latency != 1 else ""))

    #: The banner's letters of ``--config`` (``str()``) -> field names.
    LETTERS = {"W": "word_bytes", "M": "max_m", "V": "lanes"}

    @classmethod
    def key_fields(cls, key: str) -> tuple[str, ...]:
        """The fields a ``--config`` key sets: ``mesh`` both mesh sides, ``sram_kib``
        ``sram_bytes``, a letter its field, a field name itself (an unknown key as given)."""
        key = cls.LETTERS.get(key, key)
        return {"mesh": ("mesh_width", "mesh_height"), "sram_kib": ("sram_bytes",)}.get(
            key, (key,))

    @classmethod
    def from_string(cls, text: str, base: ChipConfig | None = None) -> ChipConfig:
        """Parse ``"name"`` or ``"name,key=value,..."`` or ``"key=value,..."``.

        ``name`` is a key of `CONFIGS`; keys are field names, plus ``mesh=WxH``,
        ``sram_kib=N`` and the letters ``str()`` prints: ``W`` (``word_bytes``), ``M``
        (``max_m``) and ``V`` (``lanes``).  Used by ``make sim CONFIG=...`` and ``chipotle
        generate --config``.

        The keys change ``base`` (default ``CONFIGS["default"]``); a ``name`` replaces the
        configuration so far, ``base`` included, so ``"small,V=4"`` is ``small`` with
        ``V = 4`` whatever ``base`` is.

        Raises
        ------
        ValueError
            Naming the unknown configuration or key, or the malformed value.
        """
        cfg = base or CONFIGS["default"]
        changes = {}
        kib_given = None                     # sram_kib= as given (KiB)
        letters = cls.LETTERS
        for part in filter(None, (p.strip() for p in text.split(","))):
            if "=" not in part:
                if part in {"mesh", "sram_kib"} | set(letters) | {f.name for f in fields(cls)}:
                    example = {"mesh": "mesh=4x4", "sram_kib": "sram_kib=128"}.get(
                        part, f"{part}=<integer>")
                    raise ValueError(f"{part!r} needs a value, e.g. {example}")
                if part not in CONFIGS:
                    raise ValueError(f"unknown configuration {part!r}{did_you_mean(part, CONFIGS)}"
                                     f"; known: {', '.join(CONFIGS)}")
                cfg = CONFIGS[part]
                continue
            key, value = (s.strip() for s in part.split("=", 1))
            key = letters.get(key, key)
            if twice := [f for f in cls.key_fields(key) if f in changes]:
                raise ValueError(f"{part!r}: {twice[0]} is given twice in {text!r}; give it "
                                 f"once")
            try:
                if key == "mesh":
                    w, h = value.lower().split("x")
                    changes.update(mesh_width=int(w), mesh_height=int(h))
                elif key == "sram_kib":
                    kib_given = int(value, 0)
                    changes["sram_bytes"] = kib_given * 1024
                    if changes["sram_bytes"] < 1:
                        raise ValueError(value)
                elif key == "overlap":
                    if value.lower() not in ("0", "1", "true", "false"):
                        raise ValueError(value)
                    changes[key] = value.lower() in ("1", "true")
                elif key in {f.name for f in fields(cls)}:
                    changes[key] = int(value, 0)
                else:
                    names = ["mesh", "sram_kib", *(f.name for f in fields(cls))]
                    raise ValueError(f"unknown configuration key {key!r}"
                                     f"{did_you_mean(key, [*names, *letters])}; known: "
                                     f"{', '.join(names)} (W, M, V for word_bytes, max_m, "
                                     f"lanes)")
            except ValueError as e:
                if "unknown configuration key" in str(e):
                    raise
                expect = {"mesh": "WxH, two integers (e.g. mesh=4x4)",
                          "overlap": "0, 1, true or false",
                          "sram_kib": "a positive integer (KiB of SRAM per tile)"}.get(
                              key, "an integer")
                raise ValueError(f"bad value {value!r} for {key!r} in {text!r}: expected "
                                 f"{expect}") from None
        if kib_given is not None:            # the limit in the unit given, not in bytes
            w = changes.get("word_bytes", cfg.word_bytes)
            top = sram_reach(w) if isinstance(w, int) and w > 0 else None
            if top is not None and changes["sram_bytes"] > top:
                raise ValueError(f"sram_kib must be at most {top // 1024:,} (2**"
                                 f"{SRAM_ADDR_BITS} words of word_bytes = {w}, the reach of "
                                 f"a tile's {SRAM_ADDR_BITS}-bit SRAM word addresses), not "
                                 f"{kib_given:,}")
        try:
            return cfg.replace(**changes)
        except ValueError as e:
            raise ValueError(_in_given_terms(str(e), text, letters)) from None


def _in_given_terms(message: str, text: str, letters: dict[str, str]) -> str:
    """`ChipConfig`'s refusal of a `ChipConfig.from_string` text, in the text's own terms:
    ``ChipConfig.mesh_width must be ...`` -> ``'mesh=0x0': mesh_width must be ...``, naming
    the part that set the field (``M=0`` for ``max_m``; ``mesh=`` for ``mesh_width`` and
    ``mesh_height``, ``sram_kib=`` for ``sram_bytes``)."""
    message = message.replace("ChipConfig.", "")
    named = {"mesh": ("mesh_width", "mesh_height", "the mesh"), "sram_kib": ("sram_bytes",)}
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "=" not in part:
            continue
        key = part.split("=", 1)[0].strip()
        for name in named.get(key, (letters.get(key, key),)):
            if re.match(rf"{name}\b", message):
                return f"{part!r}: {message}"
    return message


#: Named configurations.  ``default`` is the 4 x 4 product configuration of ``make sim``;
#: ``small`` a 2 x 2 mesh with small tiles for the regression under Icarus; ``ulx3s`` the ULX3S
#: 85F board's chip (``docs/fpga.md``, "stories260K on the 85F"), which holds stories260K
#: resident at a context of up to 204 positions (140 until session 16, when the compiler stopped
#: holding the shared embedding twice: docs/fpga.md, "Session 16"): one tile of 384 KiB in one
#: bank (49,152 words, a multiple of the 2,048 words Yosys maps to 8 DP16KD: 192 DP16KD), V = 4,
#: M = 1, K up to 256.  Until session 11 it was two tiles of 176 KiB (context 53), which
#: filled 88 % of the 85F's logic slots and never routed; one tile takes 44 % and routes
#: (docs/fpga.md, sessions 14 and 15).  V = 4 since session 15 (V = 2 before: 37 % of the
#: logic; the RTL's decode 45,368 / 61,928 cycles per token at positions 1 / 64 against
#: 50,455 / 77,450, routed at 23.8 MHz: docs/fpga.md, "Session 15").  ``default`` and
#: ``small`` have 4 vector-unit result slots (session 12), ``ulx3s`` keeps 3
#: (``docs/performance.md``, session 12).  ``ulx3s`` has the SRAM read/write port's register
#: stage (``sram_latency=2``) since session 19, when the controller's fetch loop no longer
#: limited the clock: it routes at 28.4 MHz against 23.8 with L = 1 and ran at 25 MHz, for
#: 1.6 / 2.5 % more cycles per token (docs/fpga.md, "Session 19"); since session 20 at
#: 28.125 MHz (31.3 MHz routed: docs/fpga.md, "Session 20").
CONFIGS = {
    "default": ChipConfig(),
    "small": ChipConfig(mesh_width=2, mesh_height=2, sram_bytes=32 * 1024, lanes=2,
                        imem_words=512, k_max=512),
    "ulx3s": ChipConfig(mesh_width=1, mesh_height=1, sram_bytes=384 * 1024, n_banks=1,
                        lanes=4, vec_slots=3, imem_words=1024, max_m=1, k_max=256,
                        sram_latency=2),
}
