"""Place and route a chip configuration's tile SRAM alone on an ECP5 board (a routing probe).

Usage (from the top of the checkout)::

    .venv/bin/python -m chipotle.sim.sram_probe                    # the ulx3s chip's SRAM
    .venv/bin/python -m chipotle.sim.sram_probe --config default   # a 128 KiB, 2-bank SRAM

The design is one :class:`chipotle.hw.tile.sram.Sram` of the configuration (``sram_bytes``,
``word_bytes``, ``n_banks``, ``read_words = n_banks``), both ports driven by a 160-bit
shift register with XOR feedback and both read words folded into registered accumulators
whose XOR reaches the board's 8 LEDs, so that Yosys keeps every block RAM and every output
bit.  It answers one question about a chip that does not route (``docs/fpga.md``, "Session
12"): can the block RAMs of the SRAM, with their address, data and output multiplexers,
be placed and routed on their own, and at what Fmax?  The flow is Amaranth's (Yosys
``synth_ecp5``, nextpnr-ecp5, ecppack; YoWASP tools, as ``chipotle.sim.bitstream``), into
``build/fpga/sram-probe-<board>/``; nextpnr's log is ``top.tim`` there.

Members
-------
SramProbe
    The probe's top level (an Amaranth ``Elaboratable`` for a board platform).
main
    The command line.
"""

from __future__ import annotations

import argparse
import os
import time

from amaranth import ClockDomain, Elaboratable, Module, Signal
from amaranth.hdl import Cat
from amaranth.lib import io

from .bitstream import TOOLS, _tool, log_fmax, log_utilisation
from .flow import build_root, check_build_dir

__all__ = ["SramProbe", "main"]

#: Width of the stimulus shift register (address, enables, write data and mask of both ports).
LFSR_BITS = 160


class SramProbe(Elaboratable):
    """A tile SRAM alone between a stimulus register and output accumulators.

    Parameters
    ----------
    sram_bytes, word_bytes, n_banks : int
        As :class:`chipotle.hw.tile.sram.Sram` (``read_words`` = ``n_banks``, as the tile).

    Raises
    ------
    ValueError
        From :class:`~chipotle.hw.tile.sram.Sram` for a geometry it refuses, or if the two
        ports' address, control and write data do not fit the `LFSR_BITS` stimulus bits.
    """

    def __init__(self, *, sram_bytes: int, word_bytes: int = 8, n_banks: int = 1):
        from chipotle.hw.tile.sram import ADDR_WIDTH, Sram

        self.sram = Sram(size_bytes=sram_bytes, word_bytes=word_bytes, n_banks=n_banks,
                         read_words=n_banks)
        need = 2 * ADDR_WIDTH + 3 + 9 * word_bytes    # both addresses, 3 enables, data, mask
        if need > LFSR_BITS:
            raise ValueError(f"the probe drives {need} stimulus bits for a {word_bytes}-byte "
                             f"word; it has {LFSR_BITS}")

    def elaborate(self, platform):
        m = Module()
        s = self.sram
        m.submodules.sram = s
        clk = platform.request(platform.default_clk, dir="-")
        m.submodules.clk_buf = clk_buf = io.Buffer("i", clk)
        m.domains.sync = cd_sync = ClockDomain()
        m.d.comb += cd_sync.clk.eq(clk_buf.i)

        # a shift register with XOR feedback from five of its bits (not a maximal-length
        # LFSR, nor need it be): what matters is that every stimulus bit toggles, so that
        # Yosys can tie no SRAM input to a constant
        st = Signal(LFSR_BITS, init=1)
        m.d.sync += st.eq(Cat(st[1:], st[0] ^ st[2] ^ st[3] ^ st[5] ^ st[LFSR_BITS - 1]))
        inputs = [s.r.addr, s.r.en, s.rw.addr, s.rw.en, s.rw.we, s.rw.wdata, s.rw.wmask]
        lo = 0
        for port in inputs:             # consecutive slices of the stimulus register
            m.d.comb += port.eq(st[lo:lo + len(port)])
            lo += len(port)
        acc_r = Signal(len(s.r.data))
        acc_rw = Signal(len(s.rw.rdata))
        m.d.sync += [acc_r.eq(Cat(acc_r[1:], acc_r[0]) ^ s.r.data),
                     acc_rw.eq(Cat(acc_rw[1:], acc_rw[0]) ^ s.rw.rdata)]
        fold = Signal(8)
        m.d.comb += fold.eq(Cat(*(acc_r[i::8].xor() ^ acc_rw[i::8].xor() for i in range(8))))
        for i in range(8):
            led = platform.request("led", i, dir="-")
            m.submodules[f"led_buf_{i}"] = buf = io.Buffer("o", led)
            m.d.comb += buf.o.eq(fold[i])
        return m


def main(argv=None):
    """Place and route the probe (the module's usage).

    Bad input ends the command with one ``error:`` line, exit status 2, before anything is
    elaborated: a configuration the probe cannot build, and a ``--build-dir`` that is empty,
    a file or cannot be created (`chipotle.sim.flow.check_build_dir`).
    """
    from chipotle.cli import ArgumentParser
    from chipotle.config import ChipConfig
    from chipotle.hw.fpga.boards import BOARDS

    ecp5 = sorted(k for k, b in BOARDS.items() if b.family == "ecp5")
    parser = ArgumentParser(prog="python -m chipotle.sim.sram_probe",
                            description=__doc__.split("\nMembers\n")[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--board", default="ulx3s-85f", choices=ecp5,
                        help="the ECP5 board (default: %(default)s); a real run takes about "
                        "3 to 5 minutes of Yosys and nextpnr for the ulx3s SRAM")
    parser.add_argument("--config", default="", help="chip configuration (as make sim's "
                        "CONFIG), default: the board's")
    parser.add_argument("--build-dir", metavar="DIR", help="default: "
                        "build/fpga/sram-probe-<board>")
    args = parser.parse_args(argv)
    board = BOARDS[args.board]
    try:
        cfg = (ChipConfig.from_string(args.config, base=board.config) if args.config
               else board.config)
        top = SramProbe(sram_bytes=cfg.sram_bytes, word_bytes=cfg.word_bytes,
                        n_banks=cfg.n_banks)
    except ValueError as e:
        parser.error(f"--config {args.config}: {e}")
    given = args.build_dir is not None
    try:
        bdir = check_build_dir(args.build_dir if given
                               else build_root() / "fpga" / f"sram-probe-{args.board}")
    except ValueError as e:      # (an empty one is the option's misuse: --help's pointer)
        (parser.error if args.build_dir == "" else parser.refuse)(
            f"--build-dir {e}" if given else str(e))
    env = {k: _tool(v) for k, v in TOOLS.items()}
    os.environ.update(env)
    print(f"{args.board}: the SRAM of {cfg} alone, into {bdir}", flush=True)
    t = time.monotonic()
    platform = board.make_platform()
    # prepare + execute_local: Platform.build also wants the board's programmer
    platform.prepare(top, name="top", nextpnr_opts="--timing-allow-fail").execute_local(
        str(bdir))
    log = (bdir / "top.tim").read_text()
    util = log_utilisation(log)
    fmax = log_fmax(log)
    print(f"{args.board}: placed and routed in {time.monotonic() - t:.0f} s; "
          + ", ".join(f"{k} {util[k][0]} of {util[k][1]}"
                      for k in ("DP16KD", "TRELLIS_COMB", "TRELLIS_FF") if k in util)
          + (f"; Fmax {fmax[0]:g} MHz routed (constraint {fmax[1]:g} MHz)" if fmax
             else "; no Fmax in the log"))


if __name__ == "__main__":
    from chipotle.cli import run_main
    run_main(main)
