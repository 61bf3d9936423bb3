"""The driver: load a compiled model onto a chip and run prefill and decode steps on it.

`Driver` is written against the `Backend` protocol only, so the same host code runs on the
ISA simulator and on the RTL under cocotb.  A step follows the compiler's `StepPlan`: host
SRAM writes (the tokens), starts, then the doorbell that ends the step; then the on-chip
argmax token and, when asked, the int32 logits are read back.

`Driver.generate` is ``chipotle.generate.generate`` (llama2.c's loop, the same stop rules,
`StopReason`, `Step` events and `Sampler`) with one difference the hardware needs: the prompt
is prefilled in batches of up to M tokens (the compiler's ``step`` with ``m`` rows) rather
than one position at a time, so the loop cannot be shared as is.  Greedy decoding
(``temperature == 0``) takes the chip's argmax; otherwise the logits are read back,
dequantised (``GoldenModel.logit_frac_bits``) and sampled with `chipotle.sampling.Sampler`
exactly as the golden backend does.

Members
-------
Driver
    The driver.
StepResult, GenerateResult
    What a step and a generation return (tokens, cycles, performance counters).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..generate import PromptTooLongError, Step, StopReason
from ..golden import GoldenModel
from ..sampling import Sampler
from ..tokenizer import BOS, EOS
from .backend import (
    Backend,
    DoorbellTimeout,
    TileFault,
    UnexpectedDoorbell,
    UnfinishedStep,
    read_tiles,
)

__all__ = ["Driver", "StepResult", "GenerateResult"]

_MASK32 = 0xFFFFFFFF


@dataclass
class StepResult:
    """The outcome of one step (``m`` consecutive positions).

    Attributes
    ----------
    tokens : tuple of int
        The tokens fed.
    pos : int
        Position of the first one.
    token : int
        The chip's argmax token after the last row.
    logits : numpy.ndarray or None
        int32, shape ``(vocab_size,)``: the last row's logits, when read back.
    cycles : int
        Cycles from the first start to the doorbell (RTL clock cycles; isasim estimate).
    perf : dict of str to int
        Performance counters summed over tiles (increments during the step).
    perf_per_tile : dict
        ``(x, y) -> {name: increment}``.
    """

    tokens: tuple[int, ...]
    pos: int
    token: int
    logits: np.ndarray | None
    cycles: int
    perf: dict = field(default_factory=dict)
    perf_per_tile: dict = field(default_factory=dict)


@dataclass
class GenerateResult:
    """The outcome of `Driver.generate`.

    Attributes
    ----------
    tokens : tuple of int
        The whole sequence: prompt (as given) and generated tokens.
    text : str
        Decoded text of the sequence after the first token ("" without a tokenizer).
    stop_reason : StopReason
        ``STEPS``, ``BOS_EOS`` or ``CONTEXT``.
    prompt_tokens, generated : int
        Number of prompt tokens and of sampled tokens (a stopping BOS/EOS not counted).
    steps : list of StepResult
        Every step run: prefill batches first, then one per decoded position.
    prefill_steps : int
        How many of `steps` are prefill batches.
    seconds : float
        Wall time.
    seed : int
        The sampler's seed (the time-based one when none was given).
    phase_perf : dict
        With ``Driver(perf="phase")``: ``{"prefill": counters, "decode": counters}``, each
        summed over tiles, read at the phase boundaries (the steps' own ``perf`` is empty).
    """

    tokens: tuple[int, ...]
    text: str
    stop_reason: StopReason
    prompt_tokens: int
    generated: int
    steps: list
    prefill_steps: int
    seconds: float
    seed: int = 0
    phase_perf: dict = field(default_factory=dict)

    @property
    def ttft_cycles(self) -> int:
        """Time to first token: cycles of the prefill steps."""
        return sum(s.cycles for s in self.steps[:self.prefill_steps])

    @property
    def decode_cycles(self) -> list[int]:
        """Cycles of each decode step."""
        return [s.cycles for s in self.steps[self.prefill_steps:]]

    @property
    def decode_cycles_per_token(self) -> float:
        """Mean cycles of a decode step (0 if none ran)."""
        d = self.decode_cycles
        return sum(d) / len(d) if d else 0.0

    def perf_sum(self, which: str = "all") -> dict:
        """Return counters summed over steps: ``"prefill"``, ``"decode"`` or ``"all"``.

        Raises
        ------
        KeyError
            If `which` is none of the three.
        """
        if self.phase_perf:
            parts = [self.phase_perf[ph]
                     for ph in (("prefill", "decode") if which == "all" else (which,))]
        else:
            parts = [s.perf for s in {"prefill": self.steps[:self.prefill_steps],
                                      "decode": self.steps[self.prefill_steps:],
                                      "all": self.steps}[which]]
        out: dict = {}
        for counters in parts:
            for k, v in counters.items():
                out[k] = out.get(k, 0) + v
        return out


class Driver:
    """Run a compiled model on a backend.

    Parameters
    ----------
    compiled : chipotle.compiler.CompiledModel
        Images, programs and the step plans, for ``backend.config``.
    backend : Backend
        `IsaSimBackend` or ``RtlBackend``.
    tokenizer : chipotle.tokenizer.Tokenizer, optional
        For the text of `generate`.
    perf : bool or {"step", "phase"}
        ``True`` or ``"step"`` (default): read every tile's performance counters around each
        step (two register reads per tile and step: on the 4 x 4 RTL about 300 cycles of
        host-link traffic per step, besides the step's own cycles, and their handling).
        ``"phase"``: `generate` reads them only before the prefill, between prefill and
        decode and at the end
        (`GenerateResult.phase_perf`; `step` and `run_plan` read none): the sums then also
        span the host's traffic between steps, which only ``cycles`` (every clock) counts.
        ``False``: never.
    incremental : bool
        ``True`` (default): a step's host writes (the step block of every tile,
        ``StepPlan.writes``) send only the words that differ from what the driver wrote at
        the same address since `load` (one packet per run of changed words, runs less than
        `_MERGE_GAP` words apart joined).  The SRAM then holds the same bytes as after a
        full write, provided nothing else writes those ranges: the compiler's programs only
        read the step block (``tb/driver/test_driver_isasim.py`` compares every tile's whole
        SRAM after each step with full writes, and reads the step blocks back).  A decode
        step of the 4 x 4 tensor placement then writes 2 words per tile instead of 42.  A
        step whose writes fail part way (an exception from the backend) leaves the record
        stale: `load` again.  ``False``: every write in full.
    timeout_cycles : int
        Longest a step may take before it is declared hung (default 5,000,000).
    check : bool
        ``True`` (default): after each step's doorbell, read every tile's ``STATUS`` and
        synchronisation counters and raise `UnfinishedStep` unless every tile the step
        started is halted, every counter is zero and no other doorbell has arrived since
        (`TileFault` for a tile in ERROR).  On
        the RTL these reads travel with the performance counters' (``perf`` per step), two
        more per tile: on the 4 x 4 chip about 350 cycles of host-link traffic per step
        (mostly the 16 counter words of each tile; `make sim STEPS=64` at 0b9b88e, session
        27: 18.2-18.6 s of simulation with the check, 19.0 s without, within the runs'
        spread).  Other
        backends (``UartBackend``) read them tile by tile.
        ``False``: trust the doorbell (a faulty program's leftovers then show, if at all,
        in a later step).

    Raises
    ------
    ValueError
        If the compiled model's configuration is not the backend's, or `perf` is not one of
        the values above.
    """

    def __init__(self, compiled, backend: Backend, tokenizer=None, *, perf=True,
                 incremental: bool = True, timeout_cycles: int = 5_000_000,
                 check: bool = True):
        if not (isinstance(perf, bool) or perf in ("step", "phase")):
            raise ValueError(f"`perf` must be True, False, \"step\" or \"phase\", not {perf!r}")
        if compiled.config != backend.config:
            raise ValueError(f"the model was compiled for {compiled.config}, the backend is "
                             f"{backend.config}")
        self.compiled = compiled
        self.backend = backend
        self.tokenizer = tokenizer
        self.perf = perf
        self.timeout_cycles = timeout_cycles
        self.incremental = bool(incremental)
        self.check = bool(check)
        self.loaded = False
        self._last_perf = None
        self._filled = 0             # positions 0 .. _filled - 1 are in the chip's KV cache
        self._written: dict = {}     # (xy, byte address) -> the bytes last written there

    @property
    def config(self):
        """The chip configuration."""
        return self.backend.config

    # -- loading ---------------------------------------------------------------------------------

    def load_bytes(self) -> int:
        """Return the bytes `load` sends: images plus programs (16 bytes an instruction)."""
        img = sum(len(d) for parts in self.compiled.images.values() for _, d in parts)
        return img + 16 * sum(len(p) for p in self.compiled.programs.values())

    async def load(self, progress: Callable[[int, int], None] | None = None, *,
                   skip_zero: bool = False, backdoor: bool = False) -> None:
        """Reset the tiles, write every image and program through the host link, and set
        the KV layout registers of the tiles whose programs append with ``kvapp``
        (``CompiledModel.kv_layouts``).

        Parameters
        ----------
        progress : callable, optional
            Called as ``progress(done_bytes, total_bytes)`` after each piece.
        skip_zero : bool
            Leave out all-zero words (only right when the SRAMs are known to be zero, as
            after the RTL's configuration); ignored by backends without it.
        backdoor : bool
            Write the SRAM images straight into the simulator's memories
            (``backdoor_write_sram``, RTL backend) instead of through the host link; the
            programs still go through the host link.

        Raises
        ------
        ValueError
            If ``backdoor`` is asked of a backend without one.
        """
        # the arguments first: a refused load leaves the chip and the driver as they were
        write = self.backend.write_sram
        if backdoor:
            write = getattr(self.backend, "backdoor_write_sram", None)
            if write is None:
                raise ValueError(f"{type(self.backend).__name__} has no back-door SRAM load")
        total, done = self.load_bytes(), 0
        self._last_perf = None
        self._written = {}
        self._filled = 0
        self.loaded = False
        await self.backend.reset()
        kw = {"skip_zero": True} if skip_zero and _takes_skip_zero(write) else {}
        for xy, parts in self.compiled.images.items():
            for addr, data in parts:
                await write(xy, addr, data, **kw)
                done += len(data)
                if progress:
                    progress(done, total)
        for xy, words in self.compiled.programs.items():
            await self.backend.write_imem(xy, words)
            done += 16 * len(words)
            if progress:
                progress(done, total)
        for xy, layout in getattr(self.compiled, "kv_layouts", {}).items():
            await self.backend.set_kv_layout(xy, layout)
        self.loaded = True

    # -- one step --------------------------------------------------------------------------------

    async def _perf_all(self) -> dict:
        got = await read_tiles(self.backend, self.config.tiles, perf=True, state=False)
        return {xy: d["perf"] for xy, d in got.items()}

    @staticmethod
    def _check_at_rest(got: dict, started, bells=()) -> None:
        """Raise `TileFault` or `UnfinishedStep` unless every tile of ``started`` is halted,
        every counter of every tile in ``got`` (`read_tiles` with ``state``) is zero and no
        doorbell (``bells``: ``(xy, code)`` still queued) rang after the step's own."""
        problems = {}
        for xy, d in got.items():
            s = d["status"]
            if s.state == "error":
                raise TileFault(xy, s.error, s.pc, "found after the step's doorbell")
            what = []
            if xy in started and s.state != "halted":
                what.append(s.describe())
            left = [f"{c}={n}" for c, n in enumerate(d["counters"]) if n]
            if left:
                what.append("counters " + " ".join(left))
            what += [f"doorbell {code} rang after the step's own"
                     for bxy, code in bells if tuple(bxy) == xy]
            if what:
                problems[xy] = ", ".join(what)
        if problems:
            raise UnfinishedStep(problems)

    async def _diagnose(self, timeout: DoorbellTimeout):
        for xy in self.config.tiles:
            s = await self.backend.status(xy)
            if s.state == "error":
                return TileFault(xy, s.error, s.pc, "found after " + str(timeout))
        return timeout

    async def step(self, tokens: Sequence[int], pos: int, *, logits: bool = False
                   ) -> StepResult:
        """Run ``len(tokens)`` consecutive positions from ``pos`` (1 .. M tokens).

        Positions ``0 .. pos - 1`` must be in the chip's KV cache: run by earlier steps since
        `load` (as `GoldenModel.forward_batch`; a step at an earlier position starts the
        sequence again from there).

        Parameters
        ----------
        tokens : sequence of int
            Token ids in ``[0, vocab_size)``.
        pos : int
            Position of ``tokens[0]``; ``pos + len(tokens) <= context``.
        logits : bool
            Read the last row's int32 logits back.

        Returns
        -------
        StepResult

        Raises
        ------
        ValueError
            If there is no token or more than M, a token is outside the vocabulary, a
            position is negative or beyond the context, or ``pos`` skips positions the KV
            cache does not hold.
        RuntimeError
            If `load` has not run.
        TileFault
            If a tile stopped on an error (names the tile, the error code and the PC).
        DoorbellTimeout
            If the step's doorbell did not come within ``timeout_cycles``.
        UnexpectedDoorbell
            If another doorbell rang first (a step rings exactly one, ``StepPlan.done``).
        UnfinishedStep
            With ``check``: if after the doorbell a tile the step started is not halted, a
            synchronisation counter is not zero or another doorbell rang (names the tiles,
            their states and PCs, the counters and the doorbells).
        """
        tokens = tuple(int(t) for t in tokens)
        return await self.run_plan(self.compiled.step(list(tokens), pos), tokens, pos,
                                   logits=logits)

    async def run_plan(self, plan, tokens: Sequence[int] = (), pos: int = 0, *,
                       logits: bool = False) -> StepResult:
        """Run one `StepPlan` (of the compiler's ``step``, ``prefill`` or ``plans``).

        ``tokens`` and ``pos`` are only recorded in the result; the plan's own
        (``StepPlan.pos``, ``StepPlan.tokens``) are checked against the positions the KV
        cache holds (a plan without tokens, a test double's, is not).  Raises as `step`.
        """
        if not self.loaded:
            raise RuntimeError("load() the model before running steps")
        ppos, ptoks = getattr(plan, "pos", 0), getattr(plan, "tokens", ())
        if ptoks:
            if ppos > self._filled:
                held = f"0 .. {self._filled - 1}" if self._filled else "none"
                raise ValueError(f"a step at position {ppos} skips positions: the KV cache "
                                 f"holds positions {held} (run the positions before it "
                                 f"first, or start again at 0)")
            # a step that fails part way leaves its own positions' rows unknown
            self._filled = min(self._filled, ppos)
        tokens = tuple(int(t) for t in tokens)
        be = self.backend
        before = {}
        if self._per_step:
            # the counters read after the previous step, if nothing ran since
            before = self._last_perf or await self._perf_all()
        self._last_perf = None
        for xy, addr, data in plan.writes:
            await self._write_step_data(xy, addr, bytes(data))
        c0 = be.cycle
        for xy, pc in plan.starts:
            await be.start(xy, pc)
        want = (tuple(plan.done[0]), int(plan.done[1]))
        try:
            got = await be.wait_done(self.timeout_cycles)
        except DoorbellTimeout as e:
            raise await self._diagnose(e) from e
        if (tuple(got[0]), int(got[1])) != want:
            raise UnexpectedDoorbell(got, want)
        cycles = be.cycle - c0
        txy, taddr = plan.token_at
        token = int(np.frombuffer(await be.read_sram(txy, taddr, 4), "<i4")[0])
        out = None
        if logits:
            vocab = self.compiled.model.vocab_size
            out = np.zeros(vocab, np.int32)
            for xy, addr, first, n in plan.logits_at:
                out[first:first + n] = np.frombuffer(await be.read_sram(xy, addr, 4 * n), "<i4")
        per_tile, total = {}, {}
        if self._per_step or self.check:
            got = await read_tiles(be, self.config.tiles, perf=self._per_step, state=self.check)
            if self.check:
                self._check_at_rest(got, {tuple(xy) for xy, _ in plan.starts},
                                    be.queued_doorbells())
            if self._per_step:
                after = self._last_perf = {xy: d["perf"] for xy, d in got.items()}
                total, per_tile = self._perf_delta(before, after)
        if ptoks:
            self._filled = ppos + len(ptoks)
        return StepResult(tokens, pos, token, out, cycles, total, per_tile)

    async def _write_step_data(self, xy, addr: int, data: bytes) -> None:
        """Write a step's ``data`` at byte ``addr`` of tile ``xy``: in full, or (with
        ``incremental``) only the word runs that differ from the last write there."""
        key = (tuple(xy), int(addr))
        old = self._written.get(key)
        w = self.config.word_bytes
        if (not self.incremental or old is None or len(old) != len(data) or addr % w
                or len(data) % w):
            await self.backend.write_sram(xy, addr, data)
        else:
            for lo, hi in _changed_runs(old, data, w, _MERGE_GAP):
                await self.backend.write_sram(xy, addr + lo, data[lo:hi])
        self._written[key] = data

    @property
    def _per_step(self) -> bool:
        """Counters are read around every step (``perf`` True or ``"step"``)."""
        return self.perf is True or self.perf == "step"

    def _perf_delta(self, before: dict, after: dict) -> tuple[dict, dict]:
        """Return ``(summed over tiles, per tile)`` of two `_perf_all` reads (mod 2**32)."""
        per_tile, total = {}, {}
        for xy in self.config.tiles:
            d = {k: (v - before[xy].get(k, 0)) & _MASK32 for k, v in after[xy].items()}
            per_tile[xy] = d
            for k, v in d.items():
                total[k] = total.get(k, 0) + v
        return total, per_tile

    # -- generation ------------------------------------------------------------------------------

    async def generate(self, prompt_tokens: Sequence[int], steps: int | None = 256, *,
                       temperature: float = 0.0, topp: float = 0.9, seed: int | None = None,
                       on_token: Callable[[Step], None] | None = None,
                       on_step: Callable[[StepResult], None] | None = None,
                       read_logits: bool = False) -> GenerateResult:
        """Prefill ``prompt_tokens`` in batches of up to M, then decode.

        Parameters
        ----------
        prompt_tokens : sequence of int
            The prompt, BOS included (``chipotle.generate.encode_prompt``); not empty.
        steps : int or None
            Largest number of tokens to sample; ``None`` or 0: until BOS/EOS or the context
            ends.
        temperature, topp, seed
            As ``chipotle.sampling.Sampler``; ``temperature == 0`` takes the chip's argmax.
        on_token : callable, optional
            Called with a ``chipotle.generate.Step`` for every token added: the prompt's
            tokens after the first (forced), all before prefill's first step runs, then the
            sampled ones as they come.
        on_step : callable, optional
            Called with each `StepResult`.
        read_logits : bool
            Read the logits back at every step even when greedy (for checks).

        Returns
        -------
        GenerateResult

        Raises
        ------
        ValueError
            If the prompt is empty or ``steps`` negative; if `temperature`, `topp` or
            `seed` is out of range (as ``chipotle.sampling.Sampler``); if a prompt token is
            outside the vocabulary (before any token streams out or any step runs); or,
            from the compiler's step checks, if a position lies beyond the context.
        PromptTooLongError
            If the prompt does not fit the compiled context.
        RuntimeError, TileFault, DoorbellTimeout, UnexpectedDoorbell, UnfinishedStep
            As `step` (`load` not run; a tile fault, a missing or unexpected doorbell;
            with ``check``, a step that did not finish cleanly).
        """
        ids = [int(t) for t in prompt_tokens]
        if not ids:
            raise ValueError("`prompt_tokens` must hold at least one token (BOS)")
        if steps is not None and steps < 0:
            raise ValueError(f"`steps` must be a non-negative integer, not {steps}")
        context = int(self.compiled.context)
        if len(ids) > context:
            raise PromptTooLongError(f"the prompt is {len(ids)} tokens, longer than the "
                                     f"compiled context of {context} positions")
        vocab = self.compiled.model.vocab_size
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:   # before the prompt streams out (the compiler's step checks say the same)
            raise ValueError(f"token {bad[0]} is outside the vocabulary [0, {vocab})")
        sampler = Sampler(vocab, temperature, topp, seed)
        greedy = temperature == 0
        limit = steps or None
        decoder = self.tokenizer.stream_decoder() if self.tokenizer else None
        text: list[str] = []
        results: list[StepResult] = []
        t_start = time.perf_counter()

        def emit(pos, prev, tok, forced):
            piece = decoder.feed(prev, tok) if decoder else ""
            text.append(piece)
            if on_token:
                on_token(Step(pos, prev, tok, forced, piece))

        async def run(toks, pos, plan=None):
            want = read_logits or not greedy
            if plan is None:
                r = await self.step(toks, pos, logits=want)
            else:
                r = await self.run_plan(plan, toks, pos, logits=want)
            results.append(r)
            if on_step:
                on_step(r)
            return r

        n_prompt = len(ids)
        # the prompt is known: stream it before prefill spends its cycles (a story shows its
        # prompt at once, not with the first generated token)
        for p in range(n_prompt - 1):
            emit(p, ids[p], ids[p + 1], True)
        phase_reads = []
        if self.perf == "phase":
            phase_reads.append(await self._perf_all())
        for toks, pos, plan in self._prefill_plans(ids):
            res = await run(toks, pos, plan)
        if self.perf == "phase":
            phase_reads.append(await self._perf_all())
        n_prefill = len(results)
        pos = n_prompt - 1             # `res` holds the logits of this position
        generated = 0
        while True:
            if greedy:
                nxt = res.token
            else:
                nxt = sampler.sample(_dequantize(res.logits))
            if nxt in (BOS, EOS):
                reason = StopReason.BOS_EOS
                break
            generated += 1
            emit(pos, ids[-1], nxt, False)
            ids.append(nxt)
            pos += 1
            if limit is not None and generated >= limit:
                reason = StopReason.STEPS
                break
            if pos >= context:
                reason = StopReason.CONTEXT
                break
            res = await run([nxt], pos)
        if decoder:
            text.append(decoder.flush())
        phase_perf = {}
        if phase_reads:
            phase_reads.append(await self._perf_all())
            phase_perf = {"prefill": self._perf_delta(phase_reads[0], phase_reads[1])[0],
                          "decode": self._perf_delta(phase_reads[1], phase_reads[2])[0]}
        return GenerateResult(tuple(ids), "".join(text), reason, n_prompt, generated, results,
                              n_prefill, time.perf_counter() - t_start, sampler.seed,
                              phase_perf)


    def _prefill_plans(self, ids):
        """Yield ``(tokens, pos, plan)`` covering the prompt from position 0.

        With a compiler that pipelines several batches of M in one step (``plans``), its
        plans; otherwise steps of up to M tokens (``plan`` None: run with `step`).
        """
        cm, M = self.compiled, self.config.max_m
        if hasattr(cm, "plans") and hasattr(cm, "prefill_batches"):
            B, i = cm.prefill_batches, 0
            for plan in cm.plans(ids, 0):
                n = min(B, (len(ids) - i) // M) * M if len(ids) - i >= M else len(ids) - i
                yield ids[i:i + n], i, plan
                i += n
            assert i == len(ids)
            return
        for i in range(0, len(ids), M):
            yield ids[i:i + M], i, None


def mac_busy(steps, n_tiles: int) -> float | None:
    """Return how busy the matrix units were over ``steps``: ``mac_cycles`` summed over the
    steps / (their cycles x ``n_tiles``), or None if no step has a ``mac_cycles`` counter.

    ``steps`` are dicts with ``cycles`` and ``perf`` (counters summed over tiles), as
    `chipotle.sim.chiprun.run_rtl` returns them.  A MAC cycle does W x m MACs for a matrix
    instruction of m rows, so the share of the mesh's peak MACs is this fraction x m / M.
    """
    cyc = sum(s["cycles"] for s in steps)
    if not cyc or not any("mac_cycles" in s["perf"] for s in steps):
        return None
    return sum(s["perf"].get("mac_cycles", 0) for s in steps) / (cyc * n_tiles)


#: `Driver`'s incremental step writes join two runs of changed words when fewer than this
#: many unchanged words lie between them (a packet's head flit costs about one word).
_MERGE_GAP = 2


def _changed_runs(old: bytes, new: bytes, word: int, gap: int) -> list[tuple[int, int]]:
    """Return the byte ranges ``[(lo, hi), ...]`` (multiples of ``word``) of the words in
    which ``new`` differs from ``old`` (same length), runs closer than ``gap`` words
    joined."""
    a = np.frombuffer(old, np.uint8).reshape(-1, word)
    b = np.frombuffer(new, np.uint8).reshape(-1, word)
    idx = np.flatnonzero((a != b).any(axis=1))
    runs: list[list[int]] = []
    for i in idx.tolist():
        if runs and i - runs[-1][1] < gap:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
    return [(lo * word, hi * word) for lo, hi in runs]


def _dequantize(logits: np.ndarray) -> np.ndarray:
    """Return int32 logits as float32 real values (``GoldenModel.logit_frac_bits``)."""
    return (np.asarray(logits, np.float64) / (1 << GoldenModel.logit_frac_bits)
            ).astype(np.float32)


def _takes_skip_zero(write) -> bool:
    import inspect
    try:
        return "skip_zero" in inspect.signature(write).parameters
    except (TypeError, ValueError):
        return False
