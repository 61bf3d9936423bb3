"""`compile_model`: a llama2 model placed on the mesh, its SRAM images and tile programs."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..config import ChipConfig
from ..golden.quantize import QuantizedModel, quantize
from ..isa.asm import AsmError, assemble
from ..isa.core import OFF_BITS, TableId
from ..isa.programs import padded_rows, requant_table, vector_table
from ..model import Checkpoint, ModelConfig
from .codegen import DONE_CODE, tile_program
from .placement import STEP_BLOCK, Fit, FitError, Placement, place, step_block_layout

__all__ = ["CompiledModel", "StepPlan", "compile_model", "DEFAULT_PREFILL_BATCHES"]

#: Prefill batches of M tokens one step may carry by default (fewer if they do not fit).
DEFAULT_PREFILL_BATCHES = 16


@dataclass(frozen=True)
class StepPlan:
    """What the host does for one step (prefill batch or decode).

    Attributes
    ----------
    writes : list of ((x, y), int, bytes)
        Host SRAM writes before the starts: the step block (position, rows, token ids), the
        same bytes at the same address of every tile (one multicast will do).
    starts : list of ((x, y), int)
        ``(tile, pc)`` of every tile to start.
    done : ((x, y), int)
        ``(tile, code)`` of the doorbell that ends the step; every tile is halted and every
        counter is zero once it has been rung.
    token_at : ((x, y), int)
        Where the int32 argmax token id of the step's last row is, after the step.
    logits_at : list of ((x, y), int, int, int)
        ``(tile, byte address, first vocabulary row, rows)``: the int32 logits of the step's
        last row, with ``LOGIT_FRAC_BITS`` fractional bits.
    tokens : tuple of int
        The step's token ids.
    pos : int
        Position of ``tokens[0]``.
    """

    writes: list
    starts: list
    done: tuple
    token_at: tuple
    logits_at: list
    tokens: tuple = ()
    pos: int = 0


@dataclass
class CompiledModel:
    """A model placed on a chip configuration: SRAM images and per-tile programs.

    Attributes
    ----------
    config : ChipConfig
    qm : QuantizedModel
    model : ModelConfig
    context : int
        Positions the KV caches hold.
    images : dict of (x, y) to list of (int, bytes)
        Everything to load once per tile: weights, requantisation tables, gains, epsilons,
        vector-unit tables, RoPE tables, and zeros for the KV caches and buffers.  Chunks are
        word-aligned runs of adjacent regions, those with data apart from those of zeros (a
        host that knows the SRAM is zero may skip the all-zero chunks).
    programs : dict of (x, y) to list of int
        128-bit instruction words per tile.
    entries : dict of (x, y) to dict of str to int
        Entry PCs per tile: ``m<m>`` and ``m<m>_tab`` (load the tables first).
    placement : Placement
    sources : dict of (x, y) to str
        The assembly text of each program.
    """

    config: ChipConfig
    qm: QuantizedModel
    model: ModelConfig
    context: int
    images: dict
    programs: dict
    entries: dict
    placement: Placement
    sources: dict
    #: the tensor placement's program variants left out because the instruction memory was
    #: too small for them (`_IMEM_VARIANTS` names), fastest first; empty when none was
    imem_dropped: tuple = ()
    #: the instructions the longest program needs with every variant (0 when none was
    #: left out)
    imem_needed: int = 0

    # -- the host's view ----------------------------------------------------------------------

    @property
    def kv_layouts(self) -> dict:
        """``{(x, y): chipotle.isa.kv.KvLayout}``: the KV registers the host writes into each
        listed tile (``KvLayout.registers()``, from ``KV_BASE`` on) after a load or reset and
        before the first step; empty when the programs do not use ``kvapp``."""
        return self.placement.kv_layouts

    @property
    def prefill_batches(self) -> int:
        """Batches of M tokens one `prefill` step may carry."""
        return self.placement.batches

    def step(self, tokens, pos: int, load_tables: bool | None = None) -> StepPlan:
        """Return the host actions of a step of ``m = len(tokens)`` tokens at ``pos ..``.

        Parameters
        ----------
        tokens : sequence of int
            The step's token ids (1 .. M of them).
        pos : int
            Position of ``tokens[0]``; positions ``0 .. pos - 1`` must have been run.
        load_tables : bool, optional
            Start the tiles at the entries that first load the vector-unit tables (needed
            after a load or a reset).  Default: at ``pos == 0``, the first step of every
            sequence.

        Returns
        -------
        StepPlan

        Raises
        ------
        ValueError
            If ``m`` is not in ``1 .. M``, a token is outside the vocabulary, or
            ``pos + m`` exceeds the context.
        """
        toks = self._check(tokens, pos)
        m, M = len(toks), self.config.max_m
        if not 1 <= m <= M:
            raise ValueError(f"a step takes 1 .. {M} tokens (M), not {m}")
        return self._plan(toks, pos, m, 1, load_tables)

    def prefill(self, tokens, pos: int, load_tables: bool | None = None) -> StepPlan:
        """Return the host actions of a prefill step of several batches of M tokens.

        The batches flow through the pipeline together (stage k works on batch b while
        stage k + 1 works on batch b - 1); the results are those of the last token, as for
        `step`, and identical to running the batches as separate steps.

        Parameters
        ----------
        tokens : sequence of int
            ``b * M`` token ids, ``1 <= b <=`` `prefill_batches`.
        pos, load_tables
            As for `step`.

        Raises
        ------
        ValueError
            If the number of tokens is not such a multiple of M, or as `step`.
        """
        toks = self._check(tokens, pos)
        M, B = self.config.max_m, self.prefill_batches
        if not toks or len(toks) % M or len(toks) > B * M:
            raise ValueError(f"a prefill step takes a multiple of M = {M} tokens, at most "
                             f"{B * M} ({B} batches), not {len(toks)}")
        return self._plan(toks, pos, M, len(toks) // M, load_tables)

    def plans(self, tokens, pos: int) -> list:
        """Return the plans that run `tokens` from `pos`: `prefill` steps of as many whole
        batches as fit, then a `step` with the remaining (fewer than M) tokens."""
        toks = self._check(tokens, pos)
        M, B = self.config.max_m, self.prefill_batches
        out, i = [], 0
        while len(toks) - i >= M:
            n = min(B, (len(toks) - i) // M) * M
            out.append(self.prefill(toks[i:i + n], pos + i, pos + i == 0))
            i += n
        if i < len(toks):
            out.append(self.step(toks[i:], pos + i, pos + i == 0))
        return out

    def _check(self, tokens, pos):
        toks = [int(t) for t in tokens]
        if not toks:
            raise ValueError("a step needs at least one token")
        V = self.model.vocab_size
        bad = [t for t in toks if not 0 <= t < V]
        if bad:
            raise ValueError(f"token {bad[0]} is outside the vocabulary [0, {V})")
        if not isinstance(pos, (int, np.integer)) or isinstance(pos, bool):
            raise ValueError(f"a position must be an integer, not {pos!r}")
        if pos < 0:
            raise ValueError(f"a position must not be negative, not {pos}")
        if pos + len(toks) > self.context:
            raise ValueError(f"positions {pos} .. {pos + len(toks) - 1} exceed the context "
                             f"of {self.context} positions")
        return toks

    def _plan(self, toks, pos, m, nb, load_tables) -> StepPlan:
        if load_tables is None:
            load_tables = pos == 0
        pl = self.placement
        lay = step_block_layout(self.config.max_m, pl.batches)
        block = np.zeros(pl.tiles[pl.reducer].regions[STEP_BLOCK].size, np.uint8)
        words = block[:lay["size"]].view("<u4")
        words[0], words[1], words[2] = pos, m, nb
        words[lay["flags"] // 4 + nb - 1] = 1
        words[lay["tokens"] // 4:lay["tokens"] // 4 + len(toks)] = toks
        data = block.tobytes()
        entry = f"m{m}_tab" if load_tables else f"m{m}"
        red = pl.tiles[pl.reducer]
        return StepPlan(
            writes=[(xy, lay_[STEP_BLOCK], data) for xy, lay_ in pl.tiles.items()],
            starts=[(xy, self.entries[xy][entry]) for xy in pl.tiles],
            done=(pl.reducer, DONE_CODE),
            token_at=(pl.reducer, red["red.token"]),
            logits_at=[(xy, pl.tiles[xy]["cls.logits"], pl.tiles[xy].stages[-1].rows[0],
                        pl.tiles[xy].stages[-1].rows[1]) for xy in pl.classifier],
            tokens=tuple(toks), pos=int(pos))

    def slower_fits(self, context: int | None = None) -> list:
        """Return what this compile left out for want of room, and what would keep it.

        The tensor placement drops its optional schemes (`_SCHEMES`, in that order) when a
        tile's SRAM is too small for their buffers, and its longer program variants
        (`_IMEM_VARIANTS`) when the instruction memory is too small for them; either way the
        programs stay bit-exact and only get slower (``docs/architecture.md``).  This says
        so, since nothing else does when the model fits.

        Parameters
        ----------
        context : int, optional
            The context the suggested sizes must keep everything at (default: this
            compile's): the checkpoint's ``seq_len`` when the compile took a shorter one
            because the configuration holds no more, so that the size suggested holds both.

        Returns
        -------
        list of (str, Fit)
            One per cause, ``"SRAM"`` or ``"instruction memory"``, with a `Fit` whose
            ``note`` names what was left out and the phase it slows (``"without the V
            partner's scores: slower decode"``) and whose ``config`` is the smallest
            ``sram_kib=`` (with any ``imem_words=`` it needs) or ``imem_words=`` that keeps
            it, compiled, not estimated; ``config`` is empty when no size this configuration
            takes keeps it.  Empty for the pipeline placement and when nothing was left out.

        Compiles the model again (seconds for stories260K) when schemes were left out for
        SRAM.
        """
        if self.placement.kind != "tensor":
            return []
        out = []
        kib = self.config.sram_bytes // 1024
        if self.config.sram_bytes % 1024 == 0:
            note, fit = _schemes_note(self.qm, self.config, self.context, kib,
                                      bool(self.placement.kv_layouts), context)
            if note:
                out.append(("SRAM", Fit(fit.config if fit is not None else (), note=note)))
        if self.imem_dropped:
            keep = _imem_fit(self.imem_needed, self.config)
            note = _without(self.imem_dropped, _IMEM_VARIANTS)
            out.append(("instruction memory", Fit(keep[0].config if keep else (), note=note)))
        return out

    def weight_bytes_per_token(self) -> int:
        """Return the int8 weight bytes a decode step must read: every layer matrix and the
        classifier (rows padded to words, as stored) and one embedding row."""
        c, pad = self.model, self.config.isa_config().pad
        dim, hid, kvd = c.dim, c.hidden_dim, c.kv_dim
        layer = (2 * dim + 2 * kvd) * pad(dim) + 2 * hid * pad(dim) + dim * pad(hid)
        return c.n_layers * layer + c.vocab_size * pad(dim) + pad(dim)

    def kv_bytes(self, pos: int) -> int:
        """Return the K and V bytes a decode step at `pos` must read: positions
        ``0 .. pos`` of every layer, K as records (header word and data), V rows."""
        c, isa = self.model, self.config.isa_config()
        T = pos + 1
        return c.n_layers * T * (c.n_kv_heads * isa.record_bytes(c.head_size)
                                 + isa.pad(c.kv_dim))

    def memory_map(self) -> str:
        """Return every tile's stages and SRAM regions (address, bytes, name) as text."""
        cfg, pl = self.config, self.placement
        if pl.kind == "tensor":
            flow = ("tensor placement: every tile in every layer (att: query heads and their "
                    "KV head; ffn: rows of wo, w1, w3, w2, embedding columns; cls: vocabulary "
                    "rows)"
                    f" -> argmax@{pl.reducer[0]},{pl.reducer[1]}")
        else:
            flow = ("pipeline (snake order): " + " -> ".join(
                f"{s.name}@{xy[0]},{xy[1]}" for s, xy in pl.pipeline)
                + f" -> cls@({pl.rect[0]}:{pl.rect[1]}, {pl.rect[2]}:{pl.rect[3]})"
                f" -> argmax@{pl.reducer[0]},{pl.reducer[1]}")
        out = [f"{self.model_name()} on {cfg}, imem_words={cfg.imem_words}, k_max={cfg.k_max}, "
               f"loop_depth={cfg.loop_depth}, context {self.context}", flow,
               self.mesh_diagram()]
        for xy, lay in pl.tiles.items():
            names = _stage_names(pl, lay)
            if lay.reduce:
                names.append("argmax")
            out.append(f"\ntile ({xy[0]}, {xy[1]}): {' + '.join(names)}; "
                       f"{lay.size:,} of {cfg.sram_bytes:,} bytes, "
                       f"{len(self.programs[xy])} of {cfg.imem_words} instructions")
            out.append("  address    bytes  region")
            rows = [(r.addr, 0, f"  {r.addr:#07x} {r.size:8,d}  {r.name}")
                    for r in lay.regions.values()]
            rows += [(lay[a], 1, f"  {lay[a]:#07x} {'':>8}  {a} = {t} (the same bytes: the "
                      f"embedding is the shared classifier)") for a, t in lay.aliases.items()]
            out += [text for _, _, text in sorted(rows)]
        idle = [xy for xy in cfg.tiles if xy not in pl.tiles]
        if idle:
            out.append("\nidle tiles: " + ", ".join(f"({x}, {y})" for x, y in idle))
        return "\n".join(out)

    def mesh_diagram(self) -> str:
        """Return the mesh as a grid of boxes, four lines per mesh row.

        Each box holds a tile's stages and the SRAM it uses (``124.2 KiB``; the argmax
        tile's ``123.6 KiB +argmax``); every box has the width of the longest label plus 2.
        The pipeline placement's snake path is drawn between consecutive tiles: ``>`` or
        ``<`` between the boxes of a row, ``vv`` in the bottom border of a tile whose next
        tile is the one below it (and of the last stage's tile above the classifier rows,
        its multicast).  A border without an arrow is drawn whole (the tensor placement's
        every border).
        """
        cfg, pl = self.config, self.placement
        labels = {}
        for xy, lay in pl.tiles.items():
            names = _stage_names(pl, lay)
            size = f"{lay.size / 1024:.1f} KiB"
            labels[xy] = ("+".join(names), size + (" +argmax" if lay.reduce else ""))
        # boxes as wide as the longest label (``att+ffn+cls[128:160]``), never cut
        cw = max([14, *(len(t) + 2 for pair in labels.values() for t in pair)])
        order = [xy for _, xy in pl.pipeline]
        nxt = {a: b for a, b in zip(order, order[1:], strict=False) if a != b}
        lines = []
        for y in range(cfg.mesh_height):
            top, mid, low, bot = [], [], [], []
            for x in range(cfg.mesh_width):
                a, b = labels.get((x, y), ("idle", ""))
                arrow = " "
                if nxt.get((x, y)) == (x + 1, y):
                    arrow = ">"
                elif nxt.get((x + 1, y)) == (x, y):
                    arrow = "<"
                top.append("+" + "-" * cw + "+ ")
                mid.append("|" + a[:cw].center(cw) + "|" + arrow)
                low.append("|" + b[:cw].center(cw) + "| ")
                down = "v" if nxt.get((x, y)) == (x, y + 1) else "-"
                if order and (x, y) == order[-1] and pl.rect[2] > y:
                    down = "v"                  # the multicast to the classifier rows
                bot.append("+" + "-" * (cw // 2 - 1) + down * 2 + "-" * (cw - cw // 2 - 1) + "+ ")
            lines += ["".join(top).rstrip(), "".join(mid).rstrip(), "".join(low).rstrip(),
                      "".join(bot).rstrip()]
        return "\n".join(lines)

    def model_name(self) -> str:
        """Return a short description of the model's shape."""
        c = self.model
        return (f"model dim {c.dim}, hidden {c.hidden_dim}, {c.n_layers} layers, "
                f"{c.n_heads}/{c.n_kv_heads} heads, vocab {c.vocab_size}")


def _stage_names(pl: Placement, lay) -> list:
    """Return the names of what a tile computes (its stages; for the tensor placement
    ``att`` on the attention tiles, ``ffn`` and its classifier rows)."""
    names = [s.name if s.kind != "cls" else f"cls[{s.rows[0]}:{s.rows[0] + s.rows[1]}]"
             for s in lay.stages]
    if pl.kind == "tensor":
        names = (["att"] if "rope" in lay.regions else []) + ["ffn"] + names
    return names


def _images(qm: QuantizedModel, isa, pl: Placement, context: int) -> dict:
    """Return the load-once SRAM contents of every placed tile."""
    out = {}
    for xy, lay in pl.tiles.items():
        data = {}
        for tid in TableId:
            if f"tab.{tid.name.lower()}" in lay.regions:
                data[f"tab.{tid.name.lower()}"] = vector_table(qm, tid)
        for st in lay.stages:
            p = st.name + "."
            if st.kind == "emb":
                if p + "e" not in lay.aliases:          # else it is the classifier's rows
                    data[p + "e"] = padded_rows(qm.embedding.w, isa)
                data[p + "ems"] = requant_table(qm.embedding.m, qm.embedding.s)
            elif st.kind in ("att", "ffn"):
                ly = qm.layers[st.layer]
                norm = ly.att_norm if st.kind == "att" else ly.ffn_norm
                data[p + "eps"] = np.array([norm.eps], "<i8")
                data[p + "g"] = norm.gain.astype("<i2")
                mats = ("wq", "wk", "wv", "wo") if st.kind == "att" else ("w1", "w3", "w2")
                for w in mats:
                    lin = getattr(ly, w)
                    data[p + w] = padded_rows(lin.w, isa)
                    data[p + w + "_ms"] = requant_table(lin.m, lin.s)
                if st.kind == "att":
                    data[p + "att_ms"] = requant_table([ly.att_m], [ly.att_s])
                    data[p + "padt"] = np.array([isa.pad(4 * t) for t in range(context + 1)],
                                                "<u4")
                    data[p + "rope"] = np.concatenate(
                        [qm.rope_cos[:context], qm.rope_sin[:context]], axis=1).astype("<i2")
            else:                       # classifier rows first .. first + n - 1
                first, n, _ = st.rows
                cl = qm.classifier
                data[p + "eps"] = np.array([qm.final_norm.eps], "<i8")
                data[p + "g"] = qm.final_norm.gain.astype("<i2")
                data[p + "w"] = padded_rows(cl.w[first:first + n], isa)
                data[p + "ms"] = requant_table(cl.m[first:first + n], cl.s[first:first + n])
        out[xy] = _chunks(lay, data, isa)
    return out


def _chunks(lay, data: dict, isa) -> list:
    """Return a tile's image: `data` (region name to array) in its regions, zeros elsewhere,
    as word-aligned runs of adjacent regions, those with data apart from those of zeros."""
    chunks = []
    for name, r in lay.regions.items():
        raw = np.zeros(isa.pad(r.size), np.uint8)
        if name in data:
            b = np.ascontiguousarray(data[name]).view(np.uint8).reshape(-1)
            if b.size > r.size:
                raise AssertionError(f"{name}: {b.size} bytes in a {r.size}-byte region")
            raw[:b.size] = b
        chunks.append((r.addr, raw.tobytes()))
    # merge adjacent regions into runs that hold data and runs of zeros (KV caches,
    # buffers), so that a host whose SRAM is known to be zero may skip the latter
    runs: list = []
    for addr, raw in chunks:
        zero = not any(raw)
        if runs and runs[-1][2] == zero and runs[-1][0] + len(runs[-1][1]) == addr:
            runs[-1][1].extend(raw)
        else:
            runs.append([addr, bytearray(raw), zero])
    return [(addr, bytes(raw)) for addr, raw, _ in runs]


def _check_source(source):
    if isinstance(source, QuantizedModel):
        return source
    if isinstance(source, Checkpoint):
        return quantize(source)
    raise TypeError(f"`source` must be a Checkpoint or a QuantizedModel, not "
                    f"{type(source).__name__}")


def _default_batches(context: int, isa) -> int:
    """Prefill batches of M rows in flight by default: `DEFAULT_PREFILL_BATCHES`, or fewer
    when the context holds fewer batches."""
    return min(DEFAULT_PREFILL_BATCHES, -(-context // isa.max_m))


def _place(qm, isa, config, context, batches, kvapp=False):
    """Place with `batches` prefill batches, or (None) the most of 16, 8, .. 1 that fit."""
    w, h = config.mesh_width, config.mesh_height
    if batches is not None:
        return place(qm, isa, w, h, context, batches, kvapp)
    most = _default_batches(context, isa)
    for b in sorted({most, *(x for x in (8, 4, 2) if x < most)}, reverse=True):
        try:
            return place(qm, isa, w, h, context, b, kvapp)
        except FitError:
            pass
    return place(qm, isa, w, h, context, 1, kvapp)


def _compile(qm: QuantizedModel, config: ChipConfig, context: int,
             batches: int | None = None, placement: str = "pipeline",
             kvapp: bool = False) -> CompiledModel:
    isa = config.isa_config()
    c = qm.config
    # checks both placements need (their programs share the loop nest and the matrix unit)
    if config.loop_depth < 4:
        raise FitError(f"the programs nest 4 hardware loops (batches, rows, KV heads, query "
                       f"heads), but loop_depth is {config.loop_depth}",
                       [Fit((("loop_depth", "4"),))])
    over = [(name, k) for name, k in (("dim", c.dim), ("hidden_dim", c.hidden_dim))
            if k > isa.k_max]
    if over:
        # the largest reduction length, so that the one suggestion fits every matrix
        need = max(c.dim, c.hidden_dim)
        what = " and ".join(f"{name} {k}" for name, k in over)
        raise FitError(f"the model's {what} exceed{'s' * (len(over) == 1)} the matrix unit's "
                       f"k_max {isa.k_max}", [Fit((("k_max", str(need)),))])
    if placement == "tensor":
        return _compile_tensor(qm, config, context, batches, kvapp)
    pl = _place(qm, isa, config, context, batches, kvapp)
    programs, entries, sources = {}, {}, {}
    for xy, lay in pl.tiles.items():
        if not lay.c_limit_ok():
            raise FitError(f"tile {xy}: static data addressed through the 17-bit `c` "
                           f"immediate lies beyond 128 KiB")
        text = tile_program(qm, isa, pl, lay, context)
        sym: dict = {}
        words = _assemble(text, sym, xy, config)
        programs[xy], sources[xy] = words, text
        entries[xy] = {k: v for k, v in sym.items() if k.startswith("m") and k[1:2].isdigit()}
    xy = max(programs, key=lambda t: len(programs[t]))
    if len(programs[xy]) > config.imem_words:
        n = len(programs[xy])
        raise FitError(f"the program of tile {xy} ("
                       f"{' + '.join(s.name for s in pl.tiles[xy].stages)}) needs {n} "
                       f"instructions, but the instruction memory holds {config.imem_words}",
                       _imem_fit(n, config))
    return CompiledModel(config, qm, c, context, _images(qm, isa, pl, context), programs,
                         entries, pl, sources)


def _assemble(text: str, sym: dict, xy, config: ChipConfig) -> list:
    """Assemble tile `xy`'s program; an operand the instruction set cannot encode (an
    address offset beyond its 17-bit reach, say, with a large word size padding every row)
    is a `FitError` of this configuration, not an assembler error."""
    try:
        return assemble(text, symbols_out=sym)
    except AsmError as e:
        raise FitError(f"the program of tile {xy} cannot be encoded for this configuration "
                       f"({config}): {e}") from None


def _compile_tensor(qm: QuantizedModel, config: ChipConfig, context: int,
                    batches: int | None, kvapp: bool = False) -> CompiledModel:
    """`_compile` for ``placement="tensor"`` (`chipotle.compiler.tensor`), after the checks
    `_compile` makes for both placements."""
    from .tensor import place_tensor, scores_pipelined, tensor_images, tensor_program
    isa = config.isa_config()
    c = qm.config
    if config.n_counters < 5:
        raise FitError(f"the tensor placement uses 5 counters, but n_counters is "
                       f"{config.n_counters}", [Fit((("n_counters", "5"),))])
    if batches is None:
        batches = _default_batches(context, isa)
    # the gate packed in pairs (`TensorRoles.gpair`), the prefill rows on the helpers
    # (`TensorRoles.prow`) and the software-pipelined scores take more instructions: without
    # the first, then also without the second, then without all three, if the instruction
    # memory is too small for them
    first = None                 # the instructions the first (fastest) programs need
    for gpairs, prows, pipelined in ((True, True, True), (False, True, True),
                                     (False, False, True), (False, False, False)):
        try:
            pl, roles = place_tensor(qm, isa, config.mesh_width, config.mesh_height,
                                     context, batches, kvapp, prows=prows, gpairs=gpairs)
        except FitError as e:    # the SRAM holds the programs that are too long, not these
            if first is None:
                raise
            raise FitError(f"the tensor placement's longest program needs {first} "
                           f"instructions, but the instruction memory holds "
                           f"{config.imem_words}; the programs without the gate packed in "
                           f"pairs are shorter, but with them {e}", _imem_fit(first, config)
                           ) from None
        programs, entries, sources = {}, {}, {}
        for xy, lay in pl.tiles.items():
            text = tensor_program(qm, isa, pl, roles, lay, context, pipelined)
            sym: dict = {}
            words = _assemble(text, sym, xy, config)
            programs[xy], sources[xy] = words, text
            entries[xy] = {k: v for k, v in sym.items()
                           if k.startswith("m") and k[1:2].isdigit()}
        longest = max(len(w) for w in programs.values())
        if first is None:
            best = roles         # the roles of the first programs, for what the others lack
        if longest <= config.imem_words:
            break
        if first is None:
            first = longest
    if longest > config.imem_words:
        raise FitError(f"the tensor placement's longest program needs {longest} "
                       f"instructions, but the instruction memory holds {config.imem_words}",
                       _imem_fit(longest, config))
    data = tensor_images(qm, isa, pl, roles, context)
    images = {xy: _chunks(lay, data[xy], isa) for xy, lay in pl.tiles.items()}
    left = [name for (name, _), lost in zip(_IMEM_VARIANTS, (
        bool(best.gpair) and not roles.gpair, bool(best.prow) and not roles.prow,
        not pipelined and any(scores_pipelined(roles, xy, isa) for xy in roles.kv)),
        strict=True) if lost]
    return CompiledModel(config, qm, c, context, images, programs, entries, pl, sources,
                         tuple(left), first if left else 0)


def _fits(qm, config, context, kvapp=False) -> bool:
    """Whether the pipeline placement succeeds (programs are not generated)."""
    c, isa = qm.config, config.isa_config()
    if max(c.dim, c.hidden_dim) > isa.k_max:
        return False
    try:
        place(qm, isa, config.mesh_width, config.mesh_height, context, kvapp=kvapp)
        return True
    except FitError:
        return False


def _imem_fit(words: int, config: ChipConfig) -> list:
    """The instruction memory that holds a program of `words` instructions (a multiple of
    128 words), as a one-`Fit` list; empty when `config`'s gateware cannot take one that large
    (``ChipConfig`` refuses it: the network interface's register map reaches 65,536 words)."""
    n = -(-words // 128) * 128
    try:
        config.replace(imem_words=n)
    except ValueError:
        return []
    return [Fit((("imem_words", str(n)),))]


def _verified(qm, config, context, placement="pipeline", kvapp=False,
              dropped: dict | None = None) -> tuple | None:
    """Compile for real; return ``()`` if it fits, the extra ``(("imem_words", N),)`` it
    needs (the instruction memory the refusal suggests), or None.  With `dropped`, a fit
    as given stores in ``dropped[config.sram_bytes]`` the program variants it left out for
    the instruction memory (`CompiledModel.imem_dropped`)."""
    try:
        cm = _compile(qm, config, context, None, placement, kvapp)
        if dropped is not None:
            dropped[config.sram_bytes] = cm.imem_dropped
        return ()
    except FitError as e:
        more = [f for f in e.fits if [k for k, _ in f.config] == ["imem_words"]]
        if not more:
            return None
        try:
            _compile(qm, more[0].apply(config)[0], context, None, placement, kvapp)
        except FitError:
            return None
        return more[0].config


def _tensor_places(qm: QuantizedModel, config: ChipConfig, context: int, kvapp: bool) -> bool:
    """Whether the tensor placement's regions fit (programs are not generated)."""
    from .tensor import place_tensor
    isa = config.isa_config()
    try:
        place_tensor(qm, isa, config.mesh_width, config.mesh_height, context,
                     _default_batches(context, isa), kvapp)
        return True
    except FitError:
        return False


#: The tensor placement's optional schemes (`TensorRoles` attributes), by name, in the order
#: the placement drops them when SRAM is short (docs/architecture.md), each with the phases
#: it speeds up: ``prow`` prefill batches of more than one row; ``wsplit`` only the decode
#: steps whose weighted sums have a tail (``"long decode"``: from
#: `chipotle.compiler.tensor.WSUM_SPLIT_FROM` keys on, `_wsum_split`); ``vsplit`` the decode
#: steps' scores; ``kvp``, ``aslot`` and ``gslot`` every step.
_SCHEMES = (("prow", "a prefill batch's last rows on the helpers", "prefill"),
            ("wsplit", "the weighted sums split with the partners", "long decode"),
            ("vsplit", "the V partner's scores", "decode"),
            ("kvp", "the K / V partners", "prefill and decode"),
            ("aslot", "the attention output's slices", "prefill and decode"),
            ("gslot", "the gate's slices", "prefill and decode"))


#: The tensor placement's longer program variants, by name, in the order `_compile_tensor`
#: leaves them out when the instruction memory is short, each with the phases it speeds up
#: (the software-pipelined scores overlap a batch's rows: one row in decode).
_IMEM_VARIANTS = (("the gate packed in pairs", "prefill and decode"),
                  ("a prefill batch's last rows on the helpers", "prefill"),
                  ("the software-pipelined scores", "prefill"))


def _without(names, table, context: int | None = None) -> str:
    """``"without <names>: slower <phases>"`` for names of `_SCHEMES` or `_IMEM_VARIANTS`
    (rows ending in the name and the phases it speeds up).  A ``"long decode"`` phase
    without a ``"decode"`` one reads ``decode from position P on``, ``P = WSUM_SPLIT_FROM -
    1`` (a decode step at position ``P`` has ``WSUM_SPLIT_FROM`` keys: ``"slower prefill,
    and decode from position 239 on"``); with a `context` of at most ``P`` positions, which
    no decode step reaches there, it adds ``", past this context of N positions"``."""
    from .tensor import WSUM_SPLIT_FROM
    phases = {p for *_, name, ph in table if name in names for p in ph.split(" and ")}
    words = " and ".join(p for p in ("prefill", "decode") if p in phases)
    if "long decode" in phases and "decode" not in phases:
        first = WSUM_SPLIT_FROM - 1
        past = (f", past this context of {context} positions"
                if context is not None and context <= first else "")
        words += f"{', and ' if words else ''}decode from position {first} on{past}"
    return f"without {', '.join(names)}: slower {words}"


def _tensor_schemes(qm: QuantizedModel, config: ChipConfig, context: int,
                    kvapp: bool) -> tuple | None:
    """The names of the optional schemes the tensor placement keeps (None: it does not fit)."""
    from .tensor import place_tensor
    isa = config.isa_config()
    try:
        _, roles = place_tensor(qm, isa, config.mesh_width, config.mesh_height, context,
                                _default_batches(context, isa), kvapp)
    except FitError:
        return None
    return tuple(name for attr, name, _ in _SCHEMES if getattr(roles, attr))


def _schemes_note(qm: QuantizedModel, config: ChipConfig, context: int, kib: int,
                  kvapp: bool, keep_context: int | None = None) -> tuple[str, Fit | None]:
    """For a suggested ``sram_kib=kib`` (a size `config` takes): a note naming the schemes
    it drops that more SRAM (up to the 128 KiB the 17-bit offsets reach) would keep, and the
    smallest such SRAM as a second `Fit` (verified by compiling); ``("", None)`` when it
    drops none.  Only sizes `config` takes (``ChipConfig.sram_kib_sizes``) are tried.  The
    second `Fit` keeps every scheme at `keep_context` positions (default `context`)."""
    sizes = config.sram_kib_sizes(kib, max(kib, (1 << OFF_BITS) // 1024))
    have = _tensor_schemes(qm, config.replace(sram_bytes=kib * 1024), context, kvapp)
    full = _tensor_schemes(qm, config.replace(sram_bytes=sizes[-1] * 1024), context, kvapp)
    if have is None or full is None or len(have) >= len(full):
        return "", None
    note = _without([name for name in full if name not in have], _SCHEMES, context)
    if keep_context is not None and keep_context != context:
        context = keep_context
        full = _tensor_schemes(qm, config.replace(sram_bytes=sizes[-1] * 1024), context,
                               kvapp)
        if full is None:
            return note, None
    lo, hi = 1, len(sizes) - 1                # smallest SRAM keeping every scheme (monotone)
    while lo < hi:
        mid = (lo + hi) // 2
        if len(_tensor_schemes(qm, config.replace(sram_bytes=sizes[mid] * 1024), context,
                               kvapp) or ()) >= len(full):
            hi = mid
        else:
            lo = mid + 1
    extra = _verified(qm, config.replace(sram_bytes=sizes[lo] * 1024), context, "tensor",
                      kvapp)
    return note, None if extra is None else Fit((("sram_kib", str(sizes[lo])), *extra),
                                                note=_imem_note(config, extra, "every scheme"))


def _imem_note(config: ChipConfig, extra: tuple, note: str = "") -> str:
    """`note`, joined with why a suggestion that fixes another limit also raises
    ``imem_words`` (``extra``, from `_verified`): the programs compiled for it outgrow the
    instruction memory `config` gives (a refusal naming only SRAM said nothing of it)."""
    more = dict(extra).get("imem_words")
    why = (f"imem_words={more}: its programs outgrow the {config.imem_words:,} instruction "
           f"words given" if more else "")
    return "; ".join(filter(None, (note, why)))


def _bigger_mesh(config: ChipConfig, upto: int, places, verified) -> Fit | None:
    """The mesh with the fewest tiles (sides grown up to ``upto - 1``, neither side shrunk;
    among equal counts the squarer, then the wider) on which `places` holds and `verified`
    compiles, as a ``mesh=WxH[,imem_words=N]`` `Fit`; None if none.  E.g. a model needing 3
    tiles on a 1 x 1 mesh gets ``mesh=3x1``, not ``mesh=2x2``."""
    w0, h0 = config.mesh_width, config.mesh_height
    shapes = sorted(((w, h) for w in range(w0, max(upto, w0 + 1))
                     for h in range(h0, max(upto, h0 + 1)) if (w, h) != (w0, h0)),
                    key=lambda wh: (wh[0] * wh[1], abs(wh[0] - wh[1]), -wh[0]))
    for w, h in shapes:
        cand = config.replace(mesh_width=w, mesh_height=h)
        if places(cand):
            extra = verified(cand)
            if extra is not None:
                return Fit((("mesh", f"{w}x{h}"), *extra), note=_imem_note(config, extra))
    return None


#: How far past the SRAM a refusal names the fit searches look, KiB: the placement's need
#: is one tile's, and the programs' alignment or another tile can take a little more.
SRAM_SLACK_KIB = 4
#: At most this many sizes are compiled by a search of the smallest SRAM (each compile
#: takes about a second for stories260K).
SRAM_COMPILES = 6


def _smallest_sram(config: ChipConfig, lo_kib: int, hi_kib: int, places,
                   verified) -> list:
    """The smallest SRAMs from `lo_kib` to `hi_kib`, whole KiB, that compile: a list of
    ``(kib, extra)``, `extra` the instruction memory `verified` adds (``()`` if none).  The
    first is the smallest size that compiles; if it needs more instruction memory, the
    second (if any within the compiles left) is the smallest that compiles with the
    instruction memory as given.  Empty if none does within `SRAM_COMPILES` compiles.

    Every size the configuration takes (``ChipConfig.sram_kib_sizes``) in the bounds is
    tried in ascending order, by placement first (`places`, a few milliseconds) and then by
    compiling (`verified`), so the answer is the smallest that compiles even where the need
    is not monotone in the size (a larger SRAM can keep a scheme whose buffers then
    overflow another tile, so a size can fail between two that fit; with a small
    instruction memory the compiler packs the gate without pairs, in shorter programs and
    a larger layout)."""
    found, compiles = [], 0
    for kib in config.sram_kib_sizes(lo_kib, hi_kib):
        cand = config.replace(sram_bytes=kib * 1024)
        if not places(cand):
            continue
        extra = verified(cand)
        compiles += 1
        if extra is not None and (not found or extra == ()):
            found.append((kib, extra))
            if extra == ():
                break
        if compiles >= SRAM_COMPILES:
            break
    return found


def _suggest_tensor(qm: QuantizedModel, config: ChipConfig, context: int, message: str,
                    kvapp: bool = False) -> list:
    """Return configurations that fit the tensor placement (`Fit`): the largest shorter
    context (searched by placement, verified by compiling, with the instruction memory it
    needs if the configuration's is too small), the SRAM the refusal names
    (verified by compiling, a few KiB of alignment slack allowed; only sizes the configuration
    takes, ``ChipConfig.sram_kib_sizes``), a bigger mesh, or the pipeline placement on the
    same configuration."""
    tips = []
    if "bytes of SRAM" in message and context > 1:
        lo, hi = 0, context - 1              # largest context whose regions fit (monotone)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if _tensor_places(qm, config, mid, kvapp):
                lo = mid
            else:
                hi = mid - 1
        extra = _verified(qm, config, lo, "tensor", kvapp) if lo >= 1 else None
        if extra is not None:   # (at that context the programs may need more instructions)
            tips.append(Fit(extra, context=lo, note=_imem_note(config, extra)))
    m = re.search(r"needs ([\d,]+) bytes of SRAM", message)
    if m:
        need = int(m.group(1).replace(",", ""))
        need_kib = -(-need // 1024)
        dropped: dict = {}
        found = _smallest_sram(config, config.sram_bytes // 1024 + 1,
                               need_kib + SRAM_SLACK_KIB,
                               lambda cand: _tensor_places(qm, cand, context, kvapp),
                               lambda cand: _verified(qm, cand, context, "tensor", kvapp,
                                                      dropped))
        for kib, extra in found:
            note, more = _schemes_note(qm, config, context, kib, kvapp)
            left = dropped.get(kib * 1024, ()) if extra == () else ()
            if left:                 # fits with the instruction memory as given, slower
                note = "; ".join(filter(None, (note, _without(left, _IMEM_VARIANTS))))
            if kib * 1024 < need:    # the need named is the refused size's layout's
                note = "; ".join(filter(None, (note, f"less than the {need:,} bytes named: "
                                                      f"the tiles lay out smaller at this "
                                                      f"size")))
            tips.append(Fit((("sram_kib", str(kib)), *extra), note=_imem_note(config, extra,
                                                                              note)))
            if more and more not in tips:
                tips.append(more)
    if not tips:                             # a bigger mesh: every tile holds a smaller share
        tip = _bigger_mesh(config, 9, lambda cand: _tensor_places(qm, cand, context, kvapp),
                           lambda cand: _verified(qm, cand, context, "tensor", kvapp))
        if tip:
            tips.append(tip)
    if _fits(qm, config, context) and _verified(qm, config, context) == ():
        # the pipeline gives each stage its tile: in decode one tile works at a time
        tips.append(Fit(placement="pipeline", note="slower: one tile at a time"))
    return tips


def _stages_note(qm: QuantizedModel, config: ChipConfig, context: int, kvapp: bool) -> str:
    """For a pipeline placement on `config` that fits: ``"up to N stages a tile"`` when
    some tile holds more than one of the model's stages (why the SRAM a suggestion names
    can exceed what the refusal says one stage needs), else ``""``."""
    pl = place(qm, config.isa_config(), config.mesh_width, config.mesh_height, context,
               kvapp=kvapp)
    most = max(len(lay.stages) for lay in pl.tiles.values())
    return f"up to {most} stages a tile" if most > 1 else ""


def _suggest(qm: QuantizedModel, config: ChipConfig, context: int,
             kvapp: bool = False) -> list:
    """Return configurations that fit the pipeline placement (`Fit`), with `kvapp` as
    compiled: a shorter context, more SRAM (the smallest size the configuration takes that
    fits, ``ChipConfig.sram_kib_sizes``), a bigger mesh."""
    tips = []
    if _fits(qm, config, context, kvapp):    # the SRAM suffices: the programs are too long
        extra = _verified(qm, config, context, "pipeline", kvapp)
        if extra:
            tips.append(Fit(extra))
        lo = hi = 0
    else:
        lo, hi = 0, context - 1              # largest context that fits (monotone)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _fits(qm, config, mid, kvapp):
            lo = mid
        else:
            hi = mid - 1
    if lo >= 1 and _fits(qm, config, lo, kvapp):
        extra = _verified(qm, config, lo, "pipeline", kvapp)
        if extra is not None:
            tips.append(Fit(extra, context=lo, note=_imem_note(config, extra)))
    sizes = config.sram_kib_sizes(config.sram_bytes // 1024 + 1)   # larger sizes it takes
    if (not tips and sizes
            and _fits(qm, config.replace(sram_bytes=sizes[-1] * 1024), context, kvapp)):
        lo, hi = 0, len(sizes) - 1           # smallest SRAM that fits (monotone)
        while lo < hi:
            mid = (lo + hi) // 2
            if _fits(qm, config.replace(sram_bytes=sizes[mid] * 1024), context, kvapp):
                hi = mid
            else:
                lo = mid + 1
        found = _smallest_sram(config, sizes[lo], sizes[-1],
                               lambda cand: _fits(qm, cand, context, kvapp),
                               lambda cand: _verified(qm, cand, context, "pipeline", kvapp))
        for kib, extra in found:
            tips.append(Fit((("sram_kib", str(kib)), *extra),
                            note=_stages_note(qm, config.replace(sram_bytes=kib * 1024),
                                              context, kvapp)))
    tip = _bigger_mesh(config, 16, lambda cand: _fits(qm, cand, context, kvapp),
                       lambda cand: _verified(qm, cand, context, "pipeline", kvapp))
    if tip:
        tips.append(tip)
    return tips


def _dominates(g: Fit, f: Fit) -> bool:
    """Whether suggestion `g` changes a part of what `f` changes, to the same values, and
    nothing else (so `f` gives up more for nothing): its configuration keys a subset of
    `f`'s, its context the whole one or `f`'s, its placement `f`'s; not `f` itself."""
    if g.placement != f.placement or (g.context is not None and g.context != f.context):
        return False
    if not set(g.config) <= set(f.config):
        return False
    return set(g.config) < set(f.config) or (g.context is None and f.context is not None)


#: `ChipConfig` keys whose refusal names the one value the programs need (`_compile`,
#: `_compile_tensor`): `compile_model` compiles the configuration with that value instead of
#: searching sizes, and suggests it with whatever that compile still needs.
_PARAMETER_FIXES = frozenset({"k_max", "loop_depth", "n_counters"})


def compile_model(source, config: ChipConfig, context: int | None = None,
                  prefill_batches: int | None = None, placement: str = "pipeline",
                  kvapp: bool | None = None, on_search=None) -> CompiledModel:
    """Place a llama2 model on the mesh and emit its tile programs.

    Parameters
    ----------
    source : chipotle.model.Checkpoint or QuantizedModel
        A checkpoint is quantised with `chipotle.golden.quantize` (default calibration).
    config : ChipConfig
    context : int, optional
        Positions of the KV caches (default: the model's ``seq_len``).
    prefill_batches : int, optional
        Batches of M tokens one `CompiledModel.prefill` step may carry (each pipeline stage
        has an input slot per batch).  Default: the most of 16, 8, 4, 2, 1 that fit (at most
        ``context / M``).
    placement : {"pipeline", "tensor"}
        ``"pipeline"``: a pipeline of stages along a snake path (`chipotle.compiler.place`);
        ``"tensor"``: every layer split over every tile (`chipotle.compiler.tensor`), the
        batches of a step run one after the other.
    kvapp : bool, optional
        Append K and V to the caches with ``kvapp`` (the tile's KV store generates the
        addresses and refuses an append past its capacity), the caches laid out as
        `chipotle.isa.kv.KvLayout` (`CompiledModel.kv_layouts`, which the host writes into
        every listed tile's KV registers before the first step: `chipotle.driver.Driver.load`
        does).  False: the programs store K and V themselves.  Default: True for the tensor
        placement, False for the pipeline placement (whose programs grow with ``kvapp``:
        the compiler's small model on ``CONFIGS["small"]`` would need ``imem_words=640``).
    on_search : callable, optional
        Called with no arguments when the model does not fit as asked, just before the
        search for the configurations that would (the `FitError`'s suggestions: up to a
        minute or more for stories260K, which compiles each size it tries), so that a
        command can say why it is quiet.  Not called when the model fits, nor for a refusal
        that needs no search (`context` past ``seq_len``, not a positive integer).

    Returns
    -------
    CompiledModel

    Raises
    ------
    FitError
        If `context` exceeds ``seq_len``, or the model does not fit the configuration: the
        message names what does not fit and configurations that would.
    TypeError
        If `source` is neither a checkpoint nor a quantised model.
    ValueError
        If `placement` is neither ``"pipeline"`` nor ``"tensor"``.
    """
    if placement not in ("pipeline", "tensor"):
        raise ValueError(f"`placement` must be \"pipeline\" or \"tensor\", not {placement!r}")
    if kvapp is None:
        kvapp = placement == "tensor"
    qm = _check_source(source)
    c = qm.config
    if context is None:
        context = c.seq_len
    if not isinstance(context, (int, np.integer)) or context < 1:
        raise FitError(f"`context` must be a positive integer, not {context!r}")
    if context > c.seq_len:
        raise FitError(f"context {context} exceeds the model's seq_len {c.seq_len} (its RoPE "
                       f"table and training length): use --context {c.seq_len} or less")
    try:
        if prefill_batches is not None and (not isinstance(prefill_batches, (int, np.integer))
                                            or prefill_batches < 1):
            raise FitError(f"`prefill_batches` must be a positive integer, not "
                           f"{prefill_batches!r}")
        return _compile(qm, config, int(context), prefill_batches, placement, bool(kvapp))
    except FitError as e:
        if len(e.fits) == 1 and e.fits[0].config and e.fits[0].context is None \
                and e.fits[0].placement is None \
                and {k for k, _ in e.fits[0].config} <= _PARAMETER_FIXES:
            # a unit parameter below what the programs need (k_max, loop_depth, n_counters):
            # no size the search tries changes it, so the configuration with it fixed is
            # compiled instead, and what that still lacks is added to the suggestion
            fix = e.fits[0]
            try:
                compile_model(qm, fix.apply(config)[0], context, prefill_batches, placement,
                              kvapp, on_search)
            except FitError as e2:
                raise FitError(f"{e.what}; with {fix.config_text()}, {e2.what}",
                               [Fit(fix.config + f.config, f.context, f.placement, f.note)
                                for f in e2.fits]) from None
            raise FitError(e.what, e.fits) from None
        if on_search is not None:
            on_search()
        if placement == "tensor":
            tips = _suggest_tensor(qm, config, int(context), e.what, kvapp)
        else:
            tips = _suggest(qm, config, int(context), kvapp)
        fits = list(e.fits) + [f for f in tips if f not in e.fits]
        # a suggestion that changes more than another one does, to the same values (a
        # bigger mesh with the same imem_words; a shorter context beside the same change at
        # the whole context), is no suggestion
        fits = [f for f in fits if not any(_dominates(g, f) for g in fits)]
        if not fits:
            wide = (f"; every row is padded to whole {config.word_bytes}-byte words "
                    f"(W={config.word_bytes}): a smaller W packs them tighter"
                    if config.word_bytes > 8 else "")
            raise FitError(f"{e.what}; no configuration that fits found nearby (a shorter "
                           f"context, more SRAM or more tiles: docs/architecture.md){wide}") \
                from None
        raise FitError(e.what, fits) from None
