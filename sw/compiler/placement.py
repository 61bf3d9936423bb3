"""Placement: pipeline stages, their SRAM regions, and their tiles on the mesh.

A model is cut into pipeline *stages*: the embedding lookup, then per layer an attention
stage and a feed-forward stage, then the classifier (final norm, a share of the vocabulary
rows, the local argmax) on one or more tiles, one of which also reduces the local argmaxes.
`place` walks the mesh along a snake path (row 0 left to right, row 1 right to left, ...),
gives each stage a tile (or, on a small mesh, packs consecutive stages onto one tile) and
lays out every tile's SRAM (`TileLayout`).  ``docs/architecture.md`` describes the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..golden.quantize import QuantizedModel
from ..isa.core import C_BITS, IsaConfig, TableId

__all__ = ["FitError", "Fit", "Stage", "Region", "TileLayout", "Placement", "snake", "place",
           "STEP_BLOCK", "REDUCE_COUNTER", "step_block_layout"]

#: Name of the step block (position, rows, token ids), at address 0 of every tile.
STEP_BLOCK = "step"
#: Counter of the argmax reduction on the reduction tile: the last one.
REDUCE_COUNTER = -1


def step_block_layout(max_m: int, batches: int) -> dict:
    """Return the byte offsets of the step block's fields and its size (unpadded).

    ``pos`` (uint32, first position), ``m`` (rows per batch), ``nb`` (batches in the step),
    ``flags`` (``batches`` uint32: 1 for the step's last batch, else 0), ``tokens``
    (``batches * max_m`` uint32 token ids, batch after batch).
    """
    return dict(pos=0, m=4, nb=8, flags=12, tokens=12 + 4 * batches,
                size=12 + 4 * batches + 4 * batches * max_m)

_STAGE_TABLES = {
    "emb": (),
    "att": (TableId.RSQRT, TableId.DYNQ, TableId.EXP2, TableId.RECIP),
    "ffn": (TableId.RSQRT, TableId.DYNQ, TableId.SIGMOID),
    "cls": (TableId.RSQRT, TableId.DYNQ),
}
_TABLE_ORDER = (TableId.RSQRT, TableId.EXP2, TableId.RECIP, TableId.DYNQ, TableId.SIGMOID)
_KIND_ORDER = {"step": 0, "c": 1, "table": 2, "act": 3, "w": 4, "kv": 5, "red": 6}


@dataclass(frozen=True)
class Fit:
    """A configuration that fits, as the changes to what was refused.

    Attributes
    ----------
    config : tuple of (str, str)
        ``ChipConfig.from_string`` keys and their values to change, in order, e.g.
        ``(("sram_kib", "175"), ("imem_words", "1024"))``; empty: the configuration as given.
    context : int or None
        A shorter context (positions); None: unchanged.
    placement : str or None
        Another placement (``"pipeline"``, ``"tensor"``); None: unchanged.
    note : str
        What the suggestion gives up, e.g. ``"without prow: slower prefill"``; ``""``: nothing.
    """

    config: tuple = ()
    context: int | None = None
    placement: str | None = None
    note: str = ""

    def config_text(self) -> str:
        """The configuration changes as ``key=value,...`` (``""`` if none)."""
        return ",".join(f"{k}={v}" for k, v in self.config)

    def text(self) -> str:
        """The suggestion in the compiler's words: ``--context 231 with imem_words=1024``,
        ``sram_kib=175 (note)``, ``mesh=3x3,imem_words=1024``, ``--placement pipeline``."""
        parts = []
        if self.context is not None:
            parts.append(f"--context {self.context}")
        if self.config:
            parts.append(("with " if parts else "") + self.config_text())
        if self.placement is not None:
            parts.append(f"--placement {self.placement}")
        return " ".join(parts) + (f" ({self.note})" if self.note else "")

    def apply(self, config, context: int | None = None) -> tuple:
        """Return ``(config, context)`` with this suggestion's changes (a ``ChipConfig``
        from ``ChipConfig.from_string`` on `config`; the context `context` if unchanged)."""
        if self.config:
            config = type(config).from_string(self.config_text(), config)
        return config, (context if self.context is None else self.context)


class FitError(ValueError):
    """A model, a context or a program does not fit the configuration.

    The message says what does not fit (stage, bytes needed against a tile's SRAM, or tiles
    needed against the mesh) and, when the compiler found some, configurations that would
    fit: ``<what>; a configuration that fits: <fit> or <fit>``.

    Attributes
    ----------
    what : str
        What does not fit (the message without the suggestions).
    fits : tuple of Fit
        The configurations suggested (each verified by compiling where the message says
        so), in the message's order; empty if none.
    """

    def __init__(self, what: str, fits=()):
        self.what, self.fits = str(what), tuple(fits)
        tips = " or ".join(f.text() for f in self.fits)
        super().__init__(self.what + (f"; a configuration that fits: {tips}" if tips else ""))

    def __reduce__(self):
        return type(self), (self.what, self.fits)


def kv_layout_or_fit_error(xy, layout_cls, **fields):
    """``layout_cls(**fields)`` (a `chipotle.isa.kv.KvLayout`), with a KV store that does not
    fit the store's word addresses refused as a `FitError` naming tile `xy`.

    Raises
    ------
    FitError
        If the store would end past ``2**KV_ADDR_BITS`` words (`chipotle.isa.kv`).
    """
    from ..isa.kv import KV_ADDR_BITS, KvRangeError
    try:
        return layout_cls(**fields)
    except KvRangeError as e:
        raise FitError(f"tile {xy}: {e}, the reach of the KV store's {KV_ADDR_BITS}-bit word "
                       f"addresses ({2 ** KV_ADDR_BITS * fields['word_bytes']:,} bytes): "
                       f"a shorter context or more tiles") from None


@dataclass(frozen=True)
class Stage:
    """One pipeline stage.

    Attributes
    ----------
    kind : str
        ``"emb"``, ``"att"``, ``"ffn"`` or ``"cls"``.
    layer : int or None
        The layer of an ``att`` / ``ffn`` stage.
    rows : tuple of int
        For ``cls``: ``(first vocabulary row, rows held, row capacity)``.
    """

    kind: str
    layer: int | None = None
    rows: tuple = ()

    @property
    def name(self) -> str:
        """Prefix of the stage's regions: ``emb``, ``att3``, ``ffn3``, ``cls``."""
        return self.kind if self.layer is None else f"{self.kind}{self.layer}"

    @property
    def title(self) -> str:
        """Readable name for messages."""
        return {"emb": "the embedding stage", "cls": "the classifier stage",
                "att": f"the attention stage of layer {self.layer}",
                "ffn": f"the feed-forward stage of layer {self.layer}"}[self.kind]

    def requests(self, qm: QuantizedModel, isa: IsaConfig, context: int, batches: int = 1
                 ) -> list:
        """Return the stage's regions as ``(name, bytes, kind)`` (names without prefix).

        `batches` is the number of prefill batches one step may carry: the input buffer of
        an attention or feed-forward stage has a slot of M rows for each.
        """
        c, M, W, pad, rec = qm.config, isa.max_m, isa.word_bytes, isa.pad, isa.record_bytes
        dim, hid, kvd, hs = c.dim, c.hidden_dim, c.kv_dim, c.head_size
        xs = pad(2 * dim)
        B = batches
        if self.kind == "emb":
            return [("ems", 4 * c.vocab_size, "act"), ("x", M * xs, "act"),
                    ("e", c.vocab_size * pad(dim), "w")]
        state = [("state", 3 * 4, "act")]           # position, input slot, flag pointer
        if self.kind == "att":
            krec = rec(hs)
            return [("eps", 8, "c"), ("att_ms", 4, "c"), ("wq_ms", 4 * dim, "c"),
                    ("wk_ms", 4 * kvd, "c"), ("wv_ms", 4 * kvd, "c"), ("wo_ms", 4 * dim, "c"),
                    ("g", 2 * dim, "act"), ("x", B * M * xs, "act"),
                    ("xq", M * rec(dim), "act"), ("q16", M * xs, "act"),
                    ("k16", M * pad(2 * kvd), "act"), ("qrec", M * c.n_heads * krec, "act"),
                    ("t", min(c.kv_mul, M) * pad(4 * context), "act"), ("p", 2 * context, "act"),
                    ("padt", 4 * (context + 1), "act"),
                    ("acc", M * 4 * dim, "act"), ("arec", M * rec(dim), "act"),
                    ("yo", M * xs, "act"), ("xa", M * xs, "act"),
                    ("wq", dim * pad(dim), "w"), ("wk", kvd * pad(dim), "w"),
                    ("wv", kvd * pad(dim), "w"), ("wo", dim * pad(dim), "w"),
                    ("rope", context * 2 * hs, "kv"),
                    ("kcache", c.n_kv_heads * context * krec, "kv"),
                    ("vcache", context * pad(kvd), "kv")] + state
        if self.kind == "ffn":
            hsz = pad(2 * hid)
            return [("eps", 8, "c"), ("w1_ms", 4 * hid, "c"), ("w3_ms", 4 * hid, "c"),
                    ("w2_ms", 4 * dim, "c"), ("g", 2 * dim, "act"), ("x", B * M * xs, "act"),
                    ("xq", M * rec(dim), "act"),
                    ("h1", M * hsz, "act"), ("h3", M * hsz, "act"), ("silu", M * hsz, "act"),
                    ("gate", M * 2 * hsz, "act"), ("grec", M * rec(hid), "act"),
                    ("y2", M * xs, "act"), ("xo", M * xs, "act"),
                    ("w1", hid * pad(dim), "w"), ("w3", hid * pad(dim), "w"),
                    ("w2", dim * pad(hid), "w")] + state
        if self.kind == "cls":
            cap = self.rows[2]
            return [("eps", 8, "c"), ("ms", 4 * cap, "c"), ("g", 2 * dim, "act"),
                    ("x", xs, "act"), ("xq", rec(dim), "act"),
                    ("logits", 4 * cap, "act"), ("loc", W, "act"), ("slot", W, "act"),
                    ("w", cap * pad(dim), "w")]
        raise ValueError(f"unknown stage kind {self.kind!r}")


@dataclass(frozen=True)
class Region:
    """A word-aligned range of a tile's SRAM: ``name`` at ``addr``, ``size`` bytes."""

    name: str
    addr: int
    size: int
    kind: str


def classifier_is_embedding(qm: QuantizedModel, cls_rows) -> bool:
    """Whether classifier rows `cls_rows` (``(first, n, cap)``, or None) are the whole of a
    classifier that is the token embedding, byte for byte: the checkpoint shares them
    (llama2.c's ``shared_classifier``; `chipotle.golden.quantize` then quantises both to one
    int8 matrix) and the rows are all of it, from row 0.  A tile holding those rows and
    every embedding column lays the matrix out once (`TileLayout.aliases`)."""
    return (cls_rows is not None and tuple(cls_rows[:2]) == (0, qm.config.vocab_size)
            and qm.embedding.w.shape == qm.classifier.w.shape
            and np.array_equal(qm.embedding.w, qm.classifier.w))


@dataclass
class TileLayout:
    """The stages of one tile and its SRAM regions.

    Attributes
    ----------
    xy : tuple of int
    stages : list of Stage
        Run in this order.
    reduce : int
        Number of local argmaxes this tile reduces (0: not the reduction tile).
    regions : dict of str to Region
        ``"<stage>.<what>"``, ``"tab.<table>"``, ``"step"``, ``"red.<what>"``.
    size : int
        Bytes used.
    aliases : dict of str to str
        Names that are another region's bytes, not regions of their own: name -> the
        region's name: the embedding rows (the tensor placement's ``e``, the pipeline's
        ``emb.e``) on a tile that holds the whole shared classifier, ``cls.w``, the same
        int8 matrix byte for byte (`classifier_is_embedding`).  Indexing resolves them;
        `regions` does not list them (nothing is laid out or loaded twice).
    """

    xy: tuple
    stages: list
    reduce: int = 0
    regions: dict = field(default_factory=dict)
    size: int = 0
    aliases: dict = field(default_factory=dict)

    def build(self, qm: QuantizedModel, isa: IsaConfig, context: int, batches: int = 1,
              kvapp: bool = False) -> TileLayout:
        """Lay out the regions: step block, ``c`` data, tables, activations, weights, KV.

        With `kvapp` the attention stages' K and V caches are one region ``kv`` of the tile
        in the layout of `kv_layout` (appended with ``kvapp``), and each attention stage has
        buffers ``kbuf`` / ``vbuf`` for the batch's K records and V rows."""
        W = isa.word_bytes
        req = [(STEP_BLOCK, isa.pad(step_block_layout(isa.max_m, batches)["size"]), "step")]
        tabs = {t for s in self.stages for t in _STAGE_TABLES[s.kind]}
        from ..isa.core import TABLE_ENTRIES
        req += [(f"tab.{t.name.lower()}", 2 * TABLE_ENTRIES[t], "table")
                for t in _TABLE_ORDER if t in tabs]
        c, M, rec = qm.config, isa.max_m, isa.record_bytes
        cls_rows = next((s.rows for s in self.stages if s.kind == "cls"), None)
        self.aliases = {}
        if (any(s.kind == "emb" for s in self.stages)
                and classifier_is_embedding(qm, cls_rows)):
            self.aliases["emb.e"] = "cls.w"         # one matrix, laid out once
        for s in self.stages:
            sreq = s.requests(qm, isa, context, batches)
            if kvapp and s.kind == "att":
                sreq = [r for r in sreq if r[0] not in ("kcache", "vcache")]
                sreq += [("kbuf", M * c.n_kv_heads * rec(c.head_size), "act"),
                         ("vbuf", c.n_kv_heads * M * isa.pad(c.head_size), "act")]
            req += [(f"{s.name}.{n}", b, k) for n, b, k in sreq
                    if f"{s.name}.{n}" not in self.aliases]
        n_att = sum(s.kind == "att" for s in self.stages)
        if kvapp and n_att:
            req += [("kv", self.kv_layout(qm, isa, context, 0).size_words * W, "kv")]
        if self.reduce:
            C = self.reduce
            req += [("red.slots", C * W, "red"), ("red.vals", 4 * C, "red"),
                    ("red.j", W, "red"), ("red.token", W, "red")]
        req.sort(key=lambda r: _KIND_ORDER[r[2]])        # stable: stage order within a kind
        addr, self.regions = 0, {}
        for name, nbytes, kind in req:
            self.regions[name] = Region(name, addr, nbytes, kind)
            addr += isa.pad(nbytes)
        self.size = addr
        return self

    def __getitem__(self, name: str) -> int:
        """Return the address of region `name` (or of the region it is an alias of)."""
        return self.regions[self.aliases.get(name, name)].addr

    def kv_layout(self, qm: QuantizedModel, isa: IsaConfig, context: int,
                  addr: int | None = None):
        """Return the `chipotle.isa.kv.KvLayout` of the tile's attention stages (local layer
        ``i`` = the tile's ``i``-th attention stage, every KV head) at byte address `addr`
        (default: the region ``kv``)."""
        from ..isa.kv import KvLayout
        c = qm.config
        addr = self["kv"] if addr is None else addr
        return kv_layout_or_fit_error(
            self.xy, KvLayout, n_layers=sum(s.kind == "att" for s in self.stages),
            n_kv_heads=c.n_kv_heads, head_size=c.head_size, max_pos=context,
            base=addr // isa.word_bytes, word_bytes=isa.word_bytes, k_header=True)

    @property
    def tables(self) -> list:
        """The vector-unit tables this tile loads, in load order."""
        return [t for t in _TABLE_ORDER if f"tab.{t.name.lower()}" in self.regions]

    def c_limit_ok(self) -> bool:
        """Whether every ``c``-addressed region lies below the 17-bit ``c`` immediate."""
        return all(r.addr + r.size <= 1 << C_BITS for r in self.regions.values()
                   if r.kind == "c")


@dataclass
class Placement:
    """Where every stage runs.

    Attributes
    ----------
    tiles : dict of (x, y) to TileLayout
        Tiles with work, in snake order.
    pipeline : list of (Stage, (x, y))
        Embedding, attention and feed-forward stages in execution order.
    classifier : list of (x, y)
        Classifier tiles in vocabulary order (a rectangle of the mesh).
    rect : tuple of int
        ``(x0, x1, y0, y1)`` of the classifier rectangle.
    reducer : (x, y)
        The tile reducing the local argmaxes and ringing the doorbell.
    batches : int
        Prefill batches of M rows one step may carry.
    kind : str
        ``"pipeline"`` (this module's `place`) or ``"tensor"``
        (`chipotle.compiler.tensor.place_tensor`: every tile in every layer, no pipeline).
    kv_layouts : dict of (x, y) to chipotle.isa.kv.KvLayout
        The KV store layout of every tile whose programs append with ``kvapp`` (the host
        writes it into the tile's KV registers before the first step); empty when the
        programs store K and V themselves.
    """

    tiles: dict
    pipeline: list
    classifier: list
    rect: tuple
    reducer: tuple
    batches: int = 1
    kind: str = "pipeline"
    kv_layouts: dict = field(default_factory=dict)


def snake(width: int, height: int) -> list:
    """Return the mesh's tiles along the snake path: row 0 left to right, row 1 right to left,
    ... (consecutive tiles are one hop apart)."""
    out = []
    for y in range(height):
        xs = range(width) if y % 2 == 0 else range(width - 1, -1, -1)
        out += [(x, y) for x in xs]
    return out


def _pipeline_stages(qm: QuantizedModel) -> list:
    return [Stage("emb")] + [Stage(k, li) for li in range(qm.config.n_layers)
                             for k in ("att", "ffn")]


def _cls_stages(qm: QuantizedModel, n: int) -> list:
    V = qm.config.vocab_size
    cap = -(-V // n)
    return [Stage("cls", rows=(j * cap, min(cap, V - j * cap), cap))
            for j in range(-(-V // cap))]


def _rect_candidates(order: list, used: int, width: int, height: int) -> list:
    """Rectangles of free tiles after the first `used` snake tiles: the rest of the current
    row and the full rows below; each as (tiles in row-major order, (x0, x1, y0, y1))."""
    free = order[used:]
    if not free:
        return []
    y = free[0][1]
    row = sorted(t for t in free if t[1] == y)
    out = [(row, (row[0][0], row[-1][0], y, y))]
    if y + 1 < height and row != [(x, y) for x in range(width)]:
        below = [(x, yy) for yy in range(y + 1, height) for x in range(width)]
        out.append((below, (0, width - 1, y + 1, height - 1)))
    elif y + 1 < height:
        out[0] = ([(x, yy) for yy in range(y, height) for x in range(width)],
                  (0, width - 1, y, height - 1))
    return sorted(out, key=lambda c: -len(c[0]))


def _partition(stages: list, n: int, size) -> list | None:
    """Split `stages` into at most `n` consecutive groups minimising the largest
    ``size(group)``; return the groups, or None if no split fits (size None)."""
    S = len(stages)
    n = min(n, S)
    INF = float("inf")
    best = [[INF] * (S + 1) for _ in range(n + 1)]
    cut = [[0] * (S + 1) for _ in range(n + 1)]
    best[0][0] = 0
    for k in range(1, n + 1):
        for j in range(1, S + 1):
            for i in range(k - 1, j):
                if best[k - 1][i] == INF:
                    continue
                sz = size(stages[i:j])
                if sz is None:
                    continue
                v = max(best[k - 1][i], sz)
                if v < best[k][j]:
                    best[k][j], cut[k][j] = v, i
    k = min(range(1, n + 1), key=lambda k: (best[k][S], -k))
    if best[k][S] == INF:
        return None
    groups, j = [], S
    while k:
        i = cut[k][j]
        groups.append(stages[i:j])
        j, k = i, k - 1
    return groups[::-1]


def place(qm: QuantizedModel, isa: IsaConfig, width: int, height: int, context: int,
          batches: int = 1, kvapp: bool = False) -> Placement:
    """Assign stages to tiles and lay out every tile (see the module docstring).

    With `kvapp` the attention tiles' caches are laid out for the KV store
    (`TileLayout.kv_layout`, ``Placement.kv_layouts``).

    Returns
    -------
    Placement

    Raises
    ------
    FitError
        If a stage does not fit one tile's SRAM, or the mesh has too few tiles (the message
        has no suggestion: `chipotle.compiler.compile_model` adds one).
    """
    order = snake(width, height)
    T = len(order)

    def layout(xy, stages, reduce=0):
        return TileLayout(xy, list(stages), reduce).build(qm, isa, context, batches, kvapp)

    cache: dict = {}

    def size(stages):
        key = tuple(stages)
        if key not in cache:
            sz = layout((0, 0), stages).size
            cache[key] = sz if sz <= isa.sram_bytes else None
        return cache[key]

    pipe = _pipeline_stages(qm)
    need, s = max((layout((0, 0), [s]).size, -i) for i, s in enumerate(pipe))
    s = -s                              # the first of the largest stages
    if need > isa.sram_bytes:           # the largest stage alone on a tile must fit
        raise FitError(f"{pipe[s].title} needs {need:,} bytes of SRAM at context {context}"
                       + (f" and {batches} prefill batches" if batches > 1 else "")
                       + f", but a tile has {isa.sram_bytes:,}")

    def with_classifier(groups):
        """Place the classifier after `groups` on the free tiles; None if it does not fit."""
        used = len(groups)
        for tiles, rect in _rect_candidates(order, used, width, height):
            cls = _cls_stages(qm, len(tiles))
            tiles = tiles[:len(cls)]
            rect = (rect[0], rect[0] + len(tiles) - 1, rect[2], rect[3]) \
                if rect[2] == rect[3] else rect
            if len(cls) != len(tiles) and rect[2] != rect[3]:
                continue            # a multi-row rectangle must be full
            red = tiles[0]
            lays = [layout(t, [s], len(cls) if t == red else 0)
                    for t, s in zip(tiles, cls, strict=True)]
            if all(lay.size <= isa.sram_bytes for lay in lays):
                return tiles, rect, red, lays
        # share the last pipeline tile
        last = groups[-1]
        cls = _cls_stages(qm, 1)
        lay = layout(order[used - 1], list(last) + cls, 1)
        if lay.size <= isa.sram_bytes:
            return [order[used - 1]], None, order[used - 1], [lay]
        return None

    found = None
    for P in range(min(len(pipe), T - 1), 0, -1):
        groups = _partition(pipe, P, size)
        if groups is None:
            break
        got = with_classifier(groups)
        if got is not None:
            found = groups, got
            break
    if found is None:                   # every tile in the pipeline, the classifier shares
        groups = _partition(pipe, T, size)
        got = with_classifier(groups) if groups is not None else None
        if got is not None:
            found = groups, got
    if found is None:
        need = _tiles_needed(qm, isa, context)      # a lower bound: it may be <= T
        stages = (f"(embedding, {qm.config.n_layers} x (attention, feed-forward), "
                  f"classifier)")
        if need > T:
            raise FitError(f"the model needs at least {need} tiles of {isa.sram_bytes:,} bytes "
                           f"at context {context} {stages}, but the mesh has {T}")
        raise FitError(f"the model does not fit the mesh's {T} tiles of {isa.sram_bytes:,} "
                       f"bytes at context {context}: no split of its stages {stages} over them "
                       f"keeps every tile within its SRAM")
    groups, (ctiles, rect, red, clays) = found
    tiles, pipeline = {}, []
    for g, xy in zip(groups, order, strict=False):
        tiles[xy] = layout(xy, g)
        pipeline += [(s, xy) for s in g]
    for lay in clays:
        tiles[lay.xy] = lay
    if rect is None:
        rect = (red[0], red[0], red[1], red[1])
    tiles = {xy: tiles[xy] for xy in order if xy in tiles}
    kvl = {xy: lay.kv_layout(qm, isa, context) for xy, lay in tiles.items()
           if kvapp and "kv" in lay.regions}
    return Placement(tiles, pipeline, ctiles, rect, red, batches, kv_layouts=kvl)


def _tiles_needed(qm: QuantizedModel, isa: IsaConfig, context: int) -> int:
    """Return a lower bound of the tiles the model needs: greedy packing in order."""
    def size(stages):
        return TileLayout((0, 0), list(stages), 1).build(qm, isa, context).size
    stages = _pipeline_stages(qm) + _cls_stages(qm, 1)
    n, cur = 0, []
    for s in stages:
        if cur and size(cur + [s]) > isa.sram_bytes:
            n, cur = n + 1, []
        cur.append(s)
    return n + 1
