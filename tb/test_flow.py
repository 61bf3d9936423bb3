"""The cached Verilog generation of ``chipotle.sim.flow``, its make variables and its build
progress."""

import os
import subprocess

import pytest

from chipotle.hw.stream_util import SkidBuffer
from chipotle.sim import flow, toolchain


def test_generate_verilog_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("CHIPOTLE_BUILD_DIR", str(tmp_path))
    calls = []

    def factory(width=8):
        calls.append(width)
        return SkidBuffer(width)

    first = flow.generate_verilog_cached(factory, "skid", "w8")
    again = flow.generate_verilog_cached(factory, "skid", "w8")
    assert calls == [8], "the second call must come from the cache"
    assert first == again and "module skid(" in first
    assert first == flow.generate_verilog(SkidBuffer(8), name="skid")
    other = flow.generate_verilog_cached(lambda: factory(16), "skid", "w16")
    assert calls == [8, 16] and other != first
    assert len(list((tmp_path / "verilog").glob("skid-*.v"))) == 2


def test_cache_names_the_sources_the_process_imported(tmp_path, monkeypatch):
    """Sources edited on disk during a run (a bench over several prompts) do not rename what
    the run generates: its modules are the ones it imported, so the cache stays under the
    digest the process first saw, and a later process sees the new digest."""
    monkeypatch.setenv("CHIPOTLE_BUILD_DIR", str(tmp_path))
    disk = ["before the edit"]
    monkeypatch.setattr(flow, "source_digest", lambda: disk[0])
    flow._process_digest.cache_clear()
    calls = []

    def factory():
        calls.append(1)
        return SkidBuffer(8)

    flow.generate_verilog_cached(factory, "skid", "w8")
    disk[0] = "after the edit"
    flow.generate_verilog_cached(factory, "skid", "w8")
    assert len(calls) == 1 and len(list((tmp_path / "verilog").glob("skid-*.v"))) == 1
    flow._process_digest.cache_clear()         # a new process: the edited sources
    flow.generate_verilog_cached(factory, "skid", "w8")
    assert len(calls) == 2 and len(list((tmp_path / "verilog").glob("skid-*.v"))) == 2
    flow._process_digest.cache_clear()


def test_cocotb_results_are_checked(tmp_path):
    """`CocotbRun.raise_on_failure` on a synthetic cocotb results file: a failure is named
    with its message, a skipped test is not taken for a passed one, a requested test that did
    not pass (missing or skipped) is refused, and a run in which nothing passed is refused."""
    import pytest

    def results(*cases):
        path = tmp_path / f"results{len(list(tmp_path.iterdir()))}.xml"
        body = "".join(f'<testcase classname="m" name="{n}">{inner}</testcase>'
                       for n, inner in cases)
        path.write_text(f'<testsuites><testsuite name="all">{body}</testsuite></testsuites>')
        return flow._parse_results("verilator", path)

    ok = results(("a", ""), ("b", ""), ("c", "<skipped/>"))
    assert ok.passed == ["a", "b"] and ok.failed == []
    ok.raise_on_failure()
    ok.raise_on_failure(["a", "b"])
    with pytest.raises(AssertionError, match="cocotb test.s. c did not pass on verilator"):
        ok.raise_on_failure(["a", "c"])
    with pytest.raises(AssertionError, match="wormhole did not pass"):
        ok.raise_on_failure(["wormhole"])
    bad = results(("a", ""), ("b", '<failure message="flit 3 lost"/>'),
                  ("e", "<error>Traceback: boom</error>"))
    assert bad.passed == ["a"] and bad.failed == ["b", "e"]
    with pytest.raises(AssertionError, match=r"2 cocotb test\(s\) failed on verilator:\n"
                                             r"  b: flit 3 lost\n  e: Traceback: boom"):
        bad.raise_on_failure()
    with pytest.raises(AssertionError, match="no cocotb test ran on verilator"):
        results(("c", "<skipped/>")).raise_on_failure()


def _make_output(tmp_path, makefile: str, env: dict) -> str:
    """Run ``make -s`` on the Makefile text `makefile` with environment `env`; its stdout."""
    (tmp_path / "Makefile").write_text(makefile)
    return subprocess.run(["make", "-s", "-C", str(tmp_path)], env=env, capture_output=True,
                          text=True, check=True).stdout


def test_make_variables_with_spaces_reach_make_whole(tmp_path):
    """A C++ optimisation of several flags (``--cxx-opt "-O3 -march=native"``) reaches make
    as one variable: unescaped in ``$MAKEFLAGS``, make took ``-march=native`` as its own
    options (``-r`` among them: no built-in rules) and the Verilator build made nothing."""
    env = toolchain.verilator_environment(dict(os.environ, MAKEFLAGS=""),
                                          cxx_opt="-O3 -march=native")
    out = _make_output(tmp_path, "all:\n\t@echo '[$(OPT_FAST)]' '[$(CFG_CXXFLAGS_STD)]'\n", env)
    assert out.strip() == "[-O3 -march=native] [-std=c++20]"
    assert toolchain.make_assignments({"A": "x y", "B": ""}) == "A=x\\ y B="


def test_builds_compile_through_ccache_when_it_is_installed(tmp_path):
    """With ``ccache`` on ``PATH`` the builds' make sees ``OBJCACHE=ccache`` and the cache
    folder given (unless ``$CCACHE_DIR`` names one); without it, no ``OBJCACHE``."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ccache").write_text("#!/bin/sh\nexec \"$@\"\n")
    (fake / "ccache").chmod(0o755)
    show = "all:\n\t@echo '[$(OBJCACHE)]'\n"
    base = dict(os.environ, MAKEFLAGS="", PATH=f"{fake}{os.pathsep}/usr/bin:/bin")
    base.pop("CCACHE_DIR", None)
    env = toolchain.verilator_environment(base, objcache_dir=tmp_path / "cache")
    assert _make_output(tmp_path, show, env).strip() == "[ccache]"
    assert env["CCACHE_DIR"] == str(tmp_path / "cache")
    env = toolchain.verilator_environment(dict(base, CCACHE_DIR="/elsewhere"),
                                          objcache_dir=tmp_path / "cache")
    assert env["CCACHE_DIR"] == "/elsewhere"
    for without in (dict(base, PATH="/nonexistent"), base):
        env = toolchain.verilator_environment(
            without, objcache_dir=None if without is base else tmp_path / "cache")
        env["PATH"] += os.pathsep + "/usr/bin:/bin"          # make itself
        assert _make_output(tmp_path, show, env).strip() == "[]"


@pytest.mark.parametrize("value", ["-O3\t-march=native", "-O3 -Wl,-rpath,$ORIGIN",
                                   "a\\b x\\", "-DA=1 -DB==2  #%", ""])
def test_make_assignments_reach_make_as_given(tmp_path, value):
    """Tabs, ``$`` and backslashes (a trailing one too) reach make unchanged, and the next
    variable intact: make's own escapes (``$$``, a backslash before blanks and backslashes)."""
    env = dict(os.environ, MAKEFLAGS=toolchain.make_assignments({"A": value, "B": "-O1"}))
    out = _make_output(tmp_path, "$(info A=[$(value A)])\n$(info B=[$(value B)])\nall: ;\n", env)
    assert out.splitlines()[:2] == [f"A=[{value}]", "B=[-O1]"]


_TOP_CLASSES_MK = """\
VM_PARALLEL_BUILDS = 1
VM_CLASSES_FAST += \\
  Vtop \\
  Vtop___024root__0 \\

VM_CLASSES_SLOW += \\
  Vtop___024root__Slow \\

VM_SUPPORT_FAST += \\
  Vtop__Dpi \\

VM_SUPPORT_SLOW += \\
  Vtop__Syms__Slow \\

VM_GLOBAL_FAST += \\
  verilated \\
  verilated_vpi \\

VM_GLOBAL_SLOW += \\

"""
_TOP_MK = """\
VM_USER_CLASSES = \\
  verilator \\
  verilator_finish \\

include Vtop_classes.mk
include Vtop_hier.mk
verilator.o: /venv/cocotb/share/lib/verilator/verilator.cpp
\t$(OBJCACHE) $(CXX) $(CXXFLAGS) $(CPPFLAGS) $(OPT_FAST)  -c -o $@ $<
chip: $(VK_USER_OBJS) $(VK_GLOBAL_OBJS) $(VM_PREFIX)__ALL.a
\t$(LINK) $(LDFLAGS) $^ -o $@
"""
_HIER_MK = "Vblk/libblk.a: Vblk/Vblk.mk\nVtop.mk: chip.v Vtop__hierMkArgs.f Vblk/blk.sv\n"
_BLOCK_CLASSES_MK = """\
VM_PARALLEL_BUILDS = 0
VM_CLASSES_FAST += \\
  Vblk \\
  Vblk_blk__0 \\

VM_CLASSES_SLOW += \\
  Vblk_blk__Slow \\

VM_GLOBAL_FAST += \\

"""
_BLOCK_MK = """\
VM_USER_CLASSES = \\

include Vblk_classes.mk
libblk.a: $(VK_OBJS) $(VK_USER_OBJS) $(VK_GLOBAL_OBJS) blk.o $(VM_HIER_LIBS)
"""


def _verilated_build_dir(root):
    """Write the makefiles of a hierarchical Verilator build into `root`: a top of 5 classes
    built one by one, 2 runtime and 2 user files; a block of 3 classes built as one
    ``__ALL.cpp`` (``VM_PARALLEL_BUILDS = 0``) and its library wrapper ``blk.o``: 11 files."""
    (root / "Vblk").mkdir(parents=True)
    for path, text in [("Vtop_classes.mk", _TOP_CLASSES_MK), ("Vtop.mk", _TOP_MK),
                       ("Vtop_hier.mk", _HIER_MK), ("Vblk/Vblk_classes.mk", _BLOCK_CLASSES_MK),
                       ("Vblk/Vblk.mk", _BLOCK_MK)]:
        (root / path).write_text(text)
    return 11


_COMPILES = [
    "make[1]: Entering directory '/build/verilator/top-0'",
    "c++  -I.  -MMD -DVL_USER_FINISH -std=c++20 -O3  -c -o verilator.o /venv/verilator.cpp",
    "c++ -O3  -I.  -MMD -std=c++20 -E Vtop__pch.h -o Vtop__pch.h.fast.gch",
    "ccache /usr/bin/x86_64-linux-gnu-g++ -O3 -I. -MMD -std=c++20  -c Vtop.cpp",
    "%Warning-WIDTH: chip.v:1:1: c++ -c is not a command here",
    "c++    verilator.o Vtop__ALL.a  -o chip",
]


def test_verilator_build_counts_its_files(tmp_path):
    """`compiled_cxx_files` counts the compiles to an object only (not the precompiled
    headers' ``-E``, the link or a warning's text), through ``ccache`` and a compiler's
    path; `verilated_cxx_files` counts the files make will compile: each generated class, or
    one ``__ALL.cpp`` for a design Verilator builds in one piece, the runtime, the user's
    files and a hierarchy block's wrapper; None before Verilator has written its lists."""
    assert flow.compiled_cxx_files("\n".join(_COMPILES)) == 2
    assert flow.verilated_cxx_files(tmp_path) is None
    assert _verilated_build_dir(tmp_path) == flow.verilated_cxx_files(tmp_path) == 11


def test_build_progress_gives_the_total(tmp_path, capsys):
    """A Verilator build's progress lines say how many of its C++ files are compiled (``2 of
    11``: they gave the files compiled so far without a total, a fresh user's finding); none
    before make compiles, when the total is not known yet."""
    import time
    log = tmp_path / "build.log"
    log.write_text("")
    with flow._build_progress(log, "verilator build of top", every=0.02):
        time.sleep(0.1)
        early = capsys.readouterr().err
        _verilated_build_dir(tmp_path)
        log.write_text("\n".join(_COMPILES) + "\n")
        for _ in range(200):
            time.sleep(0.02)
            err = capsys.readouterr().err
            if "C++ files" in err:
                break
    assert "verilator build of top:" in early and "C++" not in early, early
    assert "2 of 11 C++ files compiled" in err, err


def test_an_interrupted_build_is_not_reported_as_failed(tmp_path, capsys):
    """Ctrl-C during a simulator build (make stopped too) is one line, ``... interrupted
    after N s``, not ``FAILED`` and 40 lines of make's ``Interrupt`` log (session 39's fresh
    user); a build that fails still shows its log's last lines."""
    import pytest
    log = tmp_path / "build.log"
    log.write_text("make[2]: *** [Vtop.mk:1: a.o] Interrupt\n")
    with pytest.raises(KeyboardInterrupt), flow._build_progress(log, "verilator build of top"):
        raise KeyboardInterrupt
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("chipotle.sim.flow: verilator build of top "
                                           "interrupted after "), err
    assert "FAILED" not in err and "Interrupt\n" not in err, err
    with pytest.raises(RuntimeError), flow._build_progress(log, "verilator build of top"):
        raise RuntimeError("Command failed with return code: 2")
    err = capsys.readouterr().err
    assert "verilator build of top FAILED; last lines of" in err and "] Interrupt" in err, err
