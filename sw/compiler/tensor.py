"""Tensor-parallel placement: every layer on every tile at once.

The pipeline placement (`chipotle.compiler.placement`) gives each stage its own tile, so in a
decode step one tile works at a time.  Here every tile takes part in every layer:

* the residual ``x`` (int16, M rows) is **replicated**: every tile holds the whole vector in a
  gather buffer at the same address on every tile, and every update of it is a gather (each
  tile multicasts its slice to the whole mesh);
* **attention** is split by KV heads: attention tile ``a`` owns KV heads ``g0 .. g1 - 1`` of
  every layer (their ``wq`` ``wk`` ``wv`` rows, their K and V caches), normalises ``x``,
  computes its heads' scores, softmax and weighted sums, and multicasts its slice of the
  attention output (int32, before the dynamic quantisation) to every tile;
* the **output projection** ``wo``, the feed-forward **down projection** ``w2``, the
  **embedding** and the residual adds are split by output rows (``dim`` elements, a slice
  per tile): each tile quantises the whole gathered vector (``dynq`` needs the whole vector's
  maximum), multiplies by its rows, adds its slice of the residual and multicasts the slice;
* ``w1`` / ``w3`` are split by hidden rows: each tile normalises the (replicated) residual,
  computes its rows of ``h1``, ``h3``, SiLU and the gate (int32), and multicasts its slice of
  the gate; ``w2`` then needs the whole gate (the golden model requantises ``w2``'s int32
  accumulator once per output row, and the ISA has no instruction that requantises a
  precomputed accumulator with a record's scale code, so ``w2`` is split by output rows and
  not by its inner dimension);
* the **classifier** is split by vocabulary rows over every tile, with the local argmaxes
  reduced on tile (0, 0) (`_reduce_pairs`).

Where the mesh allows (``docs/architecture.md`` section 8, "K / V partners, split scores, the
gate in slices"): the tiles without attention are **K / V partners** (`TensorRoles.kvp`,
`_partner_kv`) that compute ``wk`` (RoPE, K records) and ``wv`` of each KV head and send them
to its attention tiles, which then compute only ``wq``; in decode the K partner also
**scores the last keys** of its KV head's query heads from its own copy of the K cache
(`TensorRoles.split`, `_split_at`, `_partner_scores`); and the **gate is quantised in
slices** (`TensorRoles.gslot`, `_gate_slices`): each tile quantises its own gate rows with
the gathered maxima of every tile's and multicasts the int8, instead of every tile
quantising the whole int32 gate; session 9 packs the int8 of two tiles into one slot
(`TensorRoles.gpair`: the first sends the tail of its rows to the second, which quantises
it with its own), so that the down projection's inner dimension loses most of its padding.

Synchronisation: one counter per gathered vector (``x``, ``xa`` the residual after attention,
the attention output and the gate, which share the buffer ``g.y``), and one for each of the
exchanges above (`C_REC`, `C_KV`, `C_GMAX`, `C_Q`, `C_SC`, ..., `C_TAIL`).  Every tile sends its
slice of ``x``, ``xa`` and the gate of every row (an empty SEND, a bare counter bump, when it
owns none), so each gather is a barrier of the whole mesh; this is what makes a single
buffer per vector safe: a tile can only send the next use of a buffer once every tile has
passed the point where it last read it.

The batches of a step run one after the other (every tile works on every batch), so a
prefill step is a loop over its batches; the classifier runs once, on the step's last row.
One program body serves every batch size ``m``: the row loops count ``m`` (from the step
block), and each matrix operation is emitted twice, with M = 1 and with M = ``max_m``, inside
two hardware loops whose counts are the flags ``m == 1`` and ``m > 1`` (`_rows_op`), so that
decode reads each weight word for one row and a batch of 2 .. M rows reads it once for M
rows (the rows beyond ``m`` are stale records, computed and never used; the record buffers'
stale rows are zeroed for ``1 < m < M``).  In a batch of ``m > 1`` rows the whole-row
normalisations and quantisations are spread over the tiles (`_row_records`: row ``j`` on
tile ``j``, its record multicast, counter `C_REC`) instead of repeated on every tile.
Unrolling the layers keeps every address static; one body instead of M variants keeps the
program within the instruction memory.  With ``kvapp`` the attention tiles append K and V
through their KV store (`chipotle.isa.kv.KvLayout`, ``Placement.kv_layouts``).
``docs/architecture.md`` section 8 has the whole picture, the SRAM figures and the profile.
"""

from __future__ import annotations

import numpy as np

from ..golden import numerics as nx
from ..golden.quantize import QuantizedModel
from ..isa.core import OFF_BITS, TABLE_ENTRIES, IsaConfig, TableId
from ..isa.kv import kv_slot
from .codegen import DONE_CODE, Emitter, _rect, emit_head_records, emit_kv_append, emit_scores
from .placement import (
    _KIND_ORDER,
    _TABLE_ORDER,
    STEP_BLOCK,
    FitError,
    Placement,
    Region,
    Stage,
    TileLayout,
    classifier_is_embedding,
    step_block_layout,
)

__all__ = ["TensorRoles", "place_tensor", "tensor_program", "tensor_images"]

#: Counters of the gathers; the argmax reduction uses the last counter, as in the pipeline.
C_X, C_XA, C_ACC, C_GATE = 0, 1, 2, 3
#: Counter of the row records of a batch spread over the tiles (`_row_records`).
C_REC = 4
#: Counter of the K records and V rows the K / V partners send to the attention tiles.
C_KV = 5
#: Counter of the gate slices' maxima (`_gate_slices`).
C_GMAX = 6
#: Counters of the scores split with the K partner in decode (`_split_at`): the query
#: records at the partner, the partner's scores at the attention tiles.
C_Q, C_SC = 7, 8
#: Counter of the attention output's maxima (`TensorRoles.aslot`).
C_AMAX = 9
#: Counters of the weighted sums split with a partner in decode (`TensorRoles.wsplit`): the
#: tail of the probabilities at the partner, the partner's partial sums at the attention tile.
C_P, C_WS = 10, 11
#: Counter of the gate's tails that a pair's first tile sends its second (`TensorRoles.gpair`).
C_TAIL = 12


def _split_at(n: int, word_bytes: int) -> int:
    """Keys ``0 .. a - 1`` of a decode step's ``n`` an attention tile scores itself; its K
    partner scores ``a .. n - 1`` for the KV head's query heads (one ``matqk`` of
    ``kv_mul`` rows: with the matrix write-back's ``1 + m`` cycles per result, 3 cycles per
    key at 2 rows against the tile's 2 at one row, then a send per head of half a flit per
    key, about 20 cycles besides), so that both finish together: ``2 a + 8 = 22 + 4 (n -
    a)``, ``a ~ (4 n + 14) / 6``, a multiple of ``W / 4`` (the scores land word-aligned) and
    below ``n``: the partner always scores the step's own key, so the tile scores without
    waiting for it (0 for short contexts)."""
    step = max(1, word_bytes // 4)
    a = int(round((14 + 4 * n) / 6 / step)) * step
    return max(0, min(a, (n - 1) // step * step))


def _split3(n: int, word_bytes: int, vsplit: bool) -> tuple:
    """Keys ``0 .. a - 1``, ``a .. b - 1`` and ``b .. n - 1`` of a decode step's ``n``: the
    attention tile's, the V partner's and the K partner's (`TensorRoles.vsplit`; without it
    ``a = b = _split_at(n)`` and the K partner scores ``a .. n - 1``).  The partners score
    both query heads in one ``matqk`` (3 cycles per key at 2 rows and a send per head of half
    a flit per key, about 4 cycles per key and 20 besides) against the tile's 2 cycles per
    key, so that all three finish together: ``2 a + 8 = 22 + 4 (b - a) = 22 + 4 (n - b)``,
    ``a ~ (n + 7) / 2``; measured on stories260K (positions 64, 128, 256) the best is a
    little more for the tile, ``a ~ 0.55 n + 2`` (the partners start scoring when the query
    record arrives, the tile as it sends it); ``a`` and ``b`` are multiples of ``W / 4`` (the
    scores land word-aligned) and ``b`` below ``n``: the K partner always scores the step's
    own key, so that neither the tile nor the V partner waits for it."""
    if not vsplit:
        a = _split_at(n, word_bytes)
        return a, a
    step = max(1, word_bytes // 4)
    last = (n - 1) // step * step
    a = max(0, min(int(round((40 + 11 * n) / 20 / step)) * step, last))
    b = max(a, min(a + int(round((n - a) / 2 / step)) * step, last))
    return a, b


#: Keys from which a decode step's weighted sum of V is split with the attention tile's helper
#: (`_wsum_split`; below, the tile sums every key): the tail costs the tile the ``vadd`` of
#: the partial sums and the network's round trip besides its keys.  Measured on the RTL
#: (session 32, stories260K on the default chip, `wsum` reading two V rows per wide read: a
#: decode step at every position to 511 with and without tails, ``python -m
#: chipotle.sim.decode_sweep --to 511 --split-from 0,100000``): tails cost 122 cycles a
#: step on average at positions 32 .. 47, 90 at 64 .. 79, 42 at 128 .. 143, 15 at 192 ..
#: 223, about nothing at 224 .. 255 (-4 on average), and save 13 at 256 .. 287, 93 at
#: 320 .. 351, 252 at 480 .. 511.  (Session 13
#: put the crossover at 72 keys, when a `wsum` cost twice as many cycles per key.)  0: every
#: tail the split allows (the small model's tests, whose 32 positions end before it, run the
#: tails that way).
WSUM_SPLIT_FROM = 240
#: The attention tile's share of the keys in a split, ``c ~ WSUM_SPLIT_SHARE n +
#: WSUM_SPLIT_OFFSET`` (`_wsum_split`).
WSUM_SPLIT_SHARE, WSUM_SPLIT_OFFSET = 0.583, 12


def _wsum_split(n: int, word_bytes: int) -> int:
    """Keys ``0 .. c - 1`` of a decode step's ``n`` whose weighted sum of V an attention tile
    computes itself with `TensorRoles.wsplit`; its partner sums ``c .. n - 1`` (none when
    ``c = n``).  On the default chip the tile's ``wsum`` takes about ``17 + 0.625 c`` cycles
    (two V rows per wide read, ``docs/tile.md`` "Session 32"); the partner's path, the
    probabilities' send (``(n - c) / 4`` flits), its ``wsum`` and the partial sums' way back,
    about ``35 + 0.875 (n - c)``: ``c ~ 0.583 n + 12`` (`WSUM_SPLIT_SHARE`,
    `WSUM_SPLIT_OFFSET`), a multiple of ``W / 2`` (the tail of
    the uint16 probabilities starts word-aligned), at least that; no tail below
    `WSUM_SPLIT_FROM` keys (there it costs more than it saves).  On the RTL at position 256
    this split is 95 cycles shorter than session 13's ``c ~ 0.545 n + 6.5`` (10,350 against
    10,445 decode cycles, before session 32's prologue change)."""
    q = max(1, word_bytes // 2)
    c = max(q, int(round((WSUM_SPLIT_OFFSET + WSUM_SPLIT_SHARE * n) / q)) * q)
    return n if c >= n or n < WSUM_SPLIT_FROM else c


def _split(units: int, n: int, j: int) -> tuple:
    """Units ``[lo, hi)`` of part `j` when `units` are split as evenly as possible in `n`."""
    return units * j // n, units * (j + 1) // n


class TensorRoles:
    """What each tile computes in the tensor-parallel placement.

    Attributes
    ----------
    o : dict of (x, y) to (int, int)
        Rows ``[o0, o1)`` of ``dim`` (embedding columns, ``wo`` and ``w2`` rows, residual).
    h : dict of (x, y) to (int, int)
        Rows ``[h0, h1)`` of ``hidden_dim`` (``w1`` and ``w3`` rows, gate).
    kv : dict of (x, y) to (int, int)
        KV heads ``[g0, g1)`` of an attention tile (absent: no attention).
    q : dict of (x, y) to (int, int)
        Query heads ``[q0, q1)`` of an attention tile: all those of its KV heads, or a share
        of the query heads of its one KV head (whose K and V the tiles sharing it all
        compute and cache).
    att_tiles : list of (x, y)
    kvp : dict of (x, y) to list of (str, int)
        The **K / V partners**: tiles without attention that compute the ``wk`` (``"k"``:
        with RoPE and the K record) or ``wv`` (``"v"``) rows of a KV head for its attention
        tiles and send them there, so that the attention tiles compute only ``wq``.  Empty
        (the attention tiles compute K and V themselves) unless `partners`, every attention
        tile has one KV head, and some tile has no attention.  The jobs ``("k", 0), ("v",
        0), ("k", 1), ...`` go round-robin over the tiles without attention.
    kv_tiles : dict of int to list of (x, y)
        The attention tiles of each KV head (row-major).
    split : bool
        Decode splits the scores of each query head between its attention tile (keys ``0 ..
        a - 1``, `_split_at`) and the KV head's K partner (the rest, for every query head of
        the KV head at once, from the partner's copy of the K cache).  Needs K partners,
        `split_scores`, one query head per attention tile and ``kv_mul <= M``.
    vsplit : bool
        With `split`, the KV head's V partner scores a middle share of the keys too
        (`_split3`: the attention tile keys ``0 .. a - 1``, the V partner ``a .. b - 1``, the
        K partner ``b .. n - 1``), from a copy of the K cache that the K partner fills (it
        sends each K record there too).  Needs `vscores` and, for every KV head, a V partner
        on another tile than its K partner, and no partner tile with jobs of both kinds.
    wsplit : bool
        With `vsplit`, decode splits each query head's weighted sum of V with a partner of its
        KV head (`helper`): the attention tile sums keys ``0 .. c - 1`` (`_wsum_split`) and
        sends the probabilities of the rest to the partner, which sums them over its copy of
        the KV head's V cache (the V partner keeps its V rows, the K partner receives them)
        and sends the partial sums back, added with ``vadd``.  Needs at most as many
        attention tiles per KV head as partners scoring it and two more counters.
    helper : dict of (x, y) to (x, y)
        With `wsplit`, the partner that sums the tail of each attention tile's weighted sum:
        the ``i``-th attention tile of a KV head has its ``i``-th scoring partner.
    scorers : dict of int to list of (x, y)
        The partners that score keys of each KV head in decode: its K partner, then its V
        partner with `vsplit` (empty without `split`).
    aslot : bool
        The attention output quantised in slices, as the gate (`_att_slices`): each
        attention tile multicasts the largest magnitude of its heads' output, every tile
        quantises the maxima (and its heads' output) and the attention tiles multicast their
        int8, instead of every tile quantising the whole gathered int32 output.  Needs
        `att_slices`, the heads' int8 in whole words and a tenth counter.
    gslot : int
        Bytes of each tile's int8 slot in the quantised gate when the gate is quantised in
        slices (`_gate_slices`: each tile quantises its own rows with the maximum gathered
        from every tile, and the down projection's inner dimension is ``T * gslot``, its
        weights zero in the slots' padding); 0 when the whole gate is gathered as int32 and
        quantised on every tile.  Needs `gate_slices`, ``T * pad(rows) <= k_max`` and a
        seventh counter.
    gpair : dict of (x, y) to (x, y)
        The gate's int8 packed in **pairs** of tiles (session 9, `_gate_slices`): the first
        tile ``A`` of a pair (the key) sends the whole words of its rows' int8 and its last
        ``tA = rows mod W`` gate values (int32) to its second tile ``B`` (the value, the tile
        below it), which quantises them with its own rows and sends their int8 behind ``A``'s
        words, so that the pair's slot is ``W floor(rA / W) + pad(tp + rB)`` bytes instead
        of ``2 gslot`` (``tp``: ``tA`` rounded up to whole words of int32, `gtail`).  Only
        where that is shorter and with a thirteenth counter (`C_TAIL`); needs `gslot`.  The
        reducer (``tiles[0]``) pairs too since the waits in the batch-size branches freed
        its instruction words (on 4 x 4 tiles 8 pairs, ``gk2`` 192 instead of 200).
    gfirst : dict of (x, y) to (x, y)
        The inverse of `gpair`: each second tile's first.
    gtail : dict of (x, y) to int
        ``tp`` of each first tile: the int32 elements it sends its second (``tA`` of them
        gate values, then zeros of its ``gq`` row), the window before the second's rows.
    goff : dict of (x, y) to int
        Byte offset in the gathered gate (the down projection's inner dimension) of the int8
        each tile sends: its slot (``gslot`` bytes) when unpaired, its pair's slot for a
        first tile, and ``W floor(rA / W)`` into it for a second (the tail's int8, then its
        own rows').
    gk2 : int
        The down projection's inner dimension with the gate in slices (elements): ``T *
        gslot`` less what the pairs save.
    prow : int
        Prefill batches' attention rows shared with the helpers (`_partner_rows`): in a
        batch of ``m > 1`` rows each attention tile scores, normalises and sums rows ``0 ..
        prow - 1`` of its query head, its `helper` rows ``prow .. m - 1`` (from its copies of
        the K and V caches and the query records the tile sends, `C_Q`), sending each row's
        weighted sum into the tile's ``aq`` row (`C_WS`) and its largest magnitude into the
        tile's slot of every tile's maxima (`C_AMAX`).  ``ceil(M / 2)``; 0 (off) unless
        `prefill_rows`, `wsplit`, `aslot`, ``2 <= M <= 4`` (so that ``m >= prow``) and a
        head's int32 output is whole words.
    """

    def __init__(self, qm: QuantizedModel, isa: IsaConfig, tiles: list, partners: bool = True,
                 gate_slices: bool = True, split_scores: bool = True, att_slices: bool = True,
                 vscores: bool = True, wsums: bool = True, prefill_rows: bool = True,
                 gate_pairs: bool = True):
        c, W = qm.config, isa.word_bytes
        T = len(tiles)
        # int16 rows per word (x slices), int32 rows per word (gate slices); the gate
        # quantised in slices (`_gate_slices`) is gathered as int8 slots of its own, so its
        # rows are split one by one
        self.gslot = 0
        if (gate_slices and isa.n_counters > C_GMAX + 1
                and T * isa.pad(-(-c.hidden_dim // T)) <= isa.k_max):
            self.gslot = isa.pad(-(-c.hidden_dim // T))
        go, gh = max(1, W // 2), 1 if self.gslot else max(1, W // 4)
        uo, uh = -(-c.dim // go), -(-c.hidden_dim // gh)
        self.o, self.h, self.kv = {}, {}, {}
        for j, xy in enumerate(tiles):
            a, b = _split(uo, T, j)
            self.o[xy] = (min(a * go, c.dim), min(b * go, c.dim))
            a, b = _split(uh, T, j)
            self.h[xy] = (min(a * gh, c.hidden_dim), min(b * gh, c.hidden_dim))
        self._gate_pairs(isa, tiles, gate_pairs)
        # attention tiles: each KV head on `s` tiles (s a divisor of kv_mul: a share of its
        # query heads each, K and V computed on all s), the most tiles whose slices of the
        # attention output are word-aligned; else whole KV heads on fewer tiles
        KV, g = c.n_kv_heads, c.kv_mul
        hb = 4 * c.head_size                      # acc bytes of one query head
        self.kv, self.q = {}, {}
        for s in sorted((d for d in range(1, g + 1) if g % d == 0), reverse=True):
            if KV * s > T or any((hb * (j // s * g + j % s * (g // s))) % W
                                 for j in range(KV * s)):
                continue
            for j, xy in enumerate(tiles[:KV * s]):
                self.kv[xy] = (j // s, j // s + 1)
                self.q[xy] = (j // s * g + j % s * (g // s), j // s * g + (j % s + 1) * (g // s))
            break
        else:
            A = max(a for a in range(1, min(KV, T) + 1)
                    if all((hb * g * _split(KV, a, j)[0]) % W == 0 for j in range(a)))
            for j, xy in enumerate(tiles[:A]):
                g0, g1 = _split(KV, A, j)
                self.kv[xy], self.q[xy] = (g0, g1), (g0 * g, g1 * g)
        self.att_tiles = [xy for xy in tiles if xy in self.kv]
        self.kv_tiles = {g: [xy for xy in self.att_tiles if self.kv[xy] == (g, g + 1)]
                         for g in range(KV)}
        idle = [xy for xy in tiles if xy not in self.kv]
        self.kvp = {}
        if (partners and idle and isa.n_counters > C_KV + 1
                and all(g1 - g0 == 1 for g0, g1 in self.kv.values())):
            jobs = [(kind, h) for h in range(KV) for kind in "kv"]
            for i, job in enumerate(jobs):
                self.kvp.setdefault(idle[i % len(idle)], []).append(job)
        #: K partner of each KV head: (tile, index of the job on it)
        self.kpartner = {h: (xy, j) for xy, jobs in self.kvp.items()
                         for j, (kind, h) in enumerate(jobs) if kind == "k"}
        #: the attention output quantised in slices: the heads' int8 words are whole words
        self.aslot = bool(att_slices and isa.n_counters > C_AMAX + 1 and all(
            (q0 * c.head_size) % W == 0 and ((q1 - q0) * c.head_size) % W == 0
            for q0, q1 in self.q.values()))
        self.split = bool(split_scores and self.kvp and g <= isa.max_m
                          and isa.n_counters > C_SC + 1
                          and all(q1 - q0 == 1 for q0, q1 in self.q.values()))
        #: V partner of each KV head: (tile, index of the job on it)
        self.vpartner = {h: (xy, j) for xy, jobs in self.kvp.items()
                         for j, (kind, h) in enumerate(jobs) if kind == "v"}
        self.vsplit = bool(vscores and self.split
                           and all(self.vpartner[h][0] != self.kpartner[h][0] for h in range(KV))
                           and all(len({kind for kind, _ in jobs}) == 1
                                   for jobs in self.kvp.values()))
        self.scorers = {h: [self.kpartner[h][0]] + ([self.vpartner[h][0]] if self.vsplit else [])
                        for h in range(KV)} if self.split else {}
        self.wsplit = bool(wsums and self.vsplit and isa.n_counters > C_WS + 1
                           and all(len(self.kv_tiles[h]) <= len(self.scorers[h])
                                   for h in range(KV)))
        self.helper = {xy: self.scorers[h][i] for h in range(KV)
                       for i, xy in enumerate(self.kv_tiles[h])} if self.wsplit else {}
        M = isa.max_m
        self.prow = (-(-M // 2) if prefill_rows and self.wsplit and self.aslot and 2 <= M <= 4
                     and (4 * c.head_size) % W == 0 else 0)

    def _gate_pairs(self, isa: IsaConfig, tiles: list, on: bool) -> None:
        """Set `gpair`, `gfirst`, `gtail`, `goff` and `gk2` (the gate's slots, paired where
        that shortens them: each tile with the tile below it, greedily in `tiles` order)."""
        W, pad, S = isa.word_bytes, isa.pad, self.gslot
        ipw = max(1, W // 4)                    # int32 per word
        self.gpair, self.gfirst, self.gtail, self.goff = {}, {}, {}, {}
        rows = {xy: b - a for xy, (a, b) in self.h.items()}
        if S and on and isa.n_counters > C_TAIL + 1:
            for xy in tiles:
                b = (xy[0], xy[1] + 1)
                if xy in self.gfirst or b not in rows or b in self.gfirst:
                    continue
                ra, rb = rows[xy], rows[b]
                ta = ra % W
                tp = -(-ta // ipw) * ipw
                if ta and rb and ra // W * W + pad(tp + rb) < 2 * S:
                    self.gpair[xy], self.gfirst[b], self.gtail[xy] = b, xy, tp
        off = 0
        for xy in tiles:
            if xy in self.gfirst:
                continue
            self.goff[xy] = off
            if xy in self.gpair:
                b = self.gpair[xy]
                self.goff[b] = off + rows[xy] // W * W
                off = self.goff[b] + pad(self.gtail[xy] + rows[b])
            else:
                off += S
        self.gk2 = off

    def gate_columns(self, xy) -> list:
        """The positions of tile `xy`'s hidden rows in the gathered gate (the down
        projection's inner dimension, `gk2`), in row order (`gslot` only)."""
        a, b = self.h[xy]
        first = self.gfirst.get(xy)
        start = self.goff[xy] + (self.gtail[first] if first is not None else 0)
        return list(range(start, start + b - a))

    def helped(self, xy) -> list:
        """The ``(attention tile, KV head)`` pairs whose weighted-sum tails partner `xy` sums
        (`wsplit`), in row-major order of the attention tiles."""
        return [(a, self.kv[a][0]) for a in self.att_tiles if self.helper.get(a) == xy]

    def scores_keys(self, xy) -> bool:
        """Whether tile `xy` is a partner that scores keys in decode (`_partner_scores`)."""
        return any(xy in tiles for tiles in self.scorers.values())


def _gate_geometry(roles: TensorRoles, isa: IsaConfig) -> dict:
    """Sizes of the gate quantised in slices (`_gate_slices`), bytes: ``S`` a tile's int8
    slot, ``K2`` the down projection's padded inner dimension (elements), ``cnt`` the int32
    elements before a tile's rows in a ``gq`` row (every tile's maximum in a W-byte slot,
    zeros up to a multiple of W elements, so that the rows' int8 start word-aligned in the
    record), ``gq`` / ``gqr`` the row strides of ``gq`` (the maxima, then the tile's int32
    rows) and of ``gqr`` (its record)."""
    W, pad, rec = isa.word_bytes, isa.pad, isa.record_bytes
    T = len(roles.h)
    nh = max(b - a for a, b in roles.h.values())
    cnt = -(-T * W // 4 // W) * W
    tp = max(roles.gtail.values(), default=0)      # a second tile's window (`gpair`)
    return dict(S=roles.gslot, K2=roles.gk2, cnt=cnt, gq=4 * cnt + pad(4 * (tp + nh)),
                gqr=rec(cnt + tp + nh))


def _att_geometry(roles: TensorRoles, isa: IsaConfig, head_size: int) -> dict:
    """Sizes of the attention output quantised in slices (`_att_slices`), as
    `_gate_geometry`: ``cnt`` int32 elements of maxima (a word per attention tile, zeros to
    a multiple of W elements) before an attention tile's heads in an ``aq`` row, ``aq`` /
    ``aqr`` the row strides of ``aq`` and of ``aqr`` (its record)."""
    W, pad, rec = isa.word_bytes, isa.pad, isa.record_bytes
    A = len(roles.att_tiles)
    nq = max(q1 - q0 for q0, q1 in roles.q.values()) * head_size
    cnt = -(-A * W // 4 // W) * W
    return dict(cnt=cnt, aq=4 * cnt + pad(4 * nq), aqr=rec(cnt + nq))


def _requests(qm: QuantizedModel, isa: IsaConfig, roles: TensorRoles, xy, context: int,
              batches: int, cls_rows, reduce: int, kvapp: bool = False,
              emb_alias: bool = False) -> list:
    """Return the regions of tile `xy` as ``(name, bytes, kind)`` (with `emb_alias` no ``e``:
    the embedding rows are ``cls.w``, `_embedding_is_classifier`)."""
    c, M, W, pad, rec = qm.config, isa.max_m, isa.word_bytes, isa.pad, isa.record_bytes
    dim, hid, hs = c.dim, c.hidden_dim, c.head_size
    xs, as_, gs = pad(2 * dim), pad(4 * dim), pad(4 * hid)
    o0, o1 = roles.o[xy]
    h0, h1 = roles.h[xy]
    No, Nh = o1 - o0, h1 - h0
    req = [(STEP_BLOCK, pad(step_block_layout(M, batches)["size"]), "step"),
           ("g.x", M * xs, "g"), ("g.xa", M * xs, "g"),
           # the attention output and the gate, when gathered as int32
           ("g.y", max(M * max(0 if roles.aslot else as_, 0 if roles.gslot else gs), W), "g")]
    att = xy in roles.kv
    helps = bool(roles.prow and roles.helped(xy))  # a prefill batch's last rows (softmax)
    tabs = [TableId.RSQRT, TableId.DYNQ, TableId.SIGMOID]
    if att or helps:
        tabs += [TableId.EXP2, TableId.RECIP]
    req += [(f"tab.{t.name.lower()}", 2 * TABLE_ENTRIES[t], "table")
            for t in _TABLE_ORDER if t in tabs]
    k2 = hid
    if roles.gslot:
        gg = _gate_geometry(roles, isa)
        k2 = gg["K2"]
        req += [("gq", M * gg["gq"], "g"), ("gqr", M * gg["gqr"], "act")]
    if roles.aslot:
        ag = _att_geometry(roles, isa, hs)
        req += [("aq", M * ag["aq"], "g"), ("aqr", M * ag["aqr"], "act"),
                ("arec", M * rec(dim), "g")]
    req += [("state", 16, "act"), ("mtab", 16 * (M + 1), "act"),
            ("ems", 4 * c.vocab_size, "act"), ("yo", M * pad(2 * max(No, 1)), "act"),
            ("xo", M * pad(2 * max(No, 1)), "act"),
            ("rec", M * rec(dim), "g"), ("grec", M * rec(k2), "g")]
    if M > 2:
        req += [("zeros", (M - 2) * max(rec(dim), rec(hid), rec(k2)), "act")]
    if No and not emb_alias:
        req += [("e", c.vocab_size * pad(No), "w")]
    if Nh:
        hz = pad(2 * Nh)
        # h3 below h1: the scoreboard takes a vector instruction to touch 4 n + W bytes
        # from its operands (`vector_footprint`), so SiLU over h1 (in place, a batch's M
        # rows) would otherwise wait for w3 writing h3 after it
        req += [("h3", M * hz, "act"), ("h1", M * hz, "act")]
        if not roles.gslot:
            req += [("gl", M * 2 * hz, "act")]
    if att:
        g0, g1 = roles.kv[xy]
        nk = g1 - g0
        nq = roles.q[xy][1] - roles.q[xy][0]
        krec = rec(hs)
        g = nq // nk                        # query heads per KV head; one matqk takes gc
        gc = max(d for d in range(1, min(g, M) + 1) if g % d == 0)
        if not roles.kvp:
            req += [("k16", M * pad(2 * nk * hs), "act")]
        req += [("q16", M * pad(2 * nq * hs), "act"), ("qrec", M * nq * krec, "act"),
                ("t", gc * pad(4 * context), "act"), ("p", 2 * context, "act"),
                ("t2", gc * pad(4 * context), "act"),
                ("rope", context * 2 * hs, "kv")]
        if g > 1:                           # the score rows' strides (several query heads)
            req += [("padt", 4 * (context + 1), "act")]
        if roles.split:
            req += [("atab", (32 if roles.wsplit else 8) * (context + 1), "act")]
        if roles.wsplit:
            req += [("wloc", pad(4 * hs), "act"), ("wpart", pad(4 * hs), "act")]
        if kvapp:
            kvl = _kv_layout(qm, isa, nk, context, 0, xy)
            req += [("kbuf", M * nk * krec, "act"), ("vbuf", nk * M * pad(hs), "act"),
                    ("kv", kvl.size_words * W, "kv")]
    jobs = roles.kvp.get(xy, [])
    if jobs:                                # a K / V partner's buffers (`_partner_kv`)
        req += [("pk16", M * pad(2 * hs), "act"), ("pkrec", M * rec(hs), "act"),
                ("pv", M * pad(hs), "act")]
        if any(kind == "k" for kind, _ in jobs):
            req += [("prope", context * 2 * hs, "kv")]
        if roles.scores_keys(xy):
            req += [("ptab", 32 * (context + 1), "act"),
                    ("pt", max(c.kv_mul, M - roles.prow if helps else 0)
                            * pad(4 * context), "act")]
            # the query records, per KV head: "g" regions, at the same address on the K and
            # V partners when they have the same jobs' heads (one multicast reaches both)
            heads = [h for kind, h in jobs if kind == "k" or roles.vsplit]
            req += [(f"pq{h}", c.kv_mul * rec(hs), "g") for h in heads]
        if roles.helped(xy):                # the weighted sums' tails (`_partner_wsums`)
            for _, h in roles.helped(xy):
                req += [(f"pp{h}", pad(2 * context), "act"), (f"pw{h}", 2 * pad(4 * hs), "act")]
        if helps:                           # a prefill batch's last rows (`_partner_rows`)
            req += [(f"hq{t}", (M - roles.prow) * rec(hs), "act")
                    for t in range(len(roles.helped(xy)))]
            req += [("hw", (M - roles.prow) * pad(4 * hs), "act"),
                    ("hm", (M - roles.prow) * W, "act")]
    for li in range(c.n_layers):
        p = f"l{li}."
        req += [(p + "ffn_eps", 8, "c"), (p + "fg", 2 * dim, "act")]
        if jobs:
            req += [(p + "att_eps", 8, "c"), (p + "ag", 2 * dim, "act")]
            for j, (kind, _) in enumerate(jobs):
                req += [(p + f"pw{j}_ms", 4 * hs, "c"), (p + f"pw{j}", hs * pad(dim), "w")]
                if roles.scores_keys(xy) and (kind == "k" or roles.vsplit):
                    req += [(p + f"pkc{j}", context * rec(hs), "kv")]
            if roles.split:
                req += [(p + "att_ms", 4, "c")]
            for _, h in roles.helped(xy):   # a copy of the KV head's V cache
                req += [(p + f"pvc{h}", context * pad(hs), "kv")]
        if No:
            req += [(p + "wo_ms", 4 * No, "c"), (p + "w2_ms", 4 * No, "c"),
                    (p + "wo", No * pad(dim), "w"), (p + "w2", No * pad(k2), "w")]
        if Nh:
            req += [(p + "w1_ms", 4 * Nh, "c"), (p + "w3_ms", 4 * Nh, "c"),
                    (p + "w1", Nh * pad(dim), "w"), (p + "w3", Nh * pad(dim), "w")]
        if att:
            req += [(p + "att_eps", 8, "c"), (p + "att_ms", 4, "c"),
                    (p + "wq_ms", 4 * nq * hs, "c"), (p + "ag", 2 * dim, "act"),
                    (p + "wq", nq * hs * pad(dim), "w")]
            if not roles.kvp:
                req += [(p + "wk_ms", 4 * nk * hs, "c"), (p + "wv_ms", 4 * nk * hs, "c"),
                        (p + "wk", nk * hs * pad(dim), "w"), (p + "wv", nk * hs * pad(dim), "w")]
            if not kvapp:
                req += [(p + "kcache", nk * context * krec, "kv"),
                        (p + "vcache", (context + M - 1) * pad(nk * hs), "kv")]
    if cls_rows is not None:
        cap = cls_rows[2]
        req += [("cls.eps", 8, "c"), ("cls.ms", 4 * cap, "c"), ("cls.g", 2 * dim, "act"),
                ("cls.xq", rec(dim), "act"),
                ("cls.logits", 4 * cap, "act"), ("cls.loc", W, "act"),
                ("cls.slot", W if _packed_argmax(qm, isa) else 2 * W, "act"),
                ("cls.w", cap * pad(dim), "w")]
    if reduce:
        req += [] if _packed_argmax(qm, isa) else [("red.slots", reduce * W, "red")]
        req += [("red.vals", reduce * W, "red"), ("red.j", W, "red"), ("red.token", W, "red")]
    return req


def _logit_bound(qm: QuantizedModel) -> int:
    """An upper bound of ``|logit|`` over every input: ``|acc| <= 128 sum_k |w[r, k]|`` (int8
    activations), the largest dynamic mantissa ``mu < 2^(B + 2)`` and exponent ``b <= 15``
    (the classifier's input is the int16 final norm: ``max|x| <= 2^15``), through
    `requant`'s formula with each row's ``(m, s)``."""
    cl = qm.classifier
    acc = 128 * np.abs(cl.w.astype(np.int64)).sum(axis=1)
    mu = (1 << (nx.DQ_INDEX_BITS + 2)) - 1
    sh = cl.s.astype(np.int64) - 15
    if sh.size == 0 or sh.min() < 1:
        return 1 << 31
    return int(((acc * mu * cl.m.astype(np.int64) + (1 << (sh - 1))) >> sh).max())


def _packed_argmax(qm: QuantizedModel, isa: IsaConfig) -> bool:
    """Whether each classifier tile sends its local maximum and vocabulary row in one word
    (`_classifier`, `_reduce_pairs`): the maximum in int32 0 (and 2, 3, ...), ``-2^31 +
    row`` in int32 1.  The reducer's first maximum over the words is then an int32 0 as long
    as every ``-2^31 + row`` is below every tile's maximum, which `_logit_bound` proves (no
    logit reaches ``-2^31 + vocab_size``); needs two int32 per word."""
    return (isa.word_bytes >= 8
            and _logit_bound(qm) < (1 << 31) - qm.config.vocab_size)


def _kv_layout(qm: QuantizedModel, isa: IsaConfig, nk: int, context: int, addr: int,
               xy=None):
    """The `KvLayout` of an attention tile's caches (``nk`` KV heads of every layer) at byte
    address `addr` (word-aligned)."""
    from ..isa.kv import KvLayout
    from .placement import kv_layout_or_fit_error
    return kv_layout_or_fit_error(
        xy, KvLayout, n_layers=qm.config.n_layers, n_kv_heads=nk,
        head_size=qm.config.head_size, max_pos=context, base=addr // isa.word_bytes,
        word_bytes=isa.word_bytes, k_header=True)


def _embedding_is_classifier(qm: QuantizedModel, roles: TensorRoles, xy, cls_rows) -> bool:
    """Whether tile `xy`'s embedding rows are its classifier rows byte for byte, so that the
    region ``e`` is an alias of ``cls.w`` (`TileLayout.aliases`) and not a second copy: the
    tile holds every embedding column (the slice ``roles.o`` is the full model dimension)
    and the whole shared classifier (`classifier_is_embedding`).  That is a 1 x 1 mesh, such
    as the ULX3S's chip, where it saves ``vocab_size * pad(dim)`` bytes (32 KiB for
    stories260K); on a larger mesh each tile's embedding columns and classifier rows differ.
    """
    o0, o1 = roles.o[xy]
    return o0 == 0 and o1 == qm.config.dim and classifier_is_embedding(qm, cls_rows)


def _layout(xy, stages, reduce, req, isa) -> TileLayout:
    order = dict(_KIND_ORDER, g=0.5)
    req = sorted(req, key=lambda r: order[r[2]])
    lay = TileLayout(xy, stages, reduce)
    addr = 0
    for name, nbytes, kind in req:
        lay.regions[name] = Region(name, addr, nbytes, kind)
        addr += isa.pad(nbytes)
    lay.size = addr
    return lay


def place_tensor(qm: QuantizedModel, isa: IsaConfig, width: int, height: int, context: int,
                 batches: int = 1, kvapp: bool = False, partners: bool = True,
                 att_slices: bool = True, gate_slices: bool = True, vscores: bool = True,
                 wsums: bool = True, prows: bool = True, gpairs: bool = True) -> tuple:
    """Lay out every tile of the mesh for the tensor-parallel placement.

    With `kvapp`, the attention tiles' K and V caches are one KV store region in the layout
    of `chipotle.isa.kv.KvLayout` (``Placement.kv_layouts``), appended with ``kvapp``.
    With `partners`, the tiles without attention compute the K and V rows of the KV heads
    when they can (`TensorRoles.kvp`; not when a tile's SRAM lies beyond the 17-bit offsets,
    whose addresses would need the registers that hold the batch-size flags).  With
    `att_slices`, the attention output is quantised in slices (`TensorRoles.aslot`; not
    beyond the 17-bit offsets either, where every far address costs instructions).  With
    `gate_slices`, the gate is quantised in slices (`TensorRoles.gslot`).  A mesh on which
    these schemes do not fit (their buffers, the partners' K cache copies, the padded
    ``w2``) is laid out without the weighted sums split with the partners (`wsums`,
    `TensorRoles.wsplit`: the partners' V cache copies), then without the V partner's
    scores (`vscores`), then without any of them; before those, without the prefill rows on
    the helpers (`prows`, `TensorRoles.prow`: the helpers' softmax tables and buffers).
    With `gpairs` the gate's int8 are packed in pairs of tiles where that shortens the down
    projection (`TensorRoles.gpair`; `chipotle.compiler.compiled` compiles without them
    when the programs do not fit the instruction memory).

    Returns
    -------
    (Placement, TensorRoles)
        ``Placement.kind`` is ``"tensor"``; its ``pipeline`` is empty, ``classifier`` lists
        the tiles holding classifier rows in vocabulary order, ``rect`` is the whole mesh.

    Raises
    ------
    FitError
        If a tile's regions exceed its SRAM, or static data lies beyond the ``c`` reach.
    """
    tiles = [(x, y) for y in range(height) for x in range(width)]
    roles = TensorRoles(qm, isa, tiles, partners, gate_slices, att_slices=att_slices,
                        vscores=vscores, wsums=wsums, prefill_rows=prows, gate_pairs=gpairs)
    extras = bool(roles.kvp or roles.aslot or roles.gslot)
    V = qm.config.vocab_size
    cap = -(-V // len(tiles))
    cls = {}
    for j, xy in enumerate(tiles):
        if j * cap < V:
            cls[xy] = (j * cap, min(cap, V - j * cap), cap)
    reducer = tiles[0]
    lays = {}
    for xy in tiles:
        rows = cls.get(xy)
        stages = [Stage("cls", rows=rows)] if rows else []
        red = len(cls) if xy == reducer else 0
        alias = _embedding_is_classifier(qm, roles, xy, rows)
        lay = _layout(xy, stages, red, _requests(qm, isa, roles, xy, context, batches, rows,
                                                 red, kvapp, emb_alias=alias), isa)
        if alias:
            lay.aliases["e"] = "cls.w"
        if lay.size > isa.sram_bytes and roles.prow:
            return place_tensor(qm, isa, width, height, context, batches, kvapp, partners,
                                att_slices, gate_slices, vscores, wsums, prows=False,
                                gpairs=gpairs)
        if lay.size > isa.sram_bytes and (roles.wsplit or roles.vsplit):
            return place_tensor(qm, isa, width, height, context, batches, kvapp, partners,
                                att_slices, gate_slices, vscores=roles.wsplit and vscores,
                                wsums=False, gpairs=gpairs)
        if lay.size > isa.sram_bytes and extras:
            return place_tensor(qm, isa, width, height, context, batches, kvapp, False, False,
                                False, gpairs=gpairs)
        if lay.size > isa.sram_bytes:
            what = "attention, " if xy in roles.kv else ""
            raise FitError(f"tile {xy} of the tensor placement ({what}its share of every "
                           f"layer and of the classifier) needs {lay.size:,} bytes of SRAM at "
                           f"context {context}, but a tile has {isa.sram_bytes:,}")
        if not lay.c_limit_ok():
            raise FitError(f"tile {xy}: static data addressed through the 17-bit `c` "
                           f"immediate lies beyond 128 KiB")
        lays[xy] = lay
    if (roles.kvp or roles.aslot) and any(lay.size > 1 << OFF_BITS for lay in lays.values()):
        return place_tensor(qm, isa, width, height, context, batches, kvapp, partners=False,
                            att_slices=False, gate_slices=gate_slices, gpairs=gpairs)
    kvl = {}
    if kvapp:
        for xy in roles.att_tiles:
            g0, g1 = roles.kv[xy]
            kvl[xy] = _kv_layout(qm, isa, g1 - g0, context, lays[xy]["kv"], xy)
    pl = Placement(lays, [], list(cls), (0, width - 1, 0, height - 1), reducer, batches,
                   kind="tensor", kv_layouts=kvl)
    return pl, roles


class _K:
    def __init__(self, qm, isa, pl, roles, lay, context, pipe_att=True):
        self.qm, self.c, self.isa, self.pl, self.roles, self.lay, self.context = (
            qm, qm.config, isa, pl, roles, lay, context)
        self.xy = lay.xy
        self.all = _rect(pl.rect)
        self.T = len(pl.tiles)
        #: the KV store layout when K and V are appended with `kvapp`, else None
        self.kvl = pl.kv_layouts.get(self.xy)
        #: whether the attention tiles append K and V with `kvapp` (a partner's targets)
        self.kvl_any = bool(pl.kv_layouts)
        #: this tile's K / V partner jobs (`TensorRoles.kvp`)
        self.jobs = roles.kvp.get(self.xy, [])
        #: the down projection's inner dimension (padded when the gate is quantised in slices)
        self.k2 = roles.gk2 if roles.gslot else qm.config.hidden_dim
        #: the batch-size flags (m == 1, m > 1) live in r13 / r14 when no address needs the
        #: Emitter's scratch registers (a tile within the 17-bit offsets), else in `state`
        self.regflags = lay.size <= 1 << OFF_BITS
        #: this tile's index in row-major order
        self.index = sorted(pl.tiles, key=lambda t: (t[1], t[0])).index(self.xy)
        #: batches of m > 1 rows spread the rows' normalisation and quantisation over the
        #: tiles (`_row_records`): needs the flags in registers, a tile per row and `C_REC`
        self.dist = (self.regflags and 1 < isa.max_m <= self.T
                     and isa.n_counters > C_REC + 1)
        #: the attention norm spread too: rows j < M on the first M (attention) tiles
        self.dist_att = self.dist and len(roles.att_tiles) >= isa.max_m
        #: software-pipelined scores (`_scores_pipelined`), unless the program is too long
        self.pipe_att = pipe_att

    def a(self, name, reg=0, plus=0):
        """Address operand of region `name` (+ `plus`), optionally + a register."""
        return (self.lay[name] + plus, reg)


def _sb(k, field):
    return (k.lay[STEP_BLOCK] + step_block_layout(k.isa.max_m, k.pl.batches)[field],)


def _gather_slice(e, k, src, gbuf, off, nbytes, src_stride, cnt):
    """Per row: SEND `nbytes` from `src` (+ row * `src_stride`) to `gbuf` + `off` (+ row
    stride of `gbuf`) on every tile, bumping `cnt`; an empty SEND when `nbytes` is 0."""
    gs = {"g.x": k.isa.pad(2 * k.c.dim), "g.xa": k.isa.pad(2 * k.c.dim),
          "g.y": k.isa.pad(4 * k.c.hidden_dim)}[gbuf]
    if nbytes == 0:
        e.loop("r2", lambda: e("send", k.a(gbuf), k.a(gbuf), 0, k.all, cnt))
        return
    e("add", "r6", k.a(src), 0)
    e("add", "r11", k.a(gbuf, 0, off), 0)

    def body():
        e("send", "r11", "r6", nbytes, k.all, cnt)
        e("add", "r6", f"r6+{src_stride}", 0)
        e("add", "r11", f"r11+{gs}", 0)
    e.loop("r2", body)


def _rows_op(e, k, emit, first=None):
    """Emit `emit(mm)`, an operation on the batch's rows with a static row count `mm`: with
    ``mm = 1`` when the batch has one row, else with ``mm = M`` (the rows beyond the batch's
    are stale, computed and never used).  The choice is a pair of hardware loops whose counts
    are the flags ``m == 1`` and ``m > 1`` in the ``state`` words (``loop`` with a count of 0
    skips its body): the ISA's way of a conditional without branches.  `first()` (a wait
    for the operands) is emitted first in each of the two bodies when the flags are in
    registers, so that the operation issues right after the wait returns instead of after
    a ``loop`` (2 cycles on the chain), else before the choice."""
    M = k.isa.max_m
    if M == 1:
        if first is not None:
            first()
        emit(1)
        return
    if k.regflags:              # no `ld` (a sync point of the background units)
        def body(mm):
            if first is not None:
                first()
            emit(mm)
        e.loop("r13", lambda: body(1))
        e.loop("r14", lambda: body(M))
        return
    if first is not None:
        first()
    e("ld", "r9", k.a("state", 0, 4))
    e.loop("r9", lambda: emit(1))
    e("ld", "r9", k.a("state", 0, 8))
    e.loop("r9", lambda: emit(M))


def _zero_stale_rows(e, k):
    """With ``1 < m < M`` rows, zero the rows ``m .. M - 1`` of the record buffers ``rec``
    and ``grec`` (from ``zeros``), which the M-row matrix operations read: they are shared by
    every layer and matrix, so a stale record there could carry a scale code that another
    matrix's requantisation refuses (``ARITH``); a zero record never does.  Nothing writes
    those rows within the step (every batch of a step has the same ``m``)."""
    M, rec = k.isa.max_m, k.isa.record_bytes
    if M <= 2:
        return

    def body():
        for buf, n in (("rec", k.c.dim), ("grec", k.k2)):
            e("mul", "r3", "r2", rec(n))
            e("sub", "r4", (M * rec(n),), "r3")
            e("copy", k.a(buf, 3), k.a("zeros"), "r4")
    e("ld", "r9", k.a("mtab", 3, 8))
    e.loop("r9", body)


def _wait_all(e, k, cnt, n, again=False):
    """Wait for `n` SENDs per row of the batch on counter `cnt`: ``r2 * n`` into ``r3``, or
    with `again` ``r3`` as the previous wait left it (the caller's word that nothing wrote
    ``r3`` in between); the whole mesh's ``n = T`` is in ``r15`` (the batch's prologue) on
    a tile that never needs the `Emitter`'s scratch registers (`TensorK.regflags`)."""
    if n == k.T and k.regflags:
        e("wait", cnt, "r15")
        return
    if not again:
        e("mul", "r3", "r2", n)
    e("wait", cnt, "r3")


def _norm(e, k, src, src_stride, gain, eps, shift, dst, first=None):
    """RMSNorm + dynamic quantisation (one ``rmsnormq`` each) of the batch's rows of `src`
    into the records at `dst`; `first()` (a wait for `src`) after the registers' setup."""
    dim, rec = k.c.dim, k.isa.record_bytes(k.c.dim)
    e("add", "r6", k.a(src), 0)
    e("add", "r8", k.a(dst), 0)
    if first is not None:
        first()

    def body():
        e("rmsnormq.i8.i16", "r8", "r6", k.a(gain), dim, k.lay[eps], shift)
        e("add", "r6", f"r6+{src_stride}", 0)
        e("add", "r8", f"r8+{rec}", 0)
    e.loop("r2", body)


def _row_records(e, k, emit_row, src, sstride, dst, dstride, nrec, local=True, mine=True,
                 first=None):
    """Records of the batch's rows of `src` (row stride `sstride`) into `dst` (`dstride`):
    ``emit_row(s, d)`` emits the vector instructions of one row (address operands).

    Decode (``m == 1``, and always without `TensorK.dist`): every tile computes every row
    itself (if `local`).  A batch of ``m > 1`` rows with `TensorK.dist`: tile ``j`` of the
    mesh (row-major) computes row ``j < m`` only and multicasts its record (`nrec` bytes)
    into `dst` on every tile, bumping `C_REC`; every tile waits for the ``m`` records.  The
    replicated vector work of a prefill batch thus drops from ``m`` rows to one per tile.
    (Safe with one buffer: `dst`'s earlier readers on every tile finished before that tile
    joined the gather that precedes this one, and the gathers are barriers.)  Without
    `mine` the tile only waits for the records (it computes no row).  `first()` (the wait
    for `src`) is emitted after the row registers' setup, so that the rows start as soon as
    it returns."""
    if local:                               # the spread rows use static addresses
        e("add", "r6", k.a(src), 0)
        e("add", "r7", k.a(dst), 0)
    inside = k.dist and local and first is not None     # the wait in each of the two bodies
    if first is not None and not inside:
        first()

    def rows():
        def body():
            emit_row("r6", "r7")
            e("add", "r6", f"r6+{sstride}", 0)
            e("add", "r7", f"r7+{dstride}", 0)
        e.loop("r2", body)
    if not k.dist:
        if local:
            rows()
        return
    if local:                               # m == 1: the one row, right after the wait
        def one():
            if inside:
                first()
            emit_row("r6", "r7")
        e.loop("r13", one)

    def spread():
        if inside:
            first()
        j = k.index
        if mine:
            e("ld", "r12", k.a("state", 0, 12))     # 1 if j < m

            def row():
                emit_row(k.a(src, 0, j * sstride), k.a(dst, 0, j * dstride))
                e("send", k.a(dst, 0, j * dstride), k.a(dst, 0, j * dstride), nrec, k.all,
                  C_REC)
            e.loop("r12", row)
        e("wait", C_REC, "r2")
    e.loop("r14", spread)


def _residual(e, k, ybuf_src, res, cnt):
    """``xo = res[o0:o1] + yo`` per row, multicast into `res`'s successor gather `cnt`."""
    c, pad = k.c, k.isa.pad
    o0, o1 = k.roles.o[k.xy]
    No = o1 - o0
    dst = {C_XA: "g.xa", C_X: "g.x"}[cnt]
    if not No:
        _gather_slice(e, k, None, dst, 0, 0, 0, cnt)
        return
    xs, ys = pad(2 * c.dim), pad(2 * No)
    e("add", "r6", k.a(res, 0, 2 * o0), 0)
    e("add", "r7", k.a(ybuf_src), 0)
    e("add", "r8", k.a("xo"), 0)
    e("add", "r11", k.a(dst, 0, 2 * o0), 0)

    def body():
        e("vadd.i16.i16", "r8", "r6", "r7", No)
        e("send", "r11", "r8", ys, k.all, cnt)
        e("add", "r6", f"r6+{xs}", 0)
        e("add", "r7", f"r7+{ys}", 0)
        e("add", "r8", f"r8+{ys}", 0)
        e("add", "r11", f"r11+{xs}", 0)
    e.loop("r2", body)


def _embedding(e, k):
    c, pad = k.c, k.isa.pad
    o0, o1 = k.roles.o[k.xy]
    No = o1 - o0
    e.comment(f"embedding columns {o0} .. {o1 - 1} of the batch's tokens, gathered into x")
    if not No:
        _gather_slice(e, k, None, "g.x", 0, 0, 0, C_X)
        return
    xs, ys = pad(2 * c.dim), pad(2 * No)
    # r6: the batch's first token id's address (the step's first in the prologue, the next
    # batch's loaded from `state` at the end of a batch: not on the first batch's chain)
    e("add", "r7", k.a("xo"), 0)
    e("add", "r11", k.a("g.x", 0, 2 * o0), 0)

    def body():
        e("ld", "r8", "r6")
        e("mul", "r9", "r8", pad(No))
        e("mul", "r10", "r8", 4)
        e("reqm.i16.i8", "r7", k.a("e", 9), k.a("ems", 10), No)
        e("send", "r11", "r7", ys, k.all, C_X)
        e("add", "r6", "r6+4", 0)
        e("add", "r7", f"r7+{ys}", 0)
        e("add", "r11", f"r11+{xs}", 0)
    e.loop("r2", body)
    e("st", k.a("state"), "r6")


def _attention(e, k, li, first=None):
    c, isa = k.c, k.isa
    p = f"l{li}."
    dim, hs, M = c.dim, c.head_size, isa.max_m
    pad, rec = isa.pad, isa.record_bytes
    g0, g1 = k.roles.kv[k.xy]
    q0, q1 = k.roles.q[k.xy]
    nk, nq = g1 - g0, q1 - q0
    NQ, NK = nq * hs, nk * hs
    qs, ks, vs, krec = pad(2 * NQ), pad(2 * NK), pad(NK), rec(hs)
    as_ = pad(4 * dim)
    kvs = k.kvl is not None
    if kvs:                                 # the KV store's layout (`KvLayout`)
        L, W = k.kvl, isa.word_bytes
        # scores name K by slot (kvqk, the KV store generates the addresses): kbase is the
        # slot of local KV head 0, the next head's slot is one more
        kbase, kstep = kv_slot(li, 0), 1
        vbase = W * L.v_row(li, 0, 0)
        vstep = W * L.block_words           # from one KV head's block to the next
        vstride = W * L.v_row_words
    else:
        kbase, vbase = k.lay[p + "kcache"], k.lay[p + "vcache"]
        kstep, vstep, vstride = k.context * krec, hs, vs
    e.comment(f"layer {li} attention RMSNorm (KV heads {g0} .. {g1 - 1}, query heads "
              f"{q0} .. {q1 - 1})")
    _att_norm(e, k, li, first)
    if k.roles.kvp:
        e.comment(f"layer {li} q projection, RoPE, quantisation of q (K and V from partners)")
        _rows_op(e, k, lambda mm: e("matmul.i16", k.a("q16"), k.a("rec"), k.a(p + "wq"),
                                    k.lay[p + "wq_ms"], NQ, dim, mm))
        if k.roles.split:                   # under wq: atab row n = pos + 1, a, a > 0
            rb = 32 if k.roles.wsplit else 8
            e("mul", "r10", "r1", rb)       # the row's offset, kept for `first_keys`
            e("ld", "r12", k.a("atab", 10, rb))
            e("ld", "r4", k.a("atab", 10, rb + 4))
            if k.roles.wsplit:              # a == 0 (`first_keys`)
                e("ld", "r11", k.a("atab", 10, rb + 28))
    else:
        e.comment(f"layer {li} q k v projections, RoPE, quantisation of q and k")
        # the matrix unit runs wk, wq, wv back to back in the background while the vector unit
        # rotates and quantises k (under wq), then q (under wv)
        _rows_op(e, k, lambda mm: e("matmul.i16", k.a("k16"), k.a("rec"), k.a(p + "wk"),
                                    k.lay[p + "wk_ms"], NK, dim, mm))
        _rows_op(e, k, lambda mm: e("matmul.i16", k.a("q16"), k.a("rec"), k.a(p + "wq"),
                                    k.lay[p + "wq_ms"], NQ, dim, mm))
        e("mul", "r3", "r1", 2 * hs)
        e("add", "r7", k.a("k16"), 0)
        if k.kvl is not None:
            e("add", "r10", k.a("kbuf"), 0)
        else:
            e("mul", "r4", "r1", krec)

        def krows():
            e("rope.i16.i16", "r7", "r7", k.a("rope", 3), NK, hs, nx.ROPE_FRAC_BITS)
            e("add", "r9", "r7", 0)
            if k.kvl is None:
                e("add", "r10", (kbase, 4), 0)

            emit_head_records(e, "r10", "r9", hs, nk, krec if k.kvl is not None else kstep)
            e("add", "r3", f"r3+{2 * hs}", 0)
            if k.kvl is None:
                e("add", "r4", f"r4+{krec}", 0)
            e("add", "r7", f"r7+{ks}", 0)
        e.loop("r2", krows)
        if k.kvl is not None:                   # V rows of each KV head into its own buffer
            for h in range(nk):
                _rows_op(e, k, lambda mm, h=h: e(
                    "matmul.i8", k.a("vbuf", 0, h * M * pad(hs)), k.a("rec"),
                    k.a(p + "wv", 0, h * hs * pad(dim)), k.lay[p + "wv_ms"] + 4 * h * hs,
                    hs, dim, mm))
        else:                                   # V rows straight into the cache
            e("mul", "r5", "r1", vs)
            _rows_op(e, k, lambda mm: e("matmul.i8", (vbase, 5), k.a("rec"),
                                        k.a(p + "wv"), k.lay[p + "wv_ms"], NK, dim, mm))
    e("mul", "r3", "r1", 2 * hs)
    e("add", "r6", k.a("q16"), 0)
    e("add", "r8", k.a("qrec"), 0)

    def qrows():
        e("rope.i16.i16", "r6", "r6", k.a("rope", 3), NQ, hs, nx.ROPE_FRAC_BITS)
        e("add", "r9", "r6", 0)

        emit_head_records(e, "r8", "r9", hs, nq, krec)
        e("add", "r3", f"r3+{2 * hs}", 0)
        e("add", "r6", f"r6+{qs}", 0)
    e.loop("r2", qrows)
    att_ms = k.lay[p + "att_ms"]
    if k.roles.split:
        # decode: the query record to the partners that score, then the scores of keys
        # 0 .. a - 1 (none of them the step's own: no wait for the partners' K and V)
        r = q0 - g0 * c.kv_mul

        def first_keys():
            e.comment(f"layer {li} scores of the first keys (decode; the rest from the "
                      f"partners)")

            def sends():
                for rect, addr in _query_sends(k, g0):
                    e("send", (addr + r * krec,), k.a("qrec"), krec, rect, C_Q)

            def keys():
                emit_scores(e, k.a("t"), k.a("qrec"), (kbase,), att_ms, "r12", hs, 1, kvs)
            if k.roles.wsplit:              # the choice a > 0 before the sends (under the
                # dynq of q), so that the scores issue right after them; a == 0 in r11
                e.loop("r4", lambda: (sends(), keys()))
                e.loop("r11", sends)
            else:
                sends()
                e.loop("r4", keys)
            if k.roles.wsplit:              # under the scores: the weighted sum's split
                e.comment(f"layer {li} the weighted sum's split with the partner (decode)")
                # atab row n (its offset in r10 since wq): c, the tail's address and bytes,
                # n > c, and last (over r10) wsum's output
                rb = 32
                for reg, off in ((5, 8), (7, 12), (11, 16), (6, 24), (10, 20)):
                    e("ld", f"r{reg}", k.a("atab", 10, rb + off))

    def wait_kv():
        if k.roles.kvp:
            e.comment(f"layer {li} wait for the K records and V rows of the partners")
            e("wait", C_KV, 2)              # one SEND of the batch's rows each
    if not k.roles.split:
        wait_kv()
    aoff = 4 * q0 * hs
    if k.roles.aslot:                       # the heads' output into the tile's aq row
        ag = _att_geometry(k.roles, isa, hs)
        out0, row_skip = k.a("aq", 0, 4 * ag["cnt"]), ag["aq"] - 4 * NQ
    else:
        out0, row_skip = k.a("g.y", 0, aoff), as_ - 4 * NQ

    def append():
        e.comment(f"layer {li} K records and V rows appended to the KV store (kvapp)")
        emit_kv_append(e, li, k.a("kbuf"), k.a("vbuf"), nk, "r2", krec, M * pad(hs), pad(hs))

    prow = k.roles.prow

    def scores():
        if k.roles.split:                   # in each branch: no `loop` after the wait
            wait_kv()
        if prow:                            # rows prow .. M - 1's query records to the helper
            e.comment(f"layer {li} the batch's last rows' query records to the helper")
            hxy = k.roles.helper[k.xy]
            t = [a for a, _ in k.roles.helped(hxy)].index(k.xy)
            e("send", (k.pl.tiles[hxy][f"hq{t}"],), k.a("qrec", 0, prow * krec),
              (M - prow) * krec, _rect((hxy[0], hxy[0], hxy[1], hxy[1])), C_Q)
        if k.kvl is not None:
            append()
        e.comment(f"layer {li} scores, softmax, weighted sums of V per query head")
        e("add", "r3", "r1+1", 0)           # keys of the batch's first row
        e("add", "r6", k.a("qrec"), 0)
        e("add", "r10", out0, 0)
        _scores(e, k, att_ms, kbase, kstep, vbase, vstep, vstride, row_skip, kvs, prow)
        if prow:                            # the helper's rows (bare bumps past the batch)
            e.comment(f"layer {li} the weighted sums of the batch's last rows from the helper")
            e("wait", C_WS, M - prow)

    def split():                            # decode, keys a .. n - 1 from the K partner
        first_keys()
        wait_kv()                           # no `loop` between it and the softmax
        e.comment(f"layer {li} softmax and weighted sum of V (decode), K and V appended")
        e("wait", C_SC, len(k.roles.scorers[g0]))
        e("softmax.u16.i32", k.a("p"), k.a("t"), "r1+1")
        if k.kvl is not None:               # the row's K and V, under the softmax
            e("kvapp", (kv_slot(li, 0),), k.a("kbuf"), k.a("vbuf"), "r1")
        if k.roles.wsplit:                  # keys c .. n - 1 summed by the partner if n > c
            hx, hy = k.roles.helper[k.xy]
            e.loop("r6", lambda: e("send", (k.pl.tiles[(hx, hy)][f"pp{g0}"],), "r7", "r11",
                                   _rect((hx, hx, hy, hy)), C_P))
            e("wsum.i32.u16", "r10", k.a("p"), (vbase,), "r5", hs, vstride)   # wloc if n > c

            def add():
                e("wait", C_WS, 1)
                e("vadd.i32.i32", out0, k.a("wloc"), k.a("wpart"), hs)
            e.loop("r6", add)
            return
        e("add", "r3", "r1+1", 0)
        e("add", "r10", out0, 0)
        e("add", "r11", (vbase,), 0)
        e("wsum.i32.u16", "r10", k.a("p"), "r11", "r3", hs, vstride)
    if k.roles.split:
        e.loop("r13", split)
        e.loop("r14", scores)
    else:
        scores()
    if k.roles.aslot:
        e.comment(f"layer {li} the largest magnitude of the heads' output multicast")
        ja, W = k.roles.att_tiles.index(k.xy), isa.word_bytes
        e("add", "r6", k.a("aq"), 0)

        def mx():
            e("rmaxabs.i32.i32", f"r6+{ja * W}", f"r6+{4 * ag['cnt']}", NQ)
            e("send", f"r6+{ja * W}", f"r6+{ja * W}", W, k.all, C_AMAX)
            e("add", "r6", f"r6+{ag['aq']}", 0)
        # with `prow` the helper sends the maxima of rows prow .. m - 1: min(m, prow) rows
        # here (prow is 1 or 2; r14 is the flag m > 1)
        e.loop(("r14+1" if prow == 2 else 1) if prow else "r2", mx)
        return
    e.comment(f"layer {li} the heads' attention output multicast (gather)")
    e("add", "r6", k.a("g.y", 0, aoff), 0)

    def send():
        e("send", "r6", "r6", 4 * NQ, k.all, C_ACC)
        e("add", "r6", f"r6+{as_}", 0)
    e.loop("r2", send)


def _query_sends(k, h) -> list:
    """The SENDs of a query record to the partners scoring KV head `h`'s keys: ``(rect,
    address of pq<h>)``, one multicast when they are adjacent and hold ``pq<h>`` at the
    same address (the K and V partners of the 4 x 4 mesh), else one per partner."""
    tiles = k.roles.scorers[h]
    addrs = {k.pl.tiles[xy][f"pq{h}"] for xy in tiles}
    xs, ys = [xy[0] for xy in tiles], [xy[1] for xy in tiles]
    box = (min(xs), max(xs), min(ys), max(ys))
    if len(addrs) == 1 and (box[1] - box[0] + 1) * (box[3] - box[2] + 1) == len(tiles):
        return [(_rect(box), addrs.pop())]
    return [(_rect((x, x, y, y)), k.pl.tiles[(x, y)][f"pq{h}"]) for x, y in tiles]


def scores_pipelined(roles: TensorRoles, xy, isa: IsaConfig) -> bool:
    """Whether attention tile `xy`'s scores can be software-pipelined (`_scores_pipelined`):
    one KV head, all its query heads on the tile in one ``matqk`` (at most M of them)."""
    (g0, g1), (q0, q1) = roles.kv[xy], roles.q[xy]
    g = (q1 - q0) // (g1 - g0)
    return g1 - g0 == 1 and g <= isa.max_m


def _scores(e, k, att_ms, kbase, kstep, vbase, vstep, vstride, row_skip, kvs, rows=0):
    """Scores, softmax and weighted sums of V of the batch's rows on an attention tile, all
    keys on the tile (software-pipelined when one ``matqk`` serves a row): the first `rows`
    rows (`TensorRoles.prow`, the rest on the helper), or every row when `rows` is 0."""
    c, isa = k.c, k.isa
    hs, krec = c.head_size, isa.record_bytes(c.head_size)
    g0, g1 = k.roles.kv[k.xy]
    q0, q1 = k.roles.q[k.xy]
    nk, nq = g1 - g0, q1 - q0
    g = nq // nk                            # query heads per KV head on this tile
    gc = max(d for d in range(1, min(g, isa.max_m) + 1) if g % d == 0)
    if scores_pipelined(k.roles, k.xy, isa) and k.pipe_att:       # then gc == g
        _scores_pipelined(e, k, att_ms, kbase, vbase, vstride, gc, row_skip, kvs, rows)
    else:
        def arow():
            e("add", "r8", (kbase,), 0)
            e("add", "r11", (vbase,), 0)
            if g > 1:
                e("mul", "r12", "r3", 4)
                e("ld", "r12", k.a("padt", 12))

            def kvh():
                for _ in range(g // gc):
                    emit_scores(e, k.a("t"), "r6", "r8", att_ms, "r3", hs, gc, kvs)
                    e("add", "r9", k.a("t"), 0)

                    def qh():
                        e("softmax.u16.i32", k.a("p"), "r9", "r3")
                        e("wsum.i32.u16", "r10", k.a("p"), "r11", "r3", hs, vstride)
                        e("add", "r9", "r9", "r12")
                        e("add", "r10", f"r10+{4 * hs}", 0)
                    e.loop(gc, qh)
                    e("add", "r6", f"r6+{gc * krec}", 0)
                e("add", "r8", f"r8+{kstep}", 0)
                e("add", "r11", f"r11+{vstep}", 0)
            e.loop(nk, kvh)
            e("add", "r3", "r3+1", 0)
            e("add", "r10", f"r10+{row_skip}", 0)
        e.loop(rows or "r2", arow)


def _scores_pipelined(e, k, att_ms, kbase, vbase, vstride, gc, row_skip, kvs, rows=0):
    """Scores, softmax and weighted sums of the batch's rows when one ``matqk`` (``kvqk``
    with `kvs`: ``kbase`` is then the KV head's slot, `emit_scores`) serves a row
    (one KV head, its ``gc`` query heads together), software-pipelined: the matrix unit
    scores row ``i + 1`` (into the other of two score buffers) while the vector unit runs
    row ``i``'s softmax and weighted sums.  Registers: ``r3`` keys of the current row,
    ``r6`` its query records, ``r9`` / ``r5`` the current / next score buffer, ``r12`` /
    ``r4`` their row strides (``gc > 1``), ``r10`` the output.  `rows`: the first `rows`
    rows only (a static count), or 0: the batch's ``m``."""
    hs, krec = k.c.head_size, k.isa.record_bytes(k.c.head_size)
    e("add", "r8", (kbase,), 0)
    e("add", "r11", (vbase,), 0)
    e("add", "r9", k.a("t"), 0)
    e("add", "r5", k.a("t2"), 0)
    if gc > 1:
        e("mul", "r12", "r3", 4)
        e("ld", "r12", k.a("padt", 12))
    emit_scores(e, "r9", "r6", "r8", att_ms, "r3", hs, gc, kvs)

    def heads():                            # softmax and weighted sum of the current row
        if gc == 1:
            e("softmax.u16.i32", k.a("p"), "r9", "r3")
            e("wsum.i32.u16", "r10", k.a("p"), "r11", "r3", hs, vstride)
            e("add", "r10", f"r10+{4 * hs + row_skip}", 0)
            return
        e("add", "r7", "r9", 0)

        def qh():
            e("softmax.u16.i32", k.a("p"), "r7", "r3")
            e("wsum.i32.u16", "r10", k.a("p"), "r11", "r3", hs, vstride)
            e("add", "r7", "r7", "r12")
            e("add", "r10", f"r10+{4 * hs}", 0)
        e.loop(gc, qh)
        e("add", "r10", f"r10+{row_skip}", 0)

    def row():
        if gc > 1:
            e("mul", "r4", "r3+1", 4)
            e("ld", "r4", k.a("padt", 4))
        emit_scores(e, "r5", f"r6+{gc * krec}", "r8", att_ms, "r3+1", hs, gc, kvs)
        heads()
        e("add", "r6", f"r6+{gc * krec}", 0)
        e("add", "r3", "r3+1", 0)
        e("add", "r7", "r9", 0)
        e("add", "r9", "r5", 0)
        e("add", "r5", "r7", 0)
        if gc > 1:
            e("add", "r12", "r4", 0)
    if not rows:
        e("sub", "r7", "r2", 1)
        e.loop("r7", row)
    elif rows > 1:
        e.loop(rows - 1, row)
    heads()


def _att_norm(e, k, li, first=None):
    """The attention RMSNorm and quantisation of the batch's rows into ``rec``: on the
    attention tiles, or with `TensorK.dist_att` spread over the first attention tiles for
    a batch of ``m > 1`` rows (every tile waits for the records).  `first()` (the wait for
    the ``x`` gather) after the registers' setup."""
    ly, p, dim, pad = k.qm.layers[li], f"l{li}.", k.c.dim, k.isa.pad
    rec = k.isa.record_bytes(dim)
    att = k.xy in k.roles.kv

    def anorm(s_, d_):
        e("rmsnormq.i8.i16", d_, s_, k.a(p + "ag"), dim, k.lay[p + "att_eps"],
          ly.att_norm.shift)
    local = att or bool(k.jobs)             # a K / V partner normalises too
    if not k.dist_att:
        if local:
            _norm(e, k, "g.x", pad(2 * dim), p + "ag", p + "att_eps", ly.att_norm.shift, "rec",
                  first)
        elif first is not None:
            first()
        return
    _row_records(e, k, anorm, "g.x", pad(2 * dim), "rec", rec, rec, local=local, mine=att,
                 first=first)


def _partner_kv(e, k, li, first=None):
    """A K / V partner's jobs of layer `li` (`TensorRoles.kvp`): the attention RMSNorm
    record of the batch's rows, then per job the ``wk`` rows of its KV head, RoPE and the K
    records (``"k"``) or the ``wv`` rows (``"v"``), the batch's rows sent in one SEND to
    each of the KV head's attention tiles (bumping `C_KV` once): into ``kbuf`` / ``vbuf``
    with ``kvapp``, else straight into the K and V caches at the rows' positions.  The
    instructions are the attention tiles' own, so the records and rows are theirs bit for
    bit.  With `TensorRoles.vsplit` the K partner also sends the K records into the V
    partner's copy of the K cache at the rows' positions (`C_KV`, which the V partner
    consumes after its jobs)."""
    c, isa, p = k.c, k.isa, f"l{li}."
    dim, hs, pad = c.dim, c.head_size, isa.pad
    krec = isa.record_bytes(hs)
    e.comment(f"layer {li} attention RMSNorm for the K / V partner's jobs")
    _att_norm(e, k, li, first)
    scoring = _scoring_jobs(k)
    for j, (kind, h) in enumerate(k.jobs):
        e.comment(f"layer {li} partner: {kind.upper()} of KV head {h} for its attention tiles")
        targets = [(xy, k.pl.tiles[xy]) for xy in k.roles.kv_tiles[h]]
        # K: int16 rows for RoPE, records of krec bytes; V: int8 rows of pad(hs) bytes
        op, out, step, buf, cache = (("matmul.i16", "pk16", krec, "kbuf", "kcache")
                                     if kind == "k" else
                                     ("matmul.i8", "pv", pad(hs), "vbuf", "vcache"))
        base = [t[buf] if k.kvl_any else t[p + cache] for _, t in targets]
        _rows_op(e, k, lambda mm, j=j, op=op, out=out: e(
            op, k.a(out), k.a("rec"), k.a(p + f"pw{j}"), k.lay[p + f"pw{j}_ms"], hs, dim, mm))
        if scoring and j == scoring[0][0]:
            _partner_score_table(e, k)      # under the matmul
        def src(kind=kind, j=j):            # the batch's first record / V row
            if kind == "v":
                return k.a("pv")
            if k.roles.split:               # the records in the partner's K cache
                e("mul", "r8", "r1", krec)
                e("add", "r8", k.a(p + f"pkc{j}", 8), 0)
                return "r8"
            return k.a("pkrec")
        if kind == "k":                     # RoPE and the records of the batch's rows
            e("mul", "r3", "r1", 2 * hs)
            e("add", "r7", k.a("pk16"), 0)
            if src() != "r8":
                e("add", "r8", k.a("pkrec"), 0)

            def row(step=step):
                e("rope.i16.i16", "r7", "r7", k.a("prope", 3), hs, hs, nx.ROPE_FRAC_BITS)
                e("dynq.i8.i16", "r8", "r7", hs)
                e("add", "r3", f"r3+{2 * hs}", 0)
                e("add", "r7", f"r7+{pad(2 * hs)}", 0)
                e("add", "r8", f"r8+{step}", 0)
            e.loop("r2", row)
        # the batch's rows sent once per target (they are consecutive everywhere: `kbuf` /
        # `vbuf`, the caches at the rows' positions, the partners' copies): `m` rows of
        # `step` bytes, one bump of `C_KV` per SEND; the SEND waits for every unit anyway,
        # so a SEND per row would leave the vector unit idle between the rows
        e("mul", "r7", "r2", step)
        a0 = src()
        if not k.kvl_any:
            e("mul", "r4", "r1", step)      # position pos of the cache
        for (xy, _), b in zip(targets, base, strict=True):
            e("send", (b, 0 if k.kvl_any else 4), a0, "r7",
              _rect((xy[0], xy[0], xy[1], xy[1])), C_KV)
        if kind == "k" and k.roles.vsplit:  # position pos of the V partner's K cache
            vxy, vj = k.roles.vpartner[h]
            e("mul", "r9", "r1", krec)
            e("send", (k.pl.tiles[vxy][p + f"pkc{vj}"], 9), a0, "r7",
              _rect((vxy[0], vxy[0], vxy[1], vxy[1])), C_KV)
        # the V rows' copies for the partners that sum the weighted sums' tails: this
        # tile's own, another's (one at most: the KV head's K partner)
        vown = kind == "v" and any(hh == h for _, hh in k.roles.helped(k.xy))
        vto = [xy for xy in {k.roles.helper[a] for a in k.roles.kv_tiles[h]
                             if a in k.roles.helper} if xy != k.xy] if kind == "v" else []
        assert len(vto) <= 1
        if vown or vto:
            e("mul", "r9", "r1", pad(hs))
        if vown:
            e("copy", k.a(p + f"pvc{h}", 9), a0, "r7")
        for vx, vy in vto:
            e("send", (k.pl.tiles[(vx, vy)][p + f"pvc{h}"], 9), a0, "r7",
              _rect((vx, vx, vy, vy)), C_KV)
    if scoring:
        e.comment(f"layer {li} partner: scores of its share of the keys for the attention "
                  f"tiles")
        e.loop("r13", lambda: _partner_scores(e, k, li))
    recv = _partner_receives(k)
    if recv:
        e.comment(f"layer {li} partner: the K records / V rows of its copies arrived")
        e("wait", C_KV, recv)
    if k.roles.helped(k.xy):
        e.comment(f"layer {li} partner: the tails of the weighted sums of V")
        e.loop("r13", lambda: _partner_wsums(e, k, li))
        if k.roles.prow:
            e.comment(f"layer {li} partner: the batch's last rows' scores, softmax and "
                      f"weighted sums of V")
            e.loop("r14", lambda: _partner_rows(e, k, li))


def _partner_receives(k) -> int:
    """The SENDs of K records and V rows per batch another partner sends this one (`C_KV`):
    with `TensorRoles.vsplit` a K record per KV head a V partner scores, with
    `TensorRoles.wsplit` a V row per KV head whose V rows another partner computes and this
    one sums tails of."""
    n = sum(1 for kind, _ in k.jobs if kind == "v") if k.roles.vsplit else 0
    mine = {h for kind, h in k.jobs if kind == "v"}
    n += len({h for _, h in k.roles.helped(k.xy) if h not in mine})
    return n


def _partner_wsums(e, k, li):
    """Decode: the weighted sums of V over keys ``c .. n - 1`` (`_wsum_split`) for the
    attention tiles this partner helps (`TensorRoles.helper`), from the probabilities they
    send (`C_P`, all of them first: they share the counter) and this partner's copy of their
    KV head's V cache, sent back into each tile's ``wpart`` (`C_WS`; zeros from the second
    half of ``pw<h>`` when the tail is empty).  ``ptab`` row ``n`` (`_partner_scores`),
    words 5 .. 7: ``c * pad(head_size)``, ``n - c``, ``n > c``."""
    hs, pad, p = k.c.head_size, k.isa.pad, f"l{li}."
    helped = k.roles.helped(k.xy)
    e("mul", "r3", "r1", 32)                # row n = pos + 1 of ptab
    for r, off in ((4, 52), (5, 56), (6, 60)):
        e("ld", f"r{r}", k.a("ptab", 3, off))

    def tails():
        e("wait", C_P, len(helped))
        for (ax, ay), h in helped:
            e("wsum.i32.u16", k.a(f"pw{h}"), k.a(f"pp{h}"), k.a(p + f"pvc{h}", 4), "r5", hs,
              pad(hs))
            e("send", (k.pl.tiles[(ax, ay)]["wpart"],), k.a(f"pw{h}"), pad(4 * hs),
              _rect((ax, ax, ay, ay)), C_WS)
    e.loop("r6", tails)


def _partner_rows(e, k, li):
    """Prefill (a batch of ``m > 1`` rows, `TensorRoles.prow`): rows ``prow .. m - 1`` of the
    query head of every attention tile this partner helps, all keys: once the tile's query
    records of rows ``prow .. M - 1`` are there (`C_Q`, one SEND per helped tile), the
    ``matqk`` of each row (row ``i``: keys ``0 .. pos + i``) over this partner's copy of the
    KV head's K cache into its own row of ``pt`` (the matrix unit runs ahead of the vector
    unit), then per row the softmax, the weighted sum over the copy of the V cache and its
    SEND into the row's heads' output in the tile's ``aq`` (`C_WS`); one bare bump per row
    ``m .. M - 1``, so that the tile waits for a static ``M - prow``; then the rows' largest
    magnitudes, multicast into the tile's slot of the maxima (`C_AMAX`) in place of the
    tile's own.  The instructions are
    the tile's own (``matqk`` over plain records instead of ``kvqk``), so the sums are
    the tile's bit for bit.  Registers ``r3`` .. ``r9``."""
    c, isa, p = k.c, k.isa, f"l{li}."
    hs, M, h0, pad = c.head_size, isa.max_m, k.roles.prow, isa.pad
    krec, ts, ws = isa.record_bytes(hs), pad(4 * k.context), pad(4 * hs)
    ag = _att_geometry(k.roles, isa, hs)
    helped = k.roles.helped(k.xy)
    job = {h: j for j, _, h in _scoring_jobs(k)}
    e("wait", C_Q, len(helped))
    e("sub", "r4", "r2", h0)                # rows here
    e("sub", "r5", (M,), "r2")              # rows past the batch: bare bumps
    for t, (axy, h) in enumerate(helped):
        rect = _rect((axy[0], axy[0], axy[1], axy[1]))
        dst = k.pl.tiles[axy]["aq"] + 4 * ag["cnt"] + h0 * ag["aq"]
        e("add", "r3", f"r1+{h0 + 1}", 0)   # keys of row prow
        e("add", "r6", k.a(f"hq{t}"), 0)
        e("add", "r7", k.a("pt"), 0)

        def score(h=h):
            e("matqk.i32", "r7", "r6", k.a(p + f"pkc{job[h]}"), k.lay[p + "att_ms"], "r3",
              hs, 1)
            e("add", "r3", "r3+1", 0)
            e("add", "r6", f"r6+{krec}", 0)
            e("add", "r7", f"r7+{ts}", 0)
        e.loop("r4", score)
        e("add", "r3", f"r1+{h0 + 1}", 0)
        e("add", "r7", k.a("pt"), 0)
        e("add", "r8", k.a("hw"), 0)
        e("add", "r9", (dst,), 0)

        def row(h=h, rect=rect):
            e("softmax.u16.i32", k.a(f"pp{h}"), "r7", "r3")
            e("wsum.i32.u16", "r8", k.a(f"pp{h}"), k.a(p + f"pvc{h}"), "r3", hs, pad(hs))
            e("send", "r9", "r8", 4 * hs, rect, C_WS)
            e("add", "r3", "r3+1", 0)
            e("add", "r7", f"r7+{ts}", 0)
            e("add", "r8", f"r8+{ws}", 0)
            e("add", "r9", f"r9+{ag['aq']}", 0)
        e.loop("r4", row)
        e.loop("r5", lambda dst=dst, rect=rect: e("send", (dst,), k.a("hw"), 0, rect, C_WS))
        # the rows' largest magnitudes, multicast into the tile's slot of every tile's aq
        # rows (`C_AMAX`, as the tile's own rows: `_attention`)
        ja = k.roles.att_tiles.index(axy)
        e("add", "r7", k.a("hm"), 0)
        e("add", "r8", k.a("hw"), 0)
        e("add", "r9", (k.lay["aq"] + h0 * ag["aq"] + ja * isa.word_bytes,), 0)

        def mx():
            e("rmaxabs.i32.i32", "r7", "r8", hs)
            e("send", "r9", "r7", isa.word_bytes, k.all, C_AMAX)
            e("add", "r7", f"r7+{isa.word_bytes}", 0)
            e("add", "r8", f"r8+{ws}", 0)
            e("add", "r9", f"r9+{ag['aq']}", 0)
        e.loop("r4", mx)


def _scoring_jobs(k) -> list:
    """This partner's jobs whose KV heads' keys it scores in decode (`_partner_scores`), as
    ``(index, kind, head)``: its ``"k"`` jobs, or with `TensorRoles.vsplit` its ``"v"``
    jobs on a V partner; empty on other tiles and without `TensorRoles.split`."""
    if not k.roles.scores_keys(k.xy):
        return []
    kinds = {"k", "v"} if k.roles.vsplit else {"k"}
    return [(j, kind, h) for j, (kind, h) in enumerate(k.jobs) if kind in kinds]


def _scores_reversed(k, j) -> bool:
    """Whether job `j`'s scores go to its KV head's attention tiles last row first
    (`_partner_scores`): the K partner's when the V partner scores keys too
    (`TensorRoles.vsplit`), so that each attention tile receives one partner's scores
    first and the other's second, instead of the last tile both partners' second packets
    together in its port."""
    return k.roles.vsplit and k.jobs[j][0] == "k"


def _partner_scores(e, k, li):
    """Decode: the scores of this partner's share of the keys, ``lo .. hi - 1`` (`_split3`:
    the K partner's the last ones, the V partner's the middle ones), of every query head of
    its KV heads, from its copy of the K cache and the query records the attention tiles
    send (`C_Q`), sent into the attention tiles' score buffers at key ``lo`` (`C_SC`; a bare
    bump to key 0 when the share is empty).  ``ptab`` row ``n``: ``lo * krec``, ``hi -
    lo``, ``pad(4 (hi - lo))``, ``hi > lo``, ``4 lo`` (0 when empty)."""
    c, p = k.c, f"l{li}."
    jobs = _scoring_jobs(k)
    e("wait", C_Q, c.kv_mul * len(jobs))
    for j, _, h in jobs:
        e.loop("r11", lambda j=j, h=h: e("matqk.i32", k.a("pt"), k.a(f"pq{h}"),
                                    k.a(p + f"pkc{j}", 10), k.lay[p + "att_ms"], "r5",
                                    c.head_size, c.kv_mul))
        tiles = k.roles.kv_tiles[h]         # the query heads' rows, in order
        if _scores_reversed(k, j):          # the last row first (`_scores_reversed`)
            e("mul", "r9", "r6", len(tiles) - 1)
            e("add", "r9", k.a("pt", 9), 0)
            for xy in reversed(tiles):
                e("send", (k.pl.tiles[xy]["t"], 12), "r9", "r6",
                  _rect((xy[0], xy[0], xy[1], xy[1])), C_SC)
                e("sub", "r9", "r9", "r6")
            continue
        e("add", "r9", k.a("pt"), 0)
        for xy in tiles:
            e("send", (k.pl.tiles[xy]["t"], 12), "r9", "r6",
              _rect((xy[0], xy[0], xy[1], xy[1])), C_SC)
            e("add", "r9", "r9", "r6")


def _partner_score_table(e, k):
    """Load ``ptab`` row ``n = pos + 1`` (`_partner_scores`) into ``r10`` (``a * krec``),
    ``r5`` (``n - a``), ``r6`` (``pad(4 (n - a))``), ``r11`` (``n > a``) and ``r12`` (``4
    a``); emitted where the tile waits on a unit anyway (under the K job's ``matmul``),
    in registers the K / V jobs leave alone."""
    e("mul", "r3", "r1", 32)
    for r, off in ((10, 32), (5, 36), (6, 40), (11, 44), (12, 48)):
        e("ld", f"r{r}", k.a("ptab", 3, off))


def _layer(e, k, li, first=None):
    """Emit layer `li` on this tile.  `first()` is the wait for the ``x`` gather before it
    (emitted after the attention norm's register setup); returns the wait for the layer's
    own ``x`` gather, for the caller to emit (the next layer's `first`)."""
    c, isa, qm = k.c, k.isa, k.qm
    ly = qm.layers[li]
    p = f"l{li}."
    dim, hid = c.dim, c.hidden_dim
    pad, rec = isa.pad, isa.record_bytes
    o0, o1 = k.roles.o[k.xy]
    h0, h1 = k.roles.h[k.xy]
    No, Nh = o1 - o0, h1 - h0
    if k.xy in k.roles.kv:
        _attention(e, k, li, first)
    elif k.jobs:
        _partner_kv(e, k, li, first)
    elif k.dist_att:
        e.comment(f"layer {li} attention RMSNorm records of a batch (spread)")
        _att_norm(e, k, li, first)
    elif first is not None:
        first()
    e.comment(f"layer {li} output projection rows {o0} .. {o1 - 1} and residual")
    wait_y = None
    if k.roles.aslot:
        wait_y = _att_slices(e, k)
        xrec = "arec"
    else:
        _row_records(e, k, lambda s_, d_: e("dynq.i8.i32", d_, s_, dim), "g.y", pad(4 * dim),
                     "rec", rec(dim), rec(dim),
                     first=lambda: _wait_all(e, k, C_ACC, len(k.roles.att_tiles)))
        xrec = "rec"
    if No:
        _rows_op(e, k, lambda mm: e("matmul.i16", k.a("yo"), k.a(xrec), k.a(p + "wo"),
                                    k.lay[p + "wo_ms"], No, dim, mm), first=wait_y)
    elif wait_y is not None:
        wait_y()
    _residual(e, k, "yo", "g.x", C_XA)
    e.comment(f"layer {li} feed-forward hidden rows {h0} .. {h1 - 1}")

    def fnorm(s_, d_):
        e("rmsnormq.i8.i16", d_, s_, k.a(p + "fg"), dim, k.lay[p + "ffn_eps"],
          ly.ffn_norm.shift)
    _row_records(e, k, fnorm, "g.xa", pad(2 * dim), "rec", rec(dim), rec(dim), local=Nh > 0,
                 first=lambda: _wait_all(e, k, C_XA, k.T))
    if k.roles.gslot:
        if Nh:
            _rows_op(e, k, lambda mm: e("matmul.i16", k.a("h1"), k.a("rec"), k.a(p + "w1"),
                                        k.lay[p + "w1_ms"], Nh, dim, mm))
            _rows_op(e, k, lambda mm: e("matmul.i16", k.a("h3"), k.a("rec"), k.a(p + "w3"),
                                        k.lay[p + "w3_ms"], Nh, dim, mm))
        wait_g = _gate_slices(e, k, li)
    elif Nh:
        hz = pad(2 * Nh)
        _rows_op(e, k, lambda mm: e("matmul.i16", k.a("h1"), k.a("rec"), k.a(p + "w1"),
                                    k.lay[p + "w1_ms"], Nh, dim, mm))
        _rows_op(e, k, lambda mm: e("matmul.i16", k.a("h3"), k.a("rec"), k.a(p + "w3"),
                                    k.lay[p + "w3_ms"], Nh, dim, mm))

        def gate(mm):
            e("silu.i16.i16", k.a("h1"), k.a("h1"), mm * hz // 2, ly.hidden_frac_bits)
            e("vmul.i32.i16", k.a("gl"), k.a("h1"), k.a("h3"), mm * hz // 2)
        _rows_op(e, k, gate)
        _gather_slice(e, k, "gl", "g.y", 4 * h0, pad(4 * Nh), 2 * hz, C_GATE)
    else:
        _gather_slice(e, k, None, "g.y", 0, 0, 0, C_GATE)
    if not k.roles.gslot:
        _wait_all(e, k, C_GATE, k.T)
        wait_g = None
    e.comment(f"layer {li} down projection rows {o0} .. {o1 - 1} and residual")
    if not k.roles.gslot:
        _row_records(e, k, lambda s_, d_: e("dynq.i8.i32", d_, s_, hid), "g.y", pad(4 * hid),
                     "grec", rec(hid), rec(hid))
    if No:
        _rows_op(e, k, lambda mm: e("matmul.i16", k.a("yo"), k.a("grec"), k.a(p + "w2"),
                                    k.lay[p + "w2_ms"], No, k.k2, mm), first=wait_g)
    elif wait_g is not None:
        wait_g()
    _residual(e, k, "yo", "g.xa", C_X)
    return lambda: _wait_all(e, k, C_X, k.T)


def _att_slices(e, k):
    """The attention output's record, quantised in slices (`TensorRoles.aslot`): once every
    attention tile's maximum arrived (`C_AMAX`), per row ``dynq`` of the maxima and, on an
    attention tile, its heads' int32 output (the whole output's scale code and its heads'
    int8, as `_gate_slices`), the header copied into the row's ``arec`` record, and the
    heads' int8 multicast into their words of it (`C_ACC`); then wait for them."""
    isa, hs = k.isa, k.c.head_size
    W = isa.word_bytes
    ag = _att_geometry(k.roles, isa, hs)
    cnt, att = ag["cnt"], k.xy in k.roles.kv
    q0, q1 = k.roles.q.get(k.xy, (0, 0))
    NQ = (q1 - q0) * hs
    A = len(k.roles.att_tiles)
    def send():
        if att:
            e("send", f"r8+{W + q0 * hs}", f"r7+{W + cnt}", NQ, k.all, C_ACC)
    def counts():                           # r3 = r2 * A for the C_ACC wait too
        e("mul", "r3", "r2", A)
        e("add", "r4", "r3", 0)
    _quantise_slices(e, k, ("aq", "aqr", "arec"),
                     (ag["aq"], ag["aqr"], isa.record_bytes(k.c.dim)), cnt + NQ, send,
                     first=counts, inner=[(C_AMAX, "r4")])
    # the wait for the int8, returned: the caller emits it right before `wo`
    # (r3 = r2 * A: `_quantise_slices` uses r6 .. r8)
    return lambda: _wait_all(e, k, C_ACC, A, again=True)


def _quantise_slices(e, k, regions, strides, n, send, first=None, inner=()):
    """Per row of the batch (``loop r2``): ``dynq`` of the ``n`` int32 (the gathered maxima
    and this tile's rows) at ``r6`` into the record at ``r7``, then ``send()`` (the tile's
    int8 into the row's record at ``r8`` on every tile), then the header copied to that
    record (under the send: the copy's 5 cycles are off the gather);
    ``r6``, ``r7``, ``r8`` start at `regions` and step by `strides` (bytes) per row.  Shared
    by `_att_slices` and `_gate_slices`.  `first()` (the wait for the maxima) is emitted
    after the registers' setup, so that the rows start as soon as it returns.  `inner`:
    waits ``(counter, register)`` at the top of the row loop instead (`first()` sets the
    registers to the batch's bump counts), each register zeroed under the row's ``dynq``
    (a count that is a number is waited for in every row): the first row waits for every
    row's bumps, the later ones for none, and the first
    ``dynq`` issues right after the wait instead of after the ``loop`` (2 cycles on the
    chain)."""
    W = k.isa.word_bytes
    for reg, region in zip(("r6", "r7", "r8"), regions, strict=True):
        e("add", reg, k.a(region), 0)
    if first is not None:
        first()

    def rows():
        for cnt, reg in inner:
            e("wait", cnt, reg)
        e("dynq.i8.i32", "r7", "r6", n)
        for _, reg in inner:
            if isinstance(reg, str):
                e("add", reg, 0, 0)
        send()                  # the int8 leave first; the header's copy runs under them
        e("copy", "r8", "r7", W)
        for reg, stride in zip(("r6", "r7", "r8"), strides, strict=True):
            e("add", reg, f"{reg}+{stride}", 0)
    e.loop("r2", rows)


def _gate_slices(e, k, li):
    """SiLU, the gate of this tile's hidden rows and its quantisation, with the gate's
    maximum gathered instead of the gate: per row of the batch, the tile writes its int32
    gate rows after the maxima area of its ``gq`` row, multicasts their largest magnitude
    (``rmaxabs``) into its slot of that area on every tile (`C_GMAX`), and once every tile's
    arrived, quantises the maxima and its rows together: ``dynq`` takes its scale code from
    the largest magnitude, which is the whole gate's, and quantises each element on its own,
    so the record's header and the rows' int8 are those of the whole gate's ``dynq`` (the
    zero words of the area change neither).  It copies the header into the row's ``grec``
    record and multicasts its int8 into its slot of ``gslot`` bytes (`C_GATE`).  The down
    projection's weights are zero in the slots' padding, so its accumulators are the
    golden model's.  A tile without hidden rows sends a zero maximum and a bare bump.

    Pairs (`TensorRoles.gpair`, session 9): the first tile of a pair also sends the last
    ``tA`` of its int32 rows (and zeros to a whole word: ``tp`` elements, `gtail`) into the
    window between the maxima area and the rows of its second's ``gq`` row (`C_TAIL`), and
    multicasts only the whole words of its int8; the second waits for the window too,
    quantises it with the maxima and its own rows, and multicasts the window's int8 and its
    rows' behind the first's words.  ``dynq`` quantises each element on its own with the
    whole gate's scale code, so the window's int8 are the first's own; the zeros (and
    nothing else: the window holds gate values and zeros) change no maximum, and the down
    projection's weights are zero at their positions.  The pair's slot loses the first's
    padding: ``gk2`` is 200 instead of 256 on stories260K's 4 x 4 tiles."""
    isa, ly = k.isa, k.qm.layers[li]
    W, pad = isa.word_bytes, isa.pad
    gg = _gate_geometry(k.roles, isa)
    cnt, S = gg["cnt"], gg["S"]
    h0, h1 = k.roles.h[k.xy]
    Nh, j = h1 - h0, k.index
    hz = pad(2 * Nh)
    second = k.roles.gpair.get(k.xy)        # this tile is the first of a pair (`gpair`)
    first = k.roles.gfirst.get(k.xy)        # ... the second
    tb = k.roles.gtail[first] if first is not None else 0   # the first's tail before its rows
    rows = 4 * (cnt + tb)                   # the int32 rows in the gq row
    if second is not None:                  # whole words of int8 here, the tail sent on
        nsend = Nh // W * W
    elif first is not None:                 # the first's tail and the own rows
        nsend = pad(tb + Nh)
    else:
        nsend = S
    e.comment(f"layer {li} gate rows quantised with the gathered maximum of the gate")
    if Nh:
        _rows_op(e, k, lambda mm: e("silu.i16.i16", k.a("h1"), k.a("h1"), mm * hz // 2,
                                    ly.hidden_frac_bits))
    e("add", "r6", k.a("gq"), 0)
    # a tile without hidden rows (hidden_dim below the tile count) has no h1 / h3 regions:
    # its r7 / r8 only address its zero-length SEND
    e("add", "r7", k.a("h1" if Nh else "gq"), 0)
    e("add", "r8", k.a("h3" if Nh else "gq"), 0)

    def maxima():
        if Nh:
            e("vmul.i32.i16", f"r6+{rows}", "r7", "r8", Nh)
            e("rmaxabs.i32.i32", f"r6+{j * W}", f"r6+{rows}", Nh)
        e("send", f"r6+{j * W}", f"r6+{j * W}", W, k.all, C_GMAX)
        if second is not None:              # the tail (and zeros to a word) to the second
            tp = k.roles.gtail[k.xy]
            e("send", f"r6+{4 * cnt}", f"r6+{4 * cnt + 4 * (Nh // W * W)}", 4 * tp,
              _rect((second[0], second[0], second[1], second[1])), C_TAIL)
        e("add", "r6", f"r6+{gg['gq']}", 0)
        e("add", "r7", f"r7+{hz}", 0)
        e("add", "r8", f"r8+{hz}", 0)
    e.loop("r2", maxima)
    def send():
        if Nh and nsend:
            e("send", f"r8+{W + k.roles.goff[k.xy]}", f"r7+{W + cnt}", nsend, k.all, C_GATE)
        else:
            e("send", "r8", "r8", 0, k.all, C_GATE)

    def counts():                           # the batch's bumps, waited for in the row loop
        if k.regflags:
            e("add", "r4", "r15", 0)
        else:
            e("mul", "r4", "r2", k.T)
    # the first's tails: one per row (they arrive in order, `docs/noc.md`)
    inner = [(C_GMAX, "r4")] + ([(C_TAIL, 1)] if first is not None else [])
    _quantise_slices(e, k, ("gq", "gqr", "grec"), (gg["gq"], gg["gqr"], isa.record_bytes(k.k2)),
                     cnt + tb + Nh, send, first=counts, inner=inner)
    return lambda: _wait_all(e, k, C_GATE, k.T)     # emitted by the caller, before `w2`


def _classifier_row(e, k):
    """``r3``: the offset of the step's last row (``m - 1``) in ``g.x``, for `_classifier`."""
    e("sub", "r3", "r2", 1)
    e("mul", "r3", "r3", k.isa.pad(2 * k.c.dim))


def _classifier(e, k, row=True):
    """The final norm of the step's last row, the classifier rows and the local argmax, sent
    to the reducer; `row`: ``r3`` (`_classifier_row`) computed here, else the caller's."""
    c, isa, qm, pl = k.c, k.isa, k.qm, k.pl
    W, dim = isa.word_bytes, c.dim
    first, n, _ = k.lay.stages[-1].rows
    j = pl.classifier.index(k.xy)
    e.comment(f"final norm of the step's last row, classifier rows {first} .. "
              f"{first + n - 1}, local argmax")
    if row:
        _classifier_row(e, k)
    e("rmsnormq.i8.i16", k.a("cls.xq"), k.a("g.x", 3), k.a("cls.g"), dim,
      k.lay["cls.eps"], qm.final_norm.shift)
    e("matmul.i32", k.a("cls.logits"), k.a("cls.xq"), k.a("cls.w"), k.lay["cls.ms"],
      n, dim, 1)
    packed = _packed_argmax(qm, isa)
    if packed:                              # -2^31 + first (`_packed_argmax`), off the path
        e("li", "r9", -(1 << 31) + first)
    e("argmax.i32.i32", k.a("cls.loc"), k.a("cls.logits"), n)
    e("ld", "r6", k.a("cls.loc"))
    e("mul", "r7", "r6", 4)
    e("ld", "r8", k.a("cls.logits", 7))
    red = pl.tiles[pl.reducer]
    rect = _rect((pl.reducer[0], pl.reducer[0], pl.reducer[1], pl.reducer[1]))
    if packed:                              # the value, then -2^31 + the vocabulary row
        e("add", "r9", "r9", "r6")
        for b in range(0, W, 4):
            e("st", k.a("cls.slot", 0, b), "r9" if b == 4 else "r8")
        e("send", (red["red.vals"] + j * W,), k.a("cls.slot"), W, rect, k.isa.n_counters - 1)
        return
    for b in range(0, W, 4):                # the value in every int32 of a word
        e("st", k.a("cls.slot", 0, b), "r8")
    e("st", k.a("cls.slot", 0, W), f"r6+{first}")       # then the vocabulary row
    e("send", (red["red.vals"] + j * W,), k.a("cls.slot"), W, rect, k.isa.n_counters - 1)
    e("send", (red["red.slots"] + j * W,), k.a("cls.slot", 0, W), W, rect,
      k.isa.n_counters - 1)


def _reduce_pairs(e, k, counter):
    """The argmax reduction on the reducer tile: each classifier tile ``j`` sent its local
    maximum, in every int32 of a word, into word ``j`` of ``red.vals`` and its vocabulary
    row into word ``j`` of ``red.slots`` (`_classifier`), so one ``argmax`` over ``red.vals``
    finds the first largest (at element ``j W / 4`` of the first such tile: ties go to the
    lowest vocabulary row, as the golden model's) without gathering the values into a
    vector first; store its token, ring DONE."""
    lay, C, W = k.lay, k.lay.reduce, k.isa.word_bytes
    packed = _packed_argmax(k.qm, k.isa)
    e.comment(f"argmax over the {C} local maxima (ties: the first, lowest vocabulary row)")
    if packed:                              # one word per tile: int32 1 is -2^31 + its row
        e("li", "r9", -(1 << 31))
    e("wait", counter, C if packed else 2 * C)
    e("argmax.i32.i32", (lay["red.j"],), (lay["red.vals"],), C * W // 4)
    e("ld", "r6", (lay["red.j"],))
    e("mul", "r7", "r6", 4)                 # element j W / 4: word j of red.slots
    if packed:
        e("ld", "r8", (lay["red.vals"] + 4, 7))
        e("sub", "r8", "r8", "r9")
    else:
        e("ld", "r8", (lay["red.slots"], 7))
    e("st", (lay["red.token"],), "r8")
    e("done", DONE_CODE)


def tensor_program(qm: QuantizedModel, isa: IsaConfig, pl: Placement, roles: TensorRoles,
                   lay: TileLayout, context: int, pipelined: bool = True) -> str:
    """Return the assembly text of one tile of the tensor placement.

    One body serves every batch size: the entries ``m<m>_tab`` (load the tables) and
    ``m<m>`` of every ``m`` are the same two PCs, the row loops take ``m`` from the step block
    and the matrix operations choose between M = 1 and M = `max_m` at run time (`_rows_op`).
    """
    k = _K(qm, isa, pl, roles, lay, context, pipelined)
    e = Emitter()
    M = isa.max_m
    # the classifier's row in r3 inside the batch loop when the last x gather's wait leaves
    # r3 alone (`_wait_all` with the count in r15)
    cls_row = bool(lay.stages) and k.regflags
    for m in range(1, M + 1):
        e.put_label(f"m{m}_tab")
    for t in lay.tables:
        e("table", t.name.lower(), (lay[f"tab.{t.name.lower()}"],))
    for m in range(1, M + 1):
        e.put_label(f"m{m}")
    e("add", "r6", _sb(k, "tokens"), 0)    # the first batch's tokens (`_embedding`)
    e("ld", "r1", _sb(k, "pos"))
    e("ld", "r5", _sb(k, "nb"))

    def batch():
        e("ld", "r2", _sb(k, "m"))
        _embedding(e, k)                    # first: the flags' setup runs under its gather
        e("mul", "r3", "r2", 16)            # the flags m == 1, m > 1 into state+4, state+8
        if k.regflags:                      # ... or r13, r14 (`_rows_op`)
            e("ld", "r13", k.a("mtab", 3))
            e("ld", "r14", k.a("mtab", 3, 4))
            e("mul", "r15", "r2", k.T)      # the whole mesh's SENDs of the batch (_wait_all)
        else:
            e("ld", "r4", k.a("mtab", 3))
            e("st", k.a("state", 0, 4), "r4")
            e("ld", "r4", k.a("mtab", 3, 4))
            e("st", k.a("state", 0, 8), "r4")
        if k.dist:
            e("ld", "r4", k.a("mtab", 3, 12))
            e("st", k.a("state", 0, 12), "r4")
        _zero_stale_rows(e, k)
        wait_x = lambda: _wait_all(e, k, C_X, k.T)  # noqa: E731
        for li in range(k.c.n_layers):      # each x gather's wait after the next norm's setup
            wait_x = _layer(e, k, li, wait_x)
        # before the last x gather's wait (the rows' next position, the next batch's tokens
        # for `_embedding`, the classifier's row), not after it on the chain
        e("add", "r1", "r1", "r2")
        e("ld", "r6", k.a("state"))
        if cls_row:
            _classifier_row(e, k)
        wait_x()
    e.loop("r5", batch)
    if lay.stages:
        _classifier(e, k, row=not cls_row)
    if lay.reduce:
        _reduce_pairs(e, k, k.isa.n_counters - 1)
    e("halt")
    return e.text()


def tensor_images(qm: QuantizedModel, isa: IsaConfig, pl: Placement, roles: TensorRoles,
                  context: int) -> dict:
    """Return ``{(x, y): {region name: array}}``: the static contents of every tile (the
    regions absent from a tile's dict are zeros)."""
    from ..isa.programs import padded_rows, requant_table, vector_table
    c = qm.config
    hs = c.head_size
    out = {}
    tiles = sorted(pl.tiles, key=lambda t: (t[1], t[0]))
    for xy, lay in pl.tiles.items():
        d = {}
        for t in lay.tables:
            d[f"tab.{t.name.lower()}"] = vector_table(qm, t)
        o0, o1 = roles.o[xy]
        h0, h1 = roles.h[xy]
        emb = qm.embedding
        d["ems"] = requant_table(emb.m, emb.s)
        M = isa.max_m
        j = sorted(pl.tiles, key=lambda t: (t[1], t[0])).index(xy)
        d["mtab"] = np.array([(int(m == 1), int(m > 1), int(1 < m < M), int(1 < m and j < m))
                              for m in range(M + 1)], "<u4")
        if o1 > o0 and "e" not in lay.aliases:
            d["e"] = padded_rows(emb.w[:, o0:o1], isa)
        att = xy in roles.kv
        jobs = roles.kvp.get(xy, [])
        if att or any(kind == "k" for kind, _ in jobs):
            d["rope" if att else "prope"] = np.concatenate(
                [qm.rope_cos[:context], qm.rope_sin[:context]], axis=1).astype("<i2")
        W = isa.word_bytes
        split = [_split3(n, W, roles.vsplit) for n in range(context + 1)]
        if roles.split and att and roles.wsplit:    # and the weighted sum's keys 0 .. c - 1
            rows = []
            for n, (a, _) in enumerate(split):
                cw = _wsum_split(n, W)
                wdst = lay["aq"] + 4 * _att_geometry(roles, isa, hs)["cnt"] if roles.aslot \
                    else lay["g.y"] + 4 * roles.q[xy][0] * hs
                rows.append((a, int(a > 0), cw, lay["p"] + 2 * cw if n > cw else lay["p"],
                             isa.pad(2 * (n - cw)), lay["wloc"] if n > cw else wdst,
                             int(n > cw), int(a == 0)))
            d["atab"] = np.array(rows, "<u4")
        elif roles.split and att:           # keys 0 .. a - 1 of n on the tile
            d["atab"] = np.array([(a, int(a > 0)) for a, _ in split], "<u4")

        if roles.split and "ptab" in lay.regions:       # a partner's share of the keys
            vp = roles.vsplit and any(kind == "v" for kind, _ in jobs)
            rows = []
            for n, (a, b) in enumerate(split):
                lo, hi = (a, b) if vp else (b, n)
                cw = _wsum_split(n, W)      # the weighted sums' tail (`_partner_wsums`)
                rows.append([lo * isa.record_bytes(hs), hi - lo, isa.pad(4 * (hi - lo)),
                             int(hi > lo), 4 * lo if hi > lo else 0, cw * isa.pad(hs), n - cw,
                             int(n > cw)])
            d["ptab"] = np.array(rows, "<u4")
        if att:
            g0, g1 = roles.kv[xy]
            qr = slice(roles.q[xy][0] * hs, roles.q[xy][1] * hs)
            kr = slice(g0 * hs, g1 * hs)
            if "padt" in lay.regions:
                d["padt"] = np.array([isa.pad(4 * t) for t in range(context + 1)], "<u4")
        for li, ly in enumerate(qm.layers):
            p = f"l{li}."
            d[p + "ffn_eps"] = np.array([ly.ffn_norm.eps], "<i8")
            d[p + "fg"] = ly.ffn_norm.gain.astype("<i2")
            mats = []
            if o1 > o0:
                mats += [("wo", slice(o0, o1)), ("w2", slice(o0, o1))]
            if h1 > h0:
                mats += [("w1", slice(h0, h1)), ("w3", slice(h0, h1))]
            if att:
                mats += [("wq", qr)] if roles.kvp else [("wq", qr), ("wk", kr), ("wv", kr)]
                d[p + "att_ms"] = requant_table([ly.att_m], [ly.att_s])
            if att or jobs:
                d[p + "att_eps"] = np.array([ly.att_norm.eps], "<i8")
                d[p + "ag"] = ly.att_norm.gain.astype("<i2")
            if jobs and roles.split:
                d[p + "att_ms"] = requant_table([ly.att_m], [ly.att_s])
            for w, rows in mats:
                lin = getattr(ly, w)
                wr = lin.w[rows]
                if w == "w2" and roles.gslot:   # the gate's slots (`_gate_slices`)
                    wr = np.zeros((wr.shape[0], roles.gk2), wr.dtype)
                    for xyt in tiles:
                        a, b = roles.h[xyt]
                        wr[:, roles.gate_columns(xyt)] = lin.w[rows, a:b]
                d[p + w] = padded_rows(wr, isa)
                d[p + w + "_ms"] = requant_table(lin.m[rows], lin.s[rows])
            for j, (kind, h) in enumerate(jobs):      # a K / V partner's rows
                lin, rows = getattr(ly, "w" + kind), slice(h * hs, (h + 1) * hs)
                d[p + f"pw{j}"] = padded_rows(lin.w[rows], isa)
                d[p + f"pw{j}_ms"] = requant_table(lin.m[rows], lin.s[rows])
        if lay.stages:
            first, n, _ = lay.stages[-1].rows
            cl = qm.classifier
            d["cls.eps"] = np.array([qm.final_norm.eps], "<i8")
            d["cls.g"] = qm.final_norm.gain.astype("<i2")
            d["cls.w"] = padded_rows(cl.w[first:first + n], isa)
            d["cls.ms"] = requant_table(cl.m[first:first + n], cl.s[first:first + n])
        out[xy] = d
    return out
