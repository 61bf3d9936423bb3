"""KV appends through the KV store (``kvapp``, both placements); the tensor placement's
prefill batches spread over the tiles, its SRAM per tile; the cycle profile
(`chipotle.compiler.profile`).

Bit-exact against `GoldenModel` on the ISA simulator, as `test_compiler.py`; the KV cache is
also read back at the addresses of `chipotle.isa.kv.KvLayout` and compared with the golden
model's cache.
"""

import numpy as np
import pytest

from chipotle.compiler import compile_model, load_isasim, run_plan_isasim, run_step_isasim
from chipotle.compiler.profile import (
    CLASSES,
    critical_plan,
    format_critical,
    format_profile,
    format_timeline,
    line_of_pc,
    phase_of_pc,
    profile_plan,
    timeline_plan,
)
from chipotle.config import CONFIGS
from chipotle.golden import GoldenModel, quantize
from chipotle.isa.core import Opcode
from chipotle.isa.kv import KvLayout, kv_slot
from chipotle.model import load_checkpoint
from tbcommon.cli import refused


@pytest.fixture(scope="module")
def small_qm():
    from chipotle.compiler import small_model
    return small_model()


@pytest.fixture
def all_tails(monkeypatch):
    """Send every weighted-sum tail the split allows (`tensor.WSUM_SPLIT_FROM` 0), with
    session 13's share of the keys (``c ~ 0.545 n + 6.5``, which leaves a tail from 13 keys
    on, where today's ``0.583 n + 12`` leaves none below 34), so that the small model's short
    contexts (32 positions) run the partners' tails, which the compiler keeps for 240 keys
    and more."""
    from chipotle.compiler import tensor
    monkeypatch.setattr(tensor, "WSUM_SPLIT_FROM", 0)
    monkeypatch.setattr(tensor, "WSUM_SPLIT_SHARE", 0.545)
    monkeypatch.setattr(tensor, "WSUM_SPLIT_OFFSET", 6.5)


@pytest.fixture(scope="module")
def stories_qm(model_paths):
    return quantize(load_checkpoint(model_paths[0]))


def _kv_readback(sim, compiled, golden, upto):
    """Compare every attention tile's KV store (at its `KvLayout` addresses) with the golden
    model's K (data, scale code) and V caches for positions ``0 .. upto - 1``."""
    c, W = compiled.model, compiled.config.word_bytes
    hs = c.head_size
    seen = set()
    for xy, L in compiled.kv_layouts.items():
        layers, g0 = _kv_owner(compiled, xy)
        for li, layer in enumerate(layers):
            for h in range(L.n_kv_heads):
                gh = g0 + h
                seen.add((layer, gh))
                for p in range(upto):
                    k = sim.read(xy, W * L.k_data(li, h, p), hs, np.int8)
                    hdr = sim.read(xy, W * L.k_row(li, h, p), 2, np.int16)
                    v = sim.read(xy, W * L.v_row(li, h, p), hs, np.int8)
                    cols = slice(gh * hs, (gh + 1) * hs)
                    np.testing.assert_array_equal(k, golden.key_cache[layer, p, cols])
                    np.testing.assert_array_equal(v, golden.value_cache[layer, p, cols])
                    assert hdr[0] == golden.key_mu[layer, p, gh], (xy, li, h, p)
    assert {gh for _, gh in seen} == set(range(c.n_kv_heads))
    assert {layer for layer, _ in seen} == set(range(c.n_layers))


def _assert_prefill_and_decode_bit_exact(compiled, qm, upto=None):
    """Run a prefill batch of 4 tokens at position 0, then greedy decode steps at positions
    4 .. `upto` - 1 (default: the compiled context's end) on the ISA simulator, each step's
    logits equal to `GoldenModel`'s."""
    golden = GoldenModel(qm)
    sim = load_isasim(compiled)
    toks = [1, 7, 3, 12]
    r = run_step_isasim(sim, compiled, toks, 0)
    np.testing.assert_array_equal(r.logits, golden.forward_batch(toks, 0)[-1])
    tok = r.token
    for pos in range(4, compiled.context if upto is None else upto):
        r = run_step_isasim(sim, compiled, [tok], pos)
        np.testing.assert_array_equal(r.logits, golden.forward(tok, pos), err_msg=f"{pos}")
        tok = r.token


def _kv_owner(compiled, xy):
    """The global layers (local layer order) and the first global KV head of tile `xy`'s KV
    store."""
    pl = compiled.placement
    if pl.kind == "pipeline":
        return [s.layer for s in pl.tiles[xy].stages if s.kind == "att"], 0
    from chipotle.compiler.tensor import TensorRoles
    roles = TensorRoles(compiled.qm, compiled.config.isa_config(), list(pl.tiles))
    return list(range(compiled.model.n_layers)), roles.kv[xy][0]


@pytest.mark.parametrize("placement, mesh", [("tensor", (2, 2)), ("tensor", (3, 2)),
                                             ("pipeline", (2, 2)), ("pipeline", (1, 1))],
                         ids=["tensor-2x2", "tensor-3x2", "pipeline-2x2", "pipeline-1x1"])
def test_kvapp_bit_exact_and_cache_layout(small_qm, placement, mesh):
    """``kvapp=True``: the programs append K and V with ``kvapp`` only (no cache region of
    their own), logits bit-exact at every prefill batch size and decode step, and the KV
    store holds the golden model's K and V at the `KvLayout` addresses (the pipeline on one
    tile: two attention stages in one store, local layers 0 and 1)."""
    cfg = CONFIGS["small"].replace(mesh_width=mesh[0], mesh_height=mesh[1], imem_words=1024)
    if mesh == (1, 1):
        cfg = cfg.replace(sram_bytes=64 * 1024, imem_words=2048)
    compiled = compile_model(small_qm, cfg, placement=placement, kvapp=True)
    layouts = compiled.kv_layouts
    att = [xy for xy, lay in compiled.placement.tiles.items() if "rope" in lay.regions
           or any(n.endswith(".rope") for n in lay.regions)]
    assert sorted(layouts) == sorted(att) and att
    for xy, L in layouts.items():
        lay = compiled.placement.tiles[xy]
        assert isinstance(L, KvLayout) and L.k_header
        assert L.base * cfg.word_bytes == lay["kv"] and L.capacity == compiled.context
        assert L.end * cfg.word_bytes <= lay["kv"] + lay.regions["kv"].size
        assert not any("cache" in name for name in lay.regions)
        assert "kvapp" in compiled.sources[xy]
        # the scores name K by slot (kvqk): no program computes a K-cache address
        assert "kvqk" in compiled.sources[xy] and "matqk" not in compiled.sources[xy]
        assert L.n_layers == len(_kv_owner(compiled, xy)[0])
    golden = GoldenModel(small_qm)
    sim = load_isasim(compiled)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6, 5]
    pos = 0
    for n in (1, 2, 3, 3):                      # every batch size below M, then decode
        toks = prompt[pos:pos + n]
        r = run_step_isasim(sim, compiled, toks, pos)
        np.testing.assert_array_equal(r.logits, golden.forward_batch(toks, pos)[-1])
        pos += n
    plan = compiled.prefill([7, 8, 9, 10, 11, 12, 13, 14], pos)
    r = run_plan_isasim(sim, compiled, plan)
    np.testing.assert_array_equal(r.logits, golden.forward_batch(list(plan.tokens), pos)[-1])
    pos += 8
    for _ in range(3):
        ref = golden.forward(r.token, pos)
        r = run_step_isasim(sim, compiled, [r.token], pos)
        np.testing.assert_array_equal(r.logits, ref)
        pos += 1
    _kv_readback(sim, compiled, golden, pos)


def test_kvapp_needs_the_host_layout(small_qm):
    """Without the host's KV registers the store's capacity is 0: the first ``kvapp`` stops
    the tile with KV_RANGE (the store, not the program, bounds the cache)."""
    compiled = compile_model(small_qm, CONFIGS["small"], placement="tensor", kvapp=True)
    sim = load_isasim(compiled)
    for xy in compiled.kv_layouts:
        sim.set_kv_layout(xy, None)
    with pytest.raises(RuntimeError, match="KV_RANGE|KVAPP"):
        run_step_isasim(sim, compiled, [1], 0)


def test_kvapp_slot_operands_name_layer_and_head(small_qm):
    """Each ``kvapp`` names ``kv_slot(layer, head)`` through its D operand: the layer's
    slots start at ``layer << 8`` in the program text."""
    compiled = compile_model(small_qm, CONFIGS["small"], placement="tensor", kvapp=True)
    for xy in compiled.kv_layouts:
        text = compiled.sources[xy]
        for li in range(small_qm.config.n_layers):
            assert f"add             r11, {kv_slot(li, 0):#x}, 0" in text, (xy, li)


@pytest.mark.model
@pytest.mark.parametrize("placement", ["tensor", "pipeline"])
def test_kvapp_stories260k_prefill_and_decode(stories_qm, placement):
    """stories260K on the default 4 x 4 with kvapp: a 64-token prefill step and decode steps
    bit-exact, and the KV store equal to the golden cache."""
    compiled = compile_model(stories_qm, CONFIGS["default"], placement=placement, kvapp=True)
    golden = GoldenModel(stories_qm)
    sim = load_isasim(compiled)
    prompt = [(7 * i + 1) % 512 for i in range(64)]
    (plan,) = compiled.plans(prompt, 0)
    r = run_plan_isasim(sim, compiled, plan)
    np.testing.assert_array_equal(r.logits, golden.forward_batch(prompt, 0)[-1])
    pos = 64
    for _ in range(2):
        ref = golden.forward(r.token, pos)
        r = run_step_isasim(sim, compiled, [r.token], pos)
        np.testing.assert_array_equal(r.logits, ref)
        pos += 1
    _kv_readback(sim, compiled, golden, pos)


def _run_counting(sim, compiled, plan, op):
    """Run `plan`; return its `StepResult` and per tile how many `op` instructions ran."""
    counts = {xy: 0 for xy in compiled.programs}
    execute = sim._execute

    def counting(t, i):
        out = execute(t, i)
        if out is not None and i.op == op and t.xy in counts:
            counts[t.xy] += 1
        return out
    sim._execute = counting
    try:
        res = run_plan_isasim(sim, compiled, plan)
    finally:
        del sim._execute
    return res, counts


def _count_ops(sim, compiled, plan, mnemonic_op):
    """Run `plan`; return per tile how many instructions of opcode `mnemonic_op` ran."""
    return _run_counting(sim, compiled, plan, mnemonic_op)[1]


def test_prefill_rows_spread_over_tiles(small_qm):
    """A batch of m > 1 rows: the RMSNorms (attention and feed-forward) run once per row on
    the mesh, row j on tile j, instead of m times on every tile; decode (m = 1) keeps them
    on every tile (no extra gather on the decode path).  The gate and the attention output,
    quantised in slices, take one short ``dynq`` per row on every tile (the gathered maxima
    and the tile's own part); without slices, once per row on the mesh."""
    cfg = CONFIGS["small"]
    compiled = compile_model(small_qm, cfg, placement="tensor")
    L, M = small_qm.config.n_layers, cfg.max_m
    order = sorted(compiled.placement.tiles, key=lambda t: (t[1], t[0]))
    att = [xy for xy in order if "rope" in compiled.placement.tiles[xy].regions]
    for m in (M, 2):
        sim = load_isasim(compiled)
        dq = _count_ops(sim, compiled, compiled.step(list(range(1, m + 1)), 0), Opcode.DYNQ)
        sim = load_isasim(compiled)
        rn = _count_ops(sim, compiled, compiled.step(list(range(1, m + 1)), 0), Opcode.RMSNORMQ)
        sim = load_isasim(compiled)
        assert not any(_count_ops(sim, compiled, compiled.step(list(range(1, m + 1)), 0),
                                  Opcode.RMSNORM).values())
        for j, xy in enumerate(order):
            mine = int(j < m)
            # per layer: the attention output's and the gate's dynq (every row's slice, or
            # row j of the whole vector); attention tiles also one dynq per row and head of
            # q and k (and of k, without K / V partners).  The norms (attention and FFN of
            # row j, the classifier's of the last row) are rmsnormq, with no dynq
            regions = compiled.placement.tiles[xy].regions
            gate = m if "gq" in regions else mine
            att_out = m if "aq" in regions else mine
            n_att = 0
            if xy in att:
                lay = compiled.placement.tiles[xy]
                nq = lay.regions["qrec"].size // (M * cfg.isa_config().record_bytes(
                    small_qm.config.head_size))
                partners = any("l0.pw0" in t.regions
                               for t in compiled.placement.tiles.values())
                n_att = m * (nq + (not partners))   # q heads and the tile's one KV head
            assert dq[xy] == L * (att_out + gate + n_att), (m, xy, dq[xy])
            assert rn[xy] == L * (2 * mine) + 1, (m, xy, rn[xy])
    sim = load_isasim(compiled)
    rn = _count_ops(sim, compiled, compiled.step([1], 0), Opcode.RMSNORMQ)
    for xy in order:                            # decode: every tile its own norms
        assert rn[xy] == L * (1 + (xy in att)) + 1, (xy, rn[xy])


def test_profile_adds_up(small_qm):
    """`profile_plan`: per tile the phase clocks add up to the tile's clock over the step,
    the busy cycles are never negative, and the phases name the layer's parts."""
    compiled = compile_model(small_qm, CONFIGS["small"], placement="tensor")
    sim = load_isasim(compiled)
    run_step_isasim(sim, compiled, [1, 2, 3], 0)
    t0 = max(t.perf.cycles for t in sim.tiles)
    res, prof = profile_plan(sim, compiled, compiled.step([4], 3))
    golden = GoldenModel(small_qm)
    golden.forward_batch([1, 2, 3], 0)
    np.testing.assert_array_equal(res.logits, golden.forward(4, 3))
    for t in sim.tiles:
        total = sum(d.get("clock", 0) for d in prof[t.xy].values())
        assert total == t.perf.cycles - t0, (t.xy, total, t.perf.cycles - t0)
        assert all(v >= 0 for d in prof[t.xy].values() for v in d.values())
    phases = set().union(*(set(p) for p in prof.values()))
    assert {"layer: attention RMSNorm (KV heads, query heads)",
            "layer: scores, softmax, weighted sums of V per query head",
            "layer: feed-forward hidden rows",
            "layer: down projection rows and residual"} <= phases
    text = format_profile(prof)
    assert all(c in text.splitlines()[0] for c in CLASSES)
    assert len(phase_of_pc(compiled.sources[(0, 0)])) == len(compiled.programs[(0, 0)])


def test_timeline_is_the_step_instruction_by_instruction(small_qm):
    """`timeline_plan`: every instruction the step ran on a tile, in order, each ready when
    the previous one retired, its stall, retirement and unit's finish in order, adding up to
    the tile's clock; the step's result is unchanged (bit-exact, the same cycles as
    `profile_plan`'s run of the same step)."""
    compiled = compile_model(small_qm, CONFIGS["small"], placement="tensor")
    runs = []
    for fn in (profile_plan, timeline_plan):
        sim = load_isasim(compiled)
        run_step_isasim(sim, compiled, [1, 2, 3], 0)
        t0 = max(t.perf.cycles for t in sim.tiles)
        n0 = {t.xy: t.perf.instructions for t in sim.tiles}
        res, out = fn(sim, compiled, compiled.step([4], 3))
        runs.append(res)
    golden = GoldenModel(small_qm)
    golden.forward_batch([1, 2, 3], 0)
    np.testing.assert_array_equal(runs[1].logits, golden.forward(4, 3))
    assert runs[1].cycles == runs[0].cycles
    background = 0
    for t in sim.tiles:
        ev = out[t.xy]
        assert len(ev) == t.perf.instructions - n0[t.xy], t.xy
        assert ev[0].ready == 0 and ev[-1].retire == t.perf.cycles - t0, t.xy
        for a, b in zip(ev, ev[1:], strict=False):
            assert b.ready == a.retire, (t.xy, a, b)
        for e in ev:
            assert e.ready <= e.start <= e.retire <= e.finish, (t.xy, e)
            assert e.text == line_of_pc(compiled.sources[t.xy])[e.pc]
            background += e.finish > e.retire
        assert ev[-1].text.startswith("halt")
    assert background > 0                       # matrix and vector work in the background
    text = format_timeline(out[(0, 0)], "layer 1 ")
    body = text.splitlines()[1:]
    assert body and all("; layer 1 " in line for line in body)
    assert any(line.split()[6] == "matrix" for line in body)


def test_critical_path_tiles_the_step(small_qm):
    """`critical_plan`: the step's critical path from its start to the last instruction to
    retire, as contiguous segments that add up to that tile's clock; each ``net`` segment
    runs from a ``send`` to the ``wait`` its bump released (the wait stalled, the send on
    another tile or the same one, before it), each ``run`` segment is an instruction of the
    tile's own timeline; on the 2 x 2 chip the path crosses tiles through the gathers.  The
    step itself is unchanged (bit-exact, the same cycles as `timeline_plan`'s run)."""
    compiled = compile_model(small_qm, CONFIGS["small"], placement="tensor")
    runs = []
    for fn in (timeline_plan, critical_plan):
        sim = load_isasim(compiled)
        run_step_isasim(sim, compiled, [1, 2, 3], 0)
        runs.append(fn(sim, compiled, compiled.step([4], 3)))
    (res0, _), (res, segs, events) = runs
    golden = GoldenModel(small_qm)
    golden.forward_batch([1, 2, 3], 0)
    np.testing.assert_array_equal(res.logits, golden.forward(4, 3))
    assert res.cycles == res0.cycles
    end = max(events, key=lambda xy: events[xy][-1].retire)
    assert segs[0].begin == 0 and segs[-1].end == events[end][-1].retire
    assert segs[-1].xy == end and segs[-1].index == len(events[end]) - 1
    assert sum(s.cycles for s in segs) == events[end][-1].retire
    for a, b in zip(segs, segs[1:], strict=False):
        assert a.end == b.begin and a.cycles >= 0, (a, b)
    for i, s in enumerate(segs):
        assert s.event is events[s.xy][s.index]
        if s.kind == "net":
            assert s.event.unit == "wait" and s.event.retire > s.event.start + 1, s
            prev = segs[i - 1]
            assert prev.event.unit == "send" and prev.end == prev.event.retire, (prev, s)
        else:
            assert s.kind == "run" and s.event.ready <= s.begin, s
    assert any(s.kind == "net" for s in segs)
    assert len({s.xy for s in segs}) >= 2
    text = format_critical(segs)
    assert f"critical path: {events[end][-1].retire:,} cycles" in text
    assert "layer: feed-forward hidden rows" in text and "per tile: " in text


@pytest.mark.model
def test_tensor_sram_per_tile_stories260k(stories_qm):
    """stories260K on 2 x 2 tiles (the ULX3S question, docs/fpga.md) at context 16: the
    activation buffers are shared by the layers, so a tile needs under 100,000 bytes (it
    was 105,296 with a set of buffers per layer); the weights alone are about 74,000."""
    cfg = CONFIGS["default"].replace(mesh_width=2, mesh_height=2)
    compiled = compile_model(stories_qm, cfg, 16, placement="tensor")
    sizes = [lay.size for lay in compiled.placement.tiles.values()]
    assert max(sizes) < 100_000, sizes
    for lay in compiled.placement.tiles.values():
        assert not any(n.startswith("l0.") and n.endswith(("rec", "xq", "fq"))
                       for n in lay.regions)


@pytest.mark.model
def test_tensor_beyond_128k_flags_in_sram(stories_qm):
    """stories260K on 2 x 2 tiles of 256 KiB at context 512: the tiles reach past the 17-bit
    offsets, so the `Emitter` needs its scratch registers and the batch-size flags live in
    the `state` words (no record spreading); bit-exact for batches of 4 and 2 rows and a
    decode step."""
    cfg = CONFIGS["default"].replace(mesh_width=2, mesh_height=2, sram_bytes=256 * 1024)
    compiled = compile_model(stories_qm, cfg, placement="tensor")
    assert max(lay.size for lay in compiled.placement.tiles.values()) > 1 << 17
    text = compiled.sources[(0, 0)]
    assert any(line.split()[0] == "li" for line in text.splitlines() if line.strip())
    loops = [line.split()[1] for line in text.splitlines() if line.split()[:1] == ["loop"]]
    assert "r13," not in loops and "r14," not in loops       # flags read with `ld`
    assert not any(line.split()[:2] == ["wait", "4,"] for line in text.splitlines())
    golden = GoldenModel(stories_qm)
    sim = load_isasim(compiled)
    toks = [1, 403, 407, 261, 378, 29, 7]
    for pos, n in ((0, 4), (4, 2)):
        r = run_step_isasim(sim, compiled, toks[pos:pos + n], pos)
        np.testing.assert_array_equal(r.logits, golden.forward_batch(toks[pos:pos + n], pos)[-1])
    r = run_step_isasim(sim, compiled, [toks[6]], 6)
    np.testing.assert_array_equal(r.logits, golden.forward(toks[6], 6))


@pytest.mark.parametrize("placement, kvapp, expect",
                         [("tensor", None, True), ("pipeline", None, False),
                          ("tensor", False, False)])
def test_kvapp_default_and_store_path(small_qm, placement, kvapp, expect):
    """The default is ``kvapp`` for the tensor placement only; without it the programs store
    K and V themselves (no layout for the host), still bit-exact."""
    compiled = compile_model(small_qm, CONFIGS["small"], placement=placement, kvapp=kvapp)
    assert bool(compiled.kv_layouts) is expect
    assert any("kvapp" in src for src in compiled.sources.values()) is expect
    golden = GoldenModel(small_qm)
    sim = load_isasim(compiled)
    r = run_step_isasim(sim, compiled, [1, 5, 9], 0)
    np.testing.assert_array_equal(r.logits, golden.forward_batch([1, 5, 9], 0)[-1])
    for pos in (3, 4):
        ref = golden.forward(r.token, pos)
        r = run_step_isasim(sim, compiled, [r.token], pos)
        np.testing.assert_array_equal(r.logits, ref)


@pytest.mark.usefixtures("all_tails")
@pytest.mark.parametrize("kvapp", [True, False], ids=["kvapp", "stores"])
def test_partners_split_scores_and_slices(small_qm, kvapp):
    """3 x 2 tiles (4 attention tiles, 2 without): the K / V partners (two jobs each), the
    decode scores split three ways (the attention tile, the V partner, the K partner: one
    multicast of the query record to both), the decode weighted sums' tails on the partners
    (the K partner helping two attention tiles), the gate and the attention output quantised in
    slices; logits bit-exact for prefill batches of 4 and 2 rows and decode steps up to the
    context's end (the partner's share of the keys growing), with ``kvapp`` and with the
    partners storing into the caches."""
    from chipotle.compiler.tensor import TensorRoles, _wsum_split
    cfg = CONFIGS["small"].replace(mesh_width=3, mesh_height=2, imem_words=1024)
    compiled = compile_model(small_qm, cfg, placement="tensor", kvapp=kvapp)
    pl = compiled.placement
    roles = TensorRoles(small_qm, cfg.isa_config(), sorted(pl.tiles, key=lambda t: t[::-1]))
    assert len(roles.att_tiles) == 4 and roles.split and roles.gslot and roles.aslot
    assert roles.vsplit                     # the V partner scores the middle keys
    assert roles.wsplit and set(roles.helper) == set(roles.att_tiles)
    W = cfg.isa_config().word_bytes         # the partners sum the tails from some position on
    assert _wsum_split(compiled.context, W) < compiled.context
    assert sorted(len(j) for j in roles.kvp.values()) == [2, 2]
    assert {kind for jobs in roles.kvp.values() for kind, _ in jobs} == {"k", "v"}
    for xy in roles.att_tiles:              # K and V come from the partners
        assert "l0.wq" in pl.tiles[xy].regions and "l0.wk" not in pl.tiles[xy].regions
    golden = GoldenModel(small_qm)
    sim = load_isasim(compiled)
    toks = [1, 7, 3, 12, 5, 9]
    for pos, n in ((0, 4), (4, 2)):
        r = run_step_isasim(sim, compiled, toks[pos:pos + n], pos)
        np.testing.assert_array_equal(r.logits, golden.forward_batch(toks[pos:pos + n], pos)[-1])
    tok = r.token
    for pos in range(6, compiled.context):
        r = run_step_isasim(sim, compiled, [tok], pos)
        np.testing.assert_array_equal(r.logits, golden.forward(tok, pos), err_msg=f"{pos}")
        tok = r.token


@pytest.mark.usefixtures("all_tails")
@pytest.mark.parametrize("mesh, vsplit", [((5, 2), True), ((5, 1), False)], ids=["5x2", "5x1"])
def test_vpartner_scores(small_qm, mesh, vsplit):
    """The V partner's share of the decode scores (`TensorRoles.vsplit`) and the weighted
    sums' tails on the partners (`TensorRoles.wsplit`) on 5 x 2 tiles, where the K and V
    partners of KV head 0 are not neighbours (two sends of the query record, the K record
    and the V row sent to a partner in the other row), and the fallback on 5 x 1 tiles (one
    partner with every job: the K partner alone scores the last keys, the attention tiles
    sum all the keys): logits bit-exact for a prefill batch and every decode position to
    the context's end."""
    from chipotle.compiler.tensor import TensorRoles
    cfg = CONFIGS["small"].replace(mesh_width=mesh[0], mesh_height=mesh[1], imem_words=1024)
    compiled = compile_model(small_qm, cfg, placement="tensor")
    pl = compiled.placement
    roles = TensorRoles(small_qm, cfg.isa_config(), sorted(pl.tiles, key=lambda t: t[::-1]))
    assert roles.split and roles.vsplit is vsplit and roles.wsplit is vsplit
    assert all(len(t) == 1 + vsplit for t in roles.scorers.values())
    sends = [line for line in compiled.sources[roles.att_tiles[0]].splitlines()
             if line.split()[:1] == ["send"] and line.rstrip().endswith(", 7")]
    # per layer: the decode query record to each scoring partner (with `wsplit` twice in
    # the text: in the branches a > 0 and a == 0 of `first_keys`), the prefill rows'
    # records to the helper (`TensorRoles.prow`)
    per = (1 + vsplit) * (1 + roles.wsplit) + bool(roles.prow)
    assert len(sends) == small_qm.config.n_layers * per, sends
    _assert_prefill_and_decode_bit_exact(compiled, small_qm)


@pytest.mark.parametrize("mesh", [(3, 2), (5, 2)], ids=["3x2", "5x2"])
def test_decode_from_position_0(small_qm, mesh):
    """Decode steps from position 0 on (a 1-token prompt, then greedy), where the attention
    tile scores no key itself (``a == 0``: `first_keys` sends the query record in its
    second branch) and the V partner's share is empty (`_partner_scores` waits for the
    query records in its second branch), then where both have keys: logits bit-exact."""
    from chipotle.compiler.tensor import TensorRoles, _split3
    cfg = CONFIGS["small"].replace(mesh_width=mesh[0], mesh_height=mesh[1], imem_words=1024)
    compiled = compile_model(small_qm, cfg, placement="tensor")
    roles = TensorRoles(small_qm, cfg.isa_config(),
                        sorted(compiled.placement.tiles, key=lambda t: t[::-1]))
    assert roles.split and roles.vsplit and roles.wsplit
    splits = [_split3(n, cfg.word_bytes, True) for n in range(1, 13)]
    assert any(a == 0 for a, _ in splits) and any(a > 0 for a, _ in splits)
    assert any(a == b for a, b in splits) and any(a < b for a, b in splits)
    golden = GoldenModel(small_qm)
    sim = load_isasim(compiled)
    tok = 1
    for pos in range(12):
        r = run_step_isasim(sim, compiled, [tok], pos)
        np.testing.assert_array_equal(r.logits, golden.forward(tok, pos), err_msg=f"{pos}")
        tok = r.token


def test_split3():
    """`_split3`: the tile's keys ``0 .. a - 1``, the V partner's ``a .. b - 1`` and the K
    partner's ``b .. n - 1`` cover the keys, ``a`` and ``b`` multiples of W / 4, ``b`` below
    ``n`` (the K partner always scores the step's own key, which the V partner's copy of the
    K cache does not hold yet); without the V partner ``a = b = _split_at(n)``."""
    from chipotle.compiler.tensor import _split3, _split_at
    for W in (4, 8, 16):
        step = max(1, W // 4)
        for n in range(1, 600):
            a, b = _split3(n, W, True)
            assert 0 <= a <= b < n and a % step == 0 and b % step == 0, (W, n, a, b)
            assert _split3(n, W, False) == (_split_at(n, W),) * 2
    a, b = _split3(512, 8, True)
    assert abs(a / 512 - 0.55) < 0.01 and abs((b - a) - (512 - b)) <= 2


def test_wsum_split():
    """`_wsum_split`: the attention tile's keys ``c`` of the weighted sum are at least one,
    at most ``n`` (``c = n``: no tail for the partner), a multiple of W / 2 when below ``n``
    (the tail of the uint16 probabilities starts word-aligned), a little over half of them
    for long contexts."""
    from chipotle.compiler.tensor import _wsum_split
    for W in (4, 8, 16):
        for n in range(1, 600):
            c = _wsum_split(n, W)
            assert 1 <= c <= n and (c == n or c % max(1, W // 2) == 0), (W, n, c)
            assert c == n or n >= 240, (W, n, c)    # WSUM_SPLIT_FROM
    assert min(n for n in range(1, 600) if _wsum_split(n, 8) < n) == 240
    # c ~ 0.583 n + 12 (session 32's wsum): 0.583 * 512 + 12 = 310.5, to a multiple of 4
    assert _wsum_split(512, 8) == 312
    assert _wsum_split(65, 8) == 65 and _wsum_split(257, 8) == 160  # positions 64 and 256


def test_wsum_tails_without_the_threshold(all_tails):
    """With `WSUM_SPLIT_FROM` 0 (`all_tails`: the small model's tests, whose contexts end
    before it) the tails start where the split allows them, at ``n = 13``."""
    from chipotle.compiler.tensor import _wsum_split
    assert min(n for n in range(1, 600) if _wsum_split(n, 8) < n) == 13
    assert _wsum_split(65, 8) == 40


def test_split_at():
    """`_split_at`: the attention tile's keys ``a`` are a multiple of W / 4 below ``n`` (the
    partner always scores the step's own key), about 2/3 of them for long contexts (the
    partner's 3 cycles per key at 2 rows and its sends against the tile's 2)."""
    from chipotle.compiler.tensor import _split_at
    for W in (4, 8, 16):
        for n in range(1, 600):
            a = _split_at(n, W)
            assert 0 <= a < n and a % max(1, W // 4) == 0, (W, n, a)
    assert abs(_split_at(512, 8) / 512 - 2 / 3) < 0.01


def _rows_placement(small_qm):
    from chipotle.compiler.tensor import TensorRoles
    cfg = CONFIGS["small"].replace(mesh_width=3, mesh_height=2, imem_words=1024)
    compiled = compile_model(small_qm, cfg, placement="tensor")
    pl = compiled.placement
    roles = TensorRoles(small_qm, cfg.isa_config(), sorted(pl.tiles, key=lambda t: t[::-1]))
    return cfg, compiled, roles


@pytest.mark.usefixtures("all_tails")
def test_prefill_rows_on_helpers(small_qm):
    """A prefill batch's attention rows shared with the helpers (`TensorRoles.prow`) on
    3 x 2 tiles (4 attention tiles; the K partner helps two of them, the V partner two):
    each attention tile runs the softmax of rows ``0 .. prow - 1`` of its query head, its
    helper rows ``prow .. m - 1``; logits bit-exact for batches of 4, 3 and 2 rows (the
    helper with 2, 1 and no rows, bare bumps for the rest) at growing positions, then decode
    steps (which keep the decode schemes)."""
    cfg, compiled, roles = _rows_placement(small_qm)
    L = small_qm.config.n_layers
    assert roles.prow == 2 and roles.wsplit
    helpers = {roles.helper[a] for a in roles.att_tiles}
    assert len(helpers) == 2 and all(len(roles.helped(h)) == 2 for h in helpers)
    for h in helpers:                       # the softmax tables and the rows' buffers
        regions = compiled.placement.tiles[h].regions
        assert {"tab.exp2", "tab.recip", "hq0", "hq1", "hw"} <= set(regions)
    golden = GoldenModel(small_qm)
    sim = load_isasim(compiled)
    toks = [1, 7, 3, 12, 5, 9, 2, 11, 4, 6, 8, 10, 13]
    pos = 0
    for m in (4, 3, 2, 4):
        res, sm = _run_counting(sim, compiled, compiled.step(toks[pos:pos + m], pos),
                                Opcode.SOFTMAX)
        np.testing.assert_array_equal(res.logits,
                                      golden.forward_batch(toks[pos:pos + m], pos)[-1],
                                      err_msg=f"batch of {m} at {pos}")
        for xy in compiled.placement.tiles:
            want = (L * min(m, roles.prow) if xy in roles.att_tiles else
                    L * (m - roles.prow) * len(roles.helped(xy)) if xy in helpers else 0)
            assert sm[xy] == want, (m, xy, sm[xy])
        pos += m
    tok = res.token
    for p in range(pos, pos + 4):
        r = run_step_isasim(sim, compiled, [tok], p)
        np.testing.assert_array_equal(r.logits, golden.forward(tok, p), err_msg=f"{p}")
        tok = r.token


def test_prefill_rows_without_helpers_differ(small_qm, monkeypatch):
    """The check above sees the helpers' rows: with `_partner_rows` reduced to its waits and
    bumps (nothing summed, the tiles' rows ``prow ..`` and their maxima left stale) a batch
    of 4 rows no longer matches the golden model."""
    from chipotle.compiler import tensor

    def no_rows(e, k, li):
        helped = k.roles.helped(k.xy)
        e("wait", tensor.C_Q, len(helped))
        e("sub", "r4", "r2", k.roles.prow)
        for axy, _ in helped:
            rect = tensor._rect((axy[0], axy[0], axy[1], axy[1]))
            for _ in range(k.isa.max_m - k.roles.prow):
                e("send", k.a("hw"), k.a("hw"), 0, rect, tensor.C_WS)
            e.loop("r4", lambda: e("send", k.a("hm"), k.a("hm"), 0, k.all, tensor.C_AMAX))
    monkeypatch.setattr(tensor, "_partner_rows", no_rows)
    cfg, compiled, roles = _rows_placement(small_qm)
    assert roles.prow == 2
    golden = GoldenModel(small_qm)
    sim = load_isasim(compiled)
    toks = [1, 7, 3, 12]
    r = run_step_isasim(sim, compiled, toks, 0)
    assert not np.array_equal(r.logits, golden.forward_batch(toks, 0)[-1])


@pytest.mark.model
def test_prefill_rows_fall_back(small_qm, stories_qm):
    """Without helpers (the 2 x 2 chip: no partners) or with ``M > 4`` the prefill rows stay
    on the attention tiles (`TensorRoles.prow` 0); stories260K on the default chip shares
    them and still fits the instruction memory and SRAM with the software-pipelined
    scores."""
    from chipotle.compiler.tensor import TensorRoles, place_tensor
    cfg = CONFIGS["small"]
    tiles = [(x, y) for y in range(cfg.mesh_height) for x in range(cfg.mesh_width)]
    assert TensorRoles(small_qm, cfg.isa_config(), tiles).prow == 0
    c32 = CONFIGS["small"].replace(mesh_width=3, mesh_height=2, max_m=8)
    t32 = [(x, y) for y in range(2) for x in range(3)]
    assert TensorRoles(small_qm, c32.isa_config(), t32).prow == 0
    dflt = CONFIGS["default"]
    compiled = compile_model(stories_qm, dflt, placement="tensor")
    pl, roles = place_tensor(stories_qm, dflt.isa_config(), 4, 4, compiled.context,
                             compiled.placement.batches, True)
    assert roles.prow == 2
    assert all(len(p) <= dflt.imem_words for p in compiled.programs.values())
    att = compiled.sources[roles.att_tiles[0]]
    assert "last rows' query records to the helper" in att
    assert "kvqk.i32        r5" in att      # the pipelined scores' second buffer


def test_partner_rows_sent_once_per_batch(small_qm):
    """The K / V partners send a batch's K records and V rows in one SEND per destination
    (`C_KV`): as many SENDs for a batch of 4 rows as for a decode step, and the logits
    bit-exact (3 x 2 tiles, with ``kvapp`` and with the partners storing into the caches)."""
    from chipotle.compiler.tensor import C_KV
    for kvapp in (True, False):
        cfg, _, _ = _rows_placement(small_qm)
        compiled = compile_model(small_qm, cfg, placement="tensor", kvapp=kvapp)
        golden = GoldenModel(small_qm)
        sim = load_isasim(compiled)
        counts = []
        for toks, pos in (([1, 7, 3, 12], 0), ([5], 4)):
            n = {xy: 0 for xy in compiled.programs}
            execute = sim._execute

            def counting(t, i, n=n, execute=execute):
                out = execute(t, i)
                if out is not None and i.op == Opcode.SEND and i.c == C_KV and t.xy in n:
                    n[t.xy] += 1
                return out
            sim._execute = counting
            try:
                r = run_plan_isasim(sim, compiled, compiled.step(toks, pos))
            finally:
                del sim._execute
            np.testing.assert_array_equal(r.logits, golden.forward_batch(toks, pos)[-1])
            counts.append(n)
        assert sum(counts[0].values()) > 0 and counts[0] == counts[1], counts


@pytest.mark.parametrize("mesh, W", [((3, 2), 8), ((2, 3), 8), ((4, 4), 8), ((2, 2), 8),
                                     ((5, 2), 8), ((3, 3), 16), ((4, 4), 16), ((3, 2), 32)])
def test_gate_pairs_geometry(small_qm, mesh, W):
    """`TensorRoles.gpair`: the gate's int8 of two tiles in one slot.  Every hidden row has
    its own position in the down projection's inner dimension (`gk2`), the int8 each tile
    multicasts start word-aligned and cover its rows' positions (a first tile's whole words,
    its second's the first's tail, zeros, and its own rows), the senders' spans do not
    overlap, and the pairs shorten `gk2` below ``T * gslot`` (the layout without them,
    ``gate_pairs=False``).  (The reducer was left out while its instruction memory was
    full; on 4 x 4 it is the first of a pair now.)"""
    from chipotle.compiler.tensor import TensorRoles
    cfg = CONFIGS["small"].replace(mesh_width=mesh[0], mesh_height=mesh[1], word_bytes=W)
    isa = cfg.isa_config()
    pad = isa.pad
    tiles = [(x, y) for y in range(mesh[1]) for x in range(mesh[0])]
    roles = TensorRoles(small_qm, isa, tiles)
    off = TensorRoles(small_qm, isa, tiles, gate_pairs=False)
    T, S = len(tiles), roles.gslot
    assert S and not off.gpair and off.gk2 == T * S
    assert off.gate_columns(tiles[1]) == list(range(S, S + off.h[tiles[1]][1] - off.h[tiles[1]][0]))
    assert (roles.gk2 < T * S) is bool(roles.gpair)
    assert tiles[0] not in roles.gfirst
    if mesh == (4, 4) and W == 8:
        assert roles.gpair[tiles[0]] == (0, 1)
    assert {b: a for a, b in roles.gpair.items()} == roles.gfirst
    cols = [c for xy in tiles for c in roles.gate_columns(xy)]
    assert len(cols) == len(set(cols)) == small_qm.config.hidden_dim
    assert 0 <= min(cols) and max(cols) < roles.gk2 <= isa.k_max
    spans = []
    for xy in tiles:
        a, b = roles.h[xy]
        rows, o = b - a, roles.goff[xy]
        assert o % W == 0, xy
        if xy in roles.gpair:               # whole words here, the tail from the second
            second, tp = roles.gpair[xy], roles.gtail[xy]
            n = rows // W * W
            assert tp % (W // 4) == 0 and rows % W <= tp < rows % W + W // 4
            assert roles.goff[second] == o + n
            assert roles.gate_columns(xy) == list(range(o, o + rows))
            assert second == (xy[0], xy[1] + 1)
        elif xy in roles.gfirst:            # the first's tail (and zeros), then its rows
            tp = roles.gtail[roles.gfirst[xy]]
            n = pad(tp + rows)
            assert roles.gate_columns(xy) == list(range(o + tp, o + tp + rows))
        else:
            n = S
            assert roles.gate_columns(xy) == list(range(o, o + rows))
        spans.append((o, o + n))
    spans.sort()
    assert all(e0 <= s1 for (_, e0), (s1, _) in zip(spans, spans[1:], strict=False))
    assert spans[-1][1] == roles.gk2


@pytest.mark.parametrize("mesh", [(2, 3), (4, 4)], ids=["2x3", "4x4"])
def test_gate_pairs_bit_exact(small_qm, mesh):
    """The gate packed in pairs (`TensorRoles.gpair`) on 2 x 3 tiles (two pairs, one of them
    between an attention tile and a partner; 10 and 11 rows: the first sends a word of int8
    and a tail of two or three int32) and on 4 x 4 tiles (4 rows a tile: the first of each
    pair sends no int8 of its own, a bare bump, and its whole rows as the tail): the tail
    SENDs in the programs, ``w2``'s inner dimension shortened, logits bit-exact for a prefill
    batch of 4 and every decode position to the context's end."""
    from chipotle.compiler.tensor import C_TAIL, TensorRoles
    cfg = CONFIGS["small"].replace(mesh_width=mesh[0], mesh_height=mesh[1], imem_words=1024)
    compiled = compile_model(small_qm, cfg, placement="tensor")
    pl = compiled.placement
    roles = TensorRoles(small_qm, cfg.isa_config(), sorted(pl.tiles, key=lambda t: t[::-1]))
    assert roles.gpair and roles.gk2 < len(pl.tiles) * roles.gslot
    for a in roles.gpair:
        tails = [line for line in compiled.sources[a].splitlines()
                 if line.split()[:1] == ["send"] and line.rstrip().endswith(f", {C_TAIL}")]
        assert len(tails) == small_qm.config.n_layers, (a, tails)
    xy = next(a for a in roles.gpair if "l0.w2" in pl.tiles[a].regions)
    assert pl.tiles[xy].regions["l0.w2"].size == (
        (roles.o[xy][1] - roles.o[xy][0]) * cfg.isa_config().pad(roles.gk2))
    _assert_prefill_and_decode_bit_exact(compiled, small_qm)


def test_gate_pairs_imem_fallback(small_qm):
    """When the instruction memory is too small for the pairs' extra instructions (a tail
    SEND on the first, a wait on the second, per layer), the tensor placement compiles
    without them and keeps the prefill rows on the helpers (`_compile_tensor`'s first
    fallback): ``w2``'s inner dimension is ``T * gslot`` again, still bit-exact."""
    cfg = CONFIGS["small"].replace(mesh_width=3, mesh_height=2, imem_words=1024)
    full = compile_model(small_qm, cfg, placement="tensor")
    n = max(len(p) for p in full.programs.values())
    tight = compile_model(small_qm, cfg.replace(imem_words=n - 1), placement="tensor")
    assert 0 < n - max(len(p) for p in tight.programs.values()) <= 2 * small_qm.config.n_layers
    xy = (2, 0)
    assert (tight.placement.tiles[xy].regions["l0.w2"].size
            > full.placement.tiles[xy].regions["l0.w2"].size)
    assert any("hw" in t.regions for t in tight.placement.tiles.values())  # prefill rows kept
    _assert_prefill_and_decode_bit_exact(tight, small_qm, upto=12)


@pytest.mark.model
def test_profile_critical_command(capsys, model_paths, monkeypatch):
    """``python -m chipotle.compiler.profile --critical``: stories260K's decode step's
    critical path on the default chip, its length the step's cycles plus the halt after the
    doorbell (`chipotle.compiler.profile`'s docstring), every layer and the classifier on
    it."""
    from chipotle.compiler import profile
    monkeypatch.setenv("CHIPOTLE_MODEL_DIR", str(model_paths[0].parent))
    profile.main(["--critical", "--pos", "3", "--top", "5"])
    out = capsys.readouterr().out
    import re
    cycles = int(re.search(r": ([\d,]+) cycles \(estimate, from the start to the "
                           r"doorbell\)", out)[1].replace(",", ""))
    path = int(re.search(r"critical path: ([\d,]+) cycles, \d+ segments \(to the last "
                         r"tile's halt, a cycle after the doorbell tile's `done`\)",
                         out)[1].replace(",", ""))
    assert path == cycles + 1, out
    # whole phase names (they were cut at 58 characters)
    assert "layer: partner: scores of its share of the keys for the attention tiles " in out
    layers = re.search(r"per layer: (.*)", out)[1]
    assert all(f"layer {i} " in layers for i in range(5)) and "after the layers" in layers
    parts = dict(re.fullmatch(r"(.*) ([\d,]+)", p).groups() for p in layers.split(", "))
    assert list(parts)[0] == "before the layers" and list(parts)[-1] == "after the layers"
    assert sum(int(v.replace(",", "")) for v in parts.values()) == path
    assert int(parts["before the layers"].replace(",", "")) > 40    # entry and embedding
    assert "final norm of the step's last row" in out
    assert len(re.findall(r"^ *[\d,]+ +\d+x ", out, re.M)) == 5


@pytest.mark.model
def test_profile_refuses_positions_and_layers_outside_the_model(capsys, model_paths,
                                                                   monkeypatch):
    """``python -m chipotle.compiler.profile``: a negative position, a position past the
    context and a layer the model lacks are one-line usage errors, not a traceback or a run
    of minutes."""
    from chipotle.compiler import profile
    monkeypatch.setenv("CHIPOTLE_MODEL_DIR", str(model_paths[0].parent))
    for argv, message in ((["--pos", "-1"], "--pos must be a position (0 or more), not -1"),
                          (["--pos", "9999"], "needs 10000 positions; the compiled context "
                                              "is 512"),
                          (["--timeline", "0,0", "--layer", "9"],
                           "--layer 9: the model has layers 0 .. 4")):
        with pytest.raises(SystemExit) as e:
            profile.main(argv)
        err = capsys.readouterr().err
        assert e.value.code == 2 and message in err and "Traceback" not in err, (argv, err)


@pytest.mark.model
@pytest.mark.parametrize("argv, message", [
    (["--placement", "pipeline", "--timeline", "3,2", "--pos", "2"],
     "--timeline: tile (3, 2) runs no program in the pipeline placement (tiles with programs: "
     "(0, 0), (1, 0), (2, 0), (3, 0), (0, 1), (1, 1), (2, 1), (3, 1), (0, 2), (1, 2), (2, 2), "
     "(0, 3), (1, 3), (2, 3), (3, 3)) ("),
    (["--placement", "pipeline", "--timeline", "0,0", "--layer", "4", "--pos", "2"],
     "--layer 4: tile (0, 0) runs no instruction of layer 4 in the pipeline placement (none "
     "of the layers) ("),
])
def test_profile_refuses_a_timeline_of_a_tile_without_the_code(capsys, model_paths,
                                                               monkeypatch, argv, message):
    """``python -m chipotle.compiler.profile --timeline X,Y``: a tile the pipeline placement
    leaves idle was a ``KeyError`` traceback after the prefill; a ``--layer`` the tile's
    stage does not run printed an empty table.  Both are one usage line naming the tiles
    (layers) there are, after the compile and before any step runs."""
    from chipotle.compiler import profile
    monkeypatch.setenv("CHIPOTLE_MODEL_DIR", str(model_paths[0].parent))
    err = refused(capsys, profile.main, argv, "python -m chipotle.compiler.profile")
    assert err.startswith(message), err


@pytest.mark.parametrize("placement, shared, mesh", [
    ("tensor", True, (1, 1)), ("tensor", False, (1, 1)), ("tensor", True, (2, 1)),
    ("pipeline", True, (1, 1)), ("pipeline", False, (1, 1)), ("pipeline", True, (2, 1))],
    ids=["tensor-shared-1x1", "tensor-unshared-1x1", "tensor-shared-2x1",
         "pipeline-shared-1x1", "pipeline-unshared-1x1", "pipeline-shared-2x1"])
def test_embedding_aliases_the_shared_classifier_on_one_tile(placement, shared, mesh):
    """On a tile that holds the whole shared classifier and every embedding column (a 1 x 1
    mesh), the embedding rows (``e``; the pipeline's ``emb.e``) are the classifier's region
    ``cls.w``, not a copy: the tile is ``vocab_size * pad(dim)`` bytes smaller, its image
    holds the embedding's rows there once, and every step stays bit-exact.  A checkpoint with
    its own classifier, or a mesh that splits them, keeps the embedding's own region."""
    from chipotle.compiler.compiled import padded_rows
    from chipotle.compiler.run import SMALL_MODEL_DIMS
    from chipotle.golden.quantize import calibration_sequences
    from chipotle.model import ModelConfig, synthetic_checkpoint

    def model(shared):
        ckpt = synthetic_checkpoint(ModelConfig(**SMALL_MODEL_DIMS, shared_classifier=shared),
                                    seed=7, scale=0.3)
        return quantize(ckpt, calibration_sequences(ckpt, n=2, length=16))

    qm = model(shared)
    assert (qm.classifier.w is qm.embedding.w) == shared
    cfg = CONFIGS["small"].replace(mesh_width=mesh[0], mesh_height=mesh[1],
                                   sram_bytes=64 * 1024, imem_words=2048)
    compiled = compile_model(qm, cfg, placement=placement, context=16)
    isa = cfg.isa_config()
    c = qm.config
    alias = shared and mesh == (1, 1)
    e = "e" if placement == "tensor" else "emb.e"
    for lay in compiled.placement.tiles.values():
        if alias:
            assert lay.aliases == {e: "cls.w"} and e not in lay.regions
            assert lay[e] == lay["cls.w"]
            assert f"{e} = cls.w" in compiled.memory_map()
        else:
            assert not lay.aliases
    # the embedding is laid out once: as its own region or as the classifier's
    assert any(e in lay.regions or e in lay.aliases for lay in compiled.placement.tiles.values())
    if alias:
        # the same layout with a copy of its own is one matrix larger, byte for byte
        unshared = compile_model(model(False), cfg, placement=placement, context=16)
        size = compiled.placement.tiles[(0, 0)].size
        assert unshared.placement.tiles[(0, 0)].size - size == c.vocab_size * isa.pad(c.dim)
        # the image holds the embedding's rows at `e` (as `cls.w`: written once)
        lay = compiled.placement.tiles[(0, 0)]
        want = padded_rows(qm.embedding.w, isa).view(np.uint8).reshape(-1).tobytes()
        image = bytearray(cfg.sram_bytes)
        writes = 0
        for addr, data in compiled.images[(0, 0)]:
            image[addr:addr + len(data)] = data
            writes += addr <= lay[e] < addr + len(data)
        assert bytes(image[lay[e]:lay[e] + len(want)]) == want and writes == 1
    from tbcommon.golden import assert_isasim_bit_exact
    assert_isasim_bit_exact(compiled, qm, [3, 1, 4, 1, 5], 2)


@pytest.mark.parametrize("hidden", [1, 3, 15])
def test_tiles_without_hidden_rows(hidden):
    """A feed-forward hidden dimension below the tile count leaves tiles with no hidden rows
    (no ``h1`` / ``h3`` regions): they send a zero maximum and a bare bump, and every step
    stays bit-exact (the compiler raised ``KeyError: 'h1'`` on such a model before)."""
    from chipotle.compiler.run import SMALL_MODEL_DIMS
    from chipotle.compiler.tensor import TensorRoles
    from chipotle.golden.quantize import calibration_sequences
    from chipotle.model import ModelConfig, synthetic_checkpoint

    ckpt = synthetic_checkpoint(ModelConfig(**{**SMALL_MODEL_DIMS, "hidden_dim": hidden}),
                                seed=3, scale=0.3)
    qm = quantize(ckpt, calibration_sequences(ckpt, n=2, length=16))
    cfg = CONFIGS["small"].replace(mesh_width=4, mesh_height=4, imem_words=1024)
    compiled = compile_model(qm, cfg, placement="tensor", context=12)
    roles = TensorRoles(qm, cfg.isa_config(), sorted(compiled.placement.tiles,
                                                     key=lambda t: t[::-1]))
    assert sum(h1 == h0 for h0, h1 in roles.h.values()) >= 16 - hidden
    _assert_prefill_and_decode_bit_exact(compiled, qm)


@pytest.mark.model
def test_profile_refuses_configurations_as_the_compiler_does(capsys, model_paths,
                                                             monkeypatch):
    """``python -m chipotle.compiler.profile --config``: an unknown or invalid configuration
    is a usage error, and one too small for the model is refused in one line naming the
    configuration that fits, the given name kept (``small,...``, not a 4 x 4 chip), as
    ``python -m chipotle.compiler`` does; a chip that holds only a shorter context than the
    model's ``seq_len`` refuses a position past it, naming the last position it holds (a
    fresh user met tracebacks for all of these)."""
    from chipotle.compiler import profile
    monkeypatch.setenv("CHIPOTLE_MODEL_DIR", str(model_paths[0].parent))
    for argv, message in (
            (["--config", "foo"], "--config: unknown configuration 'foo'"),
            (["--config", "W=3"], "--config: "),
            (["--context", "0"], "--context must be a positive number"),
            (["--config", "small"], "a configuration that fits: --config small,sram_kib="),
            (["--config", "ulx3s", "--pos", "250"],
             "the longest context it holds, 204, is shorter than the 251 positions of --pos "
             "250 with --rows 1: give a --pos below 204")):
        with pytest.raises(SystemExit) as e:
            profile.main(argv)
        err = capsys.readouterr().err
        assert e.value.code == 2 and message in err and "Traceback" not in err, (argv, err)
        # one error line, after the search's progress line when there was a search
        assert err.splitlines()[-1].startswith("python -m chipotle.compiler.profile: error: ")


@pytest.mark.model
def test_module_commands_stop_quietly_when_the_reader_goes_away(model_paths):
    """``python -m chipotle.isa.programs | head -1`` where ``head`` has gone: the pipe's
    reader is closed before the command writes (so every write fails, whatever the output's
    size); the command ends with status 1 and without a `BrokenPipeError` traceback
    (`chipotle.cli.run_main`, which ``python -m chipotle.compiler`` and
    ``chipotle.compiler.profile`` share)."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, CHIPOTLE_MODEL_DIR=str(model_paths[0].parent))
    r, w = os.pipe()
    os.close(r)
    try:
        run = subprocess.run([sys.executable, "-m", "chipotle.isa.programs"], stdout=w,
                             stderr=subprocess.PIPE, env=env, timeout=120)
    finally:
        os.close(w)
    err = run.stderr.decode()
    assert run.returncode == 1, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


@pytest.mark.model
@pytest.mark.parametrize("module", ["chipotle.compiler.profile", "chipotle.golden.measure"])
def test_module_commands_stop_on_ctrl_c_with_one_line(model_paths, module):
    """Ctrl-C (SIGINT to the command's process group, as a terminal sends it) ends a module
    command with one line, ``python -m <module>: interrupted``, status 130, not a traceback
    (`chipotle.cli.run_main`; a fresh user's finding)."""
    import os
    import signal
    import subprocess
    import sys
    import time
    env = dict(os.environ, CHIPOTLE_MODEL_DIR=str(model_paths[0].parent))
    # work of about 9 s of CPU on a fast machine of this kind (the imports take 0.4 s)
    extra = ["--positions", "511", "--steps", "512"] if module.endswith("measure") else []
    p = subprocess.Popen([sys.executable, "-m", module, *extra], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, env=env, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    def cpu_seconds():      # utime + stime, fields 14 and 15 of /proc/<pid>/stat (proc(5))
        with open(f"/proc/{p.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    # interrupt once past the imports and the model's load, into the work: by the process's
    # own CPU time, not by a wall-clock sleep (a fast machine finished `measure` within
    # session 38's 6 s sleep; a loaded one had not imported yet)
    deadline = time.monotonic() + 120
    while p.poll() is None and cpu_seconds() < 1.5 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert p.poll() is None, f"{module} ended before the interrupt: {p.stderr.read()!r}"
    os.killpg(p.pid, signal.SIGINT)
    err = p.communicate(timeout=60)[1].decode()
    assert p.returncode == 130, err
    assert err.rstrip().endswith(f"python -m {module}: interrupted"), err
    assert "Traceback" not in err, err


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "two-words"])
def test_argmax_reduction_ties(small_qm, packed, monkeypatch):
    """The argmax reduction with each tile's maximum and vocabulary row in one word
    (`tensor._packed_argmax`: int32 1 is ``-2^31 + row``) and, forced off, in two: a
    classifier whose rows from ``r0`` (the second row of the second classifier tile) on are
    all the same row and whose rows before are zero, so that every step ties its largest
    logit over three tiles (``r0`` when it is positive) or over the first two (0, the zero
    rows); the token is the golden model's first maximum at every step, with the weights
    and their negation."""
    import dataclasses

    from chipotle.compiler import tensor
    cfg = CONFIGS["small"]
    isa = cfg.isa_config()
    assert tensor._packed_argmax(small_qm, isa)
    if not packed:
        monkeypatch.setattr(tensor, "_packed_argmax", lambda qm, isa: False)
    base = compile_model(small_qm, cfg, placement="tensor")
    pl = base.placement
    assert len(pl.classifier) >= 3
    r0 = pl.tiles[pl.classifier[1]].stages[-1].rows[0] + 1
    seen = set()
    for sign in (1, -1):
        cl = small_qm.classifier
        w = np.zeros_like(cl.w)
        w[r0:] = sign * cl.w[r0]
        qm = dataclasses.replace(small_qm, classifier=dataclasses.replace(
            cl, w=w, m=np.full_like(cl.m, cl.m[r0]), s=np.full_like(cl.s, cl.s[r0])))
        compiled = compile_model(qm, cfg, placement="tensor")
        red = compiled.sources[pl.reducer]
        assert (f"wait            {isa.n_counters - 1}, {len(pl.classifier)}" in red) == packed
        golden = GoldenModel(qm)
        sim = load_isasim(compiled)
        tok = 1
        for pos in range(8):
            r = run_step_isasim(sim, compiled, [tok], pos)
            logits = golden.forward(tok, pos)
            np.testing.assert_array_equal(r.logits, logits)
            assert r.token == int(np.argmax(logits)), (sign, pos)
            assert np.abs(logits.astype(np.int64)).max() <= tensor._logit_bound(qm)
            seen.add(r.token)
            tok = r.token
    assert seen == {0, r0}
