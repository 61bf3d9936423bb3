# chipotle — top-level commands.  Quick start: `make sim`, `make test`.
#
# Every target installs what it needs by itself (a project virtual environment in
# .venv, and Icarus Verilog through apt when it is missing), idempotently: the second
# run finds everything in place and starts at once.

PYTHON      ?= python3
VENV        ?= .venv
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.chipotle-installed

# Simulator(s): `make test` runs verilator and icarus unless SIM names one; `make sim` runs
# verilator unless SIM=icarus.
SIM         ?=
# Dump waveforms (FST/VCD) from cocotb runs: WAVES=1.
WAVES       ?= 0
# pytest workers (the regression is sized for 2 cores).
JOBS        ?= 2
# Extra pytest arguments, e.g. PYTEST_ARGS="-k noc -x".
PYTEST_ARGS ?=
COMMA       := ,
EMPTY       :=
SPACE       := $(EMPTY) $(EMPTY)

# `make sim` parameters: the prompt, tokens to generate, the chip configuration (a name of
# chipotle.config.CONFIGS and/or key=value,..., e.g. CONFIG=default,mesh=4x4,sram_kib=128),
# the context to compile for (default: the model's), the clock of the tokens/s figure (default:
# the CLI's 100 MHz; BACKEND=uart: the bitstream's, which it requires), and
# the backend (default: the RTL under $(SIM); also isasim, golden, reference).
PROMPT      ?= Once upon a time
STEPS       ?= 128
# (CONFIG empty: the CLI's default, the `default` chip; BACKEND=uart: the ULX3S bitstream's)
CONFIG      ?=
CONTEXT     ?=
CLOCK_MHZ   ?=
PLACEMENT   ?= tensor
TEMPERATURE ?= 0
# sampling (TEMPERATURE > 0): top-p mass and xorshift seed (empty: the time, printed at the end)
TOPP        ?= 0.9
SEED        ?=
MODEL_DIR   ?=
# BACKEND=uart (a board running `make bitstream`'s design): its serial port and line rate
PORT        ?=
BAUD        ?=
BACKEND     ?= $(or $(SIM),verilator)

MODEL_URL   := https://huggingface.co/karpathy/tinyllamas/resolve/main/stories260K
# the published files' sha256 (../shared/models/README.md)
SHA_stories260K.bin := b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696
SHA_tok512.bin      := 037cb335abb25d1fa9e8ecae30ed2a3a8ace9302862ebcdc05d51a6bbb10c312

export WAVES

# A variable given on the command line that no target reads is refused, not ignored (a
# misspelt STEP=16 would otherwise run 128 steps): every variable the targets take, and
# the environment variables the Python side reads (CHIPOTLE_MODEL_DIR: the model files;
# CHIPOTLE_BUILD_DIR: the build cache, `chipotle.sim.flow.build_root`).
MAKE_VARIABLES := PYTHON VENV SIM WAVES JOBS PYTEST_ARGS PROMPT STEPS CONFIG CONTEXT \
                  CLOCK_MHZ PLACEMENT TEMPERATURE TOPP SEED MODEL_DIR PORT BAUD BACKEND \
                  TEST_STEPS PROMPTS BOARD SYNTH_ONLY PGO HIERARCHICAL THREADS MODEL_URL \
                  CHIPOTLE_MODEL_DIR CHIPOTLE_BUILD_DIR
# The variables each target takes (used by the hints below and by the check of the goals'
# variables further down)
RTL_VARS := SIM WAVES PGO HIERARCHICAL MODEL_DIR
TAKES_sim := $(RTL_VARS) PROMPT STEPS CONFIG CONTEXT CLOCK_MHZ PLACEMENT TEMPERATURE TOPP SEED \
             PORT BAUD BACKEND THREADS
TAKES_bench := $(RTL_VARS) PROMPTS CONFIG CONTEXT CLOCK_MHZ PLACEMENT BACKEND
TAKES_test := $(RTL_VARS) JOBS PYTEST_ARGS
TAKES_test-default := $(RTL_VARS) TEST_STEPS STEPS PYTEST_ARGS
TAKES_bitstream := BOARD CONFIG SYNTH_ONLY
TAKES_models := MODEL_DIR MODEL_URL
goals := $(or $(MAKECMDGOALS),help)
unknown_given := $(filter-out $(MAKE_VARIABLES),$(foreach v,$(.VARIABLES),\
                   $(if $(filter command line,$(origin $v)),$v)))
# the variable meant: a plural or singular away, else (Python) the same name in other case
# (prompt= -> PROMPT=), the names it begins (TEMP= -> TEMPERATURE=; at most three, those the
# goals take first: make sim MODEL= -> MODEL_DIR=, make models MODEL= -> MODEL_DIR= or
# MODEL_URL=), or the closest by
# difflib (PROMT= -> PROMPT=); the name reaches the shell in single quotes, none of its own
variable_hint = $(firstword $(filter $1S $(patsubst %S,%,$1),$(MAKE_VARIABLES)) \
  $(shell $(PYTHON) -c 'import difflib, sys; v, names = sys.argv[1].upper(), sys.argv[3:]; \
    pre = [n for n in names if n.startswith(v)]; \
    taken = set(sys.argv[2].split()); pre = [n for n in pre if n in taken] or pre; \
    print(v if v in names else "=@or@".join(pre[:3]) if pre else \
          " ".join(difflib.get_close_matches(v, names, 1, 0.75)))' \
    '$(subst ',,$1)' '$(foreach g,$(goals),$(TAKES_$g))' $(MAKE_VARIABLES) 2>/dev/null))
ifneq ($(unknown_given),)
# (each refusal one word, its spaces as @, so that the words can be joined by commas)
unknown_hinted := $(foreach v,$(unknown_given),$v=$(if $(call variable_hint,$v),@(did@you@mean@$(call \
  variable_hint,$v)=?)))
$(error $(subst @,$(SPACE),$(subst $(SPACE),$(COMMA)$(SPACE),$(strip $(unknown_hinted))))$(if \
  $(word 2,$(unknown_given)),: no target of this Makefile \
  takes these,: no target of this Makefile takes it); `make help` lists the variables of each \
  target)
endif

.PHONY: all venv iverilog ccache test test-default sim bench bitstream models lint clean distclean \
        help

# A goal that is no target is refused before any other runs (a stray word such as an
# unquoted `A;B=1` would otherwise run `make sim` first, then fail)
TARGETS := all venv iverilog ccache test test-default sim bench bitstream models lint clean \
           distclean help $(STAMP)
unknown_goals := $(filter-out $(TARGETS),$(MAKECMDGOALS))
target_names := $(filter-out all $(STAMP),$(TARGETS))
# the target meant in other case (Sim -> sim) and / or the variable meant without its value
# (PROMPT -> PROMPT=..., Sim -> sim or SIM=...), else the longest target the goal begins
# with (simulate -> sim, benchmark -> bench), else the target by difflib (simm -> sim,
# bitsream -> bitstream), or none
target_hint = $(shell $(PYTHON) -c 'import difflib, sys; g, ts, vs = sys.argv[1:]; \
    l, u, ts = g.lower(), g.upper(), ts.split(); \
    hints = [l] * (l in ts) + [u + "=..."] * (u in vs.split()); \
    pre = sorted((t for t in ts if l.startswith(t)), key=len)[-1:]; \
    print(" or ".join(hints or pre) or " ".join(difflib.get_close_matches(l, ts, 1, 0.6)))' \
    '$(subst ',,$1)' '$(target_names)' '$(MAKE_VARIABLES)' 2>/dev/null)
# one goal refused ($1), with the hint $2 if there is one
goal_refused = '$1'$(if $2, (did you mean $2?))
ifneq ($(unknown_goals),)
$(error $(foreach g,$(unknown_goals),$(call goal_refused,$g,$(call target_hint,$g)))$(if \
  $(word 2,$(unknown_goals)), are no targets, is no target) of this Makefile (its targets: \
  $(target_names); `make help`))
endif

all: help

help:
	@echo "make sim         generate a story on the chip RTL under Verilator (PROMPT=, STEPS= (default 128; 0: until"
	@echo "                 EOS or the context), SIM=icarus, CONFIG=, PLACEMENT=, TEMPERATURE=, TOPP=, SEED="
	@echo "                 (sampling), CONTEXT=, CLOCK_MHZ= (assumed clock of tokens/s, default 100; BACKEND=uart:"
	@echo "                 the bitstream's, required), MODEL_DIR=, WAVES=1 or HIERARCHICAL=0 (flat Verilator build,"
	@echo "                 ~30 min), PGO=1 (profile-guided Verilator build: 9% faster simulation, the first build"
	@echo "                 twice as long), THREADS=2 (Verilator model threads: rarely faster on 2 cores, see"
	@echo "                 docs/performance.md); BACKEND=isasim: the ISA simulator's estimate (no build),"
	@echo "                 BACKEND=golden|reference: host models only; BACKEND=uart PORT=/dev/ttyUSB0 [BAUD=]: a"
	@echo "                 board)"
	@echo "make test        run the regression (SIM=verilator|icarus, default both; WAVES=1; JOBS= pytest workers,"
	@echo "                 default 2; 0: one process; auto: one per core; PYTEST_ARGS=\"-k noc\"; MODEL_DIR=;"
	@echo "                 skipped tests listed with their reason)"
	@echo "make test-default  the default 4x4 chip under Verilator: TEST_STEPS= tokens (default 120) greedy from BOS,"
	@echo "                 bit-exact with the golden model (about 7 min from a cold build cache)"
	@echo "make bench       decode/prefill benchmark on the RTL under Verilator (slow; BACKEND=verilator"
	@echo "                 (default)|icarus|isasim (estimate, no build; about as slow per token as the cached RTL),"
	@echo "                 CONFIG=, PLACEMENT=, PROMPTS=1,64,256, CONTEXT=, CLOCK_MHZ=, MODEL_DIR=)"
	@echo "make bitstream   FPGA bitstream + resource/timing report with YoWASP tools (BOARD=ulx3s-85f|icebreaker,"
	@echo "                 CONFIG=, SYNTH_ONLY=1; docs/fpga.md): about 11-15 min on the default ulx3s chip with a"
	@echo "                 core to spare, 25-52 min beside other jobs"
	@echo "make venv        set-up: .venv with the pinned Python tools (editable chipotle), Icarus Verilog and"
	@echo "                 ccache via apt-get if absent"
	@echo "make iverilog    only the Icarus Verilog part of make venv (apt-get install iverilog when it is not on"
	@echo "                 PATH)"
	@echo "make ccache      only the ccache part of make venv (apt-get install ccache when it is not on PATH;"
	@echo "                 Verilator builds then compile their shared runtime files once)"
	@echo "make models      download stories260K.bin and tok512.bin (needs network) into MODEL_DIR= (default"
	@echo "                 ../shared/models beside the checkout, where every target looks), checking their sha256;"
	@echo "                 MODEL_URL= the folder to download from (default karpathy/tinyllamas on Hugging Face)"
	@echo "make lint        ruff on the Python sources (the pinned ruff installed into .venv on first use)"
	@echo "make clean       remove build/ (simulator builds, FPGA runs)"
	@echo "make distclean   make clean, and remove .venv"
	@echo "every target     CHIPOTLE_BUILD_DIR= (where simulator builds and FPGA runs go, default build/),"
	@echo "                 CHIPOTLE_MODEL_DIR= (as MODEL_DIR=); a variable no target takes is refused"

venv: $(STAMP) iverilog ccache

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	@touch $@

# Icarus Verilog comes from Debian's packages; install it when absent.
iverilog:
	@command -v iverilog >/dev/null 2>&1 || { \
	  echo "Icarus Verilog not found: installing it with apt-get"; \
	  SUDO=$$(test "$$(id -u)" = 0 || echo sudo); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq iverilog; }

# ccache compiles the Verilator and cocotb runtime files every Verilator build repeats once
# (chipotle.sim.toolchain.verilator_environment); a machine without it, or without apt-get,
# builds without it.
ccache:
	@command -v ccache >/dev/null 2>&1 || { \
	  echo "ccache not found: installing it with apt-get (Verilator builds share their runtime objects)"; \
	  SUDO=$$(test "$$(id -u)" = 0 || echo sudo); \
	  { $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq ccache; } || \
	  echo "ccache not installed: Verilator builds compile every file"; }

# MODEL_DIR= reaches every target (make test, make bench, make sim) as CHIPOTLE_MODEL_DIR
ifneq ($(MODEL_DIR),)
# (made absolute without $(abspath), which would split a directory name with spaces)
export CHIPOTLE_MODEL_DIR := $(if $(filter /%,$(firstword $(MODEL_DIR))),$(MODEL_DIR),$(CURDIR)/$(MODEL_DIR))
endif

# JOBS is pytest-xdist's -n: a count of workers (0: none) or auto, checked here so that the
# error names JOBS=
strip_digits = $(subst 0,,$(subst 1,,$(subst 2,,$(subst 3,,$(subst 4,,$(subst 5,,$(subst 6,,$(subst 7,,$(subst 8,,$(subst 9,,$1))))))))))
ifneq ($(filter test,$(MAKECMDGOALS)),)
ifeq ($(filter auto logical,$(value JOBS))$(if $(strip $(value JOBS)),$(if $(call strip_digits,$(strip $(value JOBS))),,ok)),)
$(error JOBS=$(value JOBS): make test takes JOBS=N, the number of pytest workers (0: in one \
  process), or JOBS=auto (one per core))
endif
endif

# -rs: the reason of every skipped test (e.g. model files not found) in the summary
test: venv
	SIM=$(or $(SIM),verilator$(COMMA)icarus) $(PY) -m pytest -n $(JOBS) --dist worksteal -rs --durations=15 $(PYTEST_ARGS)

# The slow check left out of `make test`: the default configuration's RTL, greedy from BOS
# for TEST_STEPS tokens (STEPS= on the command line also works).
TEST_STEPS  ?= 120
# make test-default's token count (STEPS= on the command line, else TEST_STEPS=) is a whole
# number of at least 1, checked here so that the error names the variable (the test module
# failed to collect with int()'s traceback)
ifneq ($(filter test-default,$(MAKECMDGOALS)),)
# the 4 x 4 chip runs under Verilator only: SIM=icarus would be ignored (unless make test,
# which takes it, is a goal too)
ifneq ($(filter command line,$(origin SIM)),)
ifneq ($(value SIM),verilator)
ifeq ($(filter test,$(MAKECMDGOALS)),)
$(error SIM=$(value SIM): make test-default runs the 4 x 4 chip under Verilator only (too slow \
  for Icarus); leave SIM out or give SIM=verilator)
endif
endif
endif
steps_var := $(if $(filter command line,$(origin STEPS)),STEPS,TEST_STEPS)
steps_given := $(strip $(value $(steps_var)))
ifeq ($(and $(steps_given),$(if $(word 2,$(steps_given)),,ok),$(if $(call strip_digits,$(steps_given)),,ok),$(subst 0,,$(steps_given))),)
$(error $(steps_var)=$(value $(steps_var)): make test-default takes $(steps_var)=N, the \
  number of tokens to generate greedily from BOS, a whole number of at least 1 (default 120))
endif
endif
test-default: venv
	STEPS=$(if $(filter command line,$(origin STEPS)),$(STEPS),$(TEST_STEPS)) $(PY) -m pytest -m slow -s $(PYTEST_ARGS) \
	  tb/driver/test_default_chip.py

# The performance benchmark of docs/performance.md: decode at each prompt length's position,
# prefill of the prompt (chipotle.sim.bench).
PROMPTS     ?= 1,64,256
bench: venv
	@$(call run_echoed,$(PY) -m chipotle.sim.bench --backend "$$CHIPOTLE_MAKE_BACKEND" \
	  $(strip --placement "$$CHIPOTLE_MAKE_PLACEMENT" --prompts "$$CHIPOTLE_MAKE_PROMPTS" \
	  $(CONFIG_OPT) $(RUN_OPTS)))

# Run a command (its words in $1) and echo it first with the values it takes from the
# environment filled in, each word quoted as a shell would need it (`shlex.join`), instead
# of make's echo of the recipe's `"$$CHIPOTLE_MAKE_..."` references; silent under `make -s`.
make_silent = $(findstring s,$(filter-out --% %=%,$(firstword $(MAKEFLAGS))))
run_echoed = set -- $1; $(if $(make_silent),,$(PY) -c \
  'import shlex, sys; print(shlex.join(sys.argv[1:]), flush=True)' "$$@" &&) exec "$$@"

# The variables of `make sim` and `make bench` reach the command through the environment,
# exactly as given: the shell never parses their text (quotes, `$`, `;`, backquotes,
# newlines) and make does not expand it (a command-line variable is expanded when make
# exports it: unexport).  A value given on the command line or in the environment is taken
# as it is; the Makefile's defaults are expanded.
MAKE_PASSED := PROMPT CONFIG STEPS TEMPERATURE TOPP SEED CONTEXT CLOCK_MHZ PLACEMENT BACKEND \
               THREADS PROMPTS PORT BAUD
unexport $(MAKE_PASSED)
given = $(if $(filter command line environment override,$(origin $1)),$(value $1),$($1))
$(foreach v,$(MAKE_PASSED),$(eval sim bench: export CHIPOTLE_MAKE_$v = $$(call given,$v)))
# SIM names the simulator of `make sim` / `make bench` (BACKEND's default): check it here, so
# that the error names SIM= rather than the CLI's --backend (unless BACKEND= is given: then
# SIM does not matter)
ifneq ($(filter sim bench,$(MAKECMDGOALS)),)
ifeq ($(origin BACKEND),file)
ifneq ($(filter-out verilator icarus,$(value SIM)),)
# (the simulator meant, as `make test`'s refusal names it: chipotle.sim.toolchain's
# simulator_hint, from the set-up's Python, so none before `make venv`)
sim_hint := $(if $(wildcard $(PY)),$(shell $(PY) -c 'import sys; \
    from chipotle.sim.toolchain import simulator_hint; print(simulator_hint(sys.argv[1]))' \
    '$(subst ',,$(value SIM))' 2>/dev/null))
$(error SIM=$(value SIM)$(sim_hint): make sim and make bench take SIM=verilator or SIM=icarus (or BACKEND=isasim, golden, reference))
endif
endif
# the simulator's own variables, given on the command line to a backend that runs no RTL
# simulator, are refused rather than ignored (only the command line's: `make test` passes
# SIM and WAVES to its tests' runs in the environment)
ifneq ($(filter-out verilator icarus,$(call given,BACKEND)),)
$(foreach v,SIM WAVES PGO HIERARCHICAL,$(if $(filter command line,$(origin $v)),\
  $(error $v=$(value $v) applies to the RTL simulators (BACKEND=verilator or icarus), not BACKEND=$(call given,BACKEND))))
endif
# Verilator's build options under Icarus
ifeq ($(call given,BACKEND),icarus)
$(foreach v,PGO HIERARCHICAL,$(if $(filter command line,$(origin $v)),\
  $(error $v=$(value $v) is a Verilator build option; the simulator here is Icarus)))
endif
# SIM= and BACKEND= naming two simulators: say so rather than run one of them
ifneq ($(filter command line,$(origin SIM)),)
ifneq ($(filter command line,$(origin BACKEND)),)
ifneq ($(value SIM),$(value BACKEND))
$(error SIM=$(value SIM) and BACKEND=$(value BACKEND) name two simulators: give one of them)
endif
endif
endif
# the variables of one of the two targets, given on the command line to the other
ifeq ($(filter sim,$(MAKECMDGOALS)),)
$(foreach v,PROMPT STEPS TEMPERATURE TOPP SEED THREADS PORT BAUD,$(if $(filter command line,$(origin $v)),\
  $(error $v= applies to make sim, not make bench (make bench takes PROMPTS=, the prompt lengths))))
endif
ifeq ($(filter bench,$(MAKECMDGOALS)),)
$(if $(filter command line,$(origin PROMPTS)),\
  $(error PROMPTS= applies to make bench, not make sim (make sim takes PROMPT=, the prompt text)))
endif
endif
# make bitstream's variables given to other targets are refused rather than ignored; other
# targets' variables given to make bitstream are refused below, with what it takes
# (CLOCK_MHZ=50 does not set a board's clock: the board does)
ifeq ($(filter bitstream,$(MAKECMDGOALS)),)
$(foreach v,BOARD SYNTH_ONLY,$(if $(filter command line,$(origin $v)),\
  $(error $v= applies to make bitstream, not make $(or $(MAKECMDGOALS),help))))
endif
ifneq ($(filter bitstream,$(MAKECMDGOALS)),)
ifneq ($(filter-out 0 1,$(value SYNTH_ONLY)),)
$(error SYNTH_ONLY=$(value SYNTH_ONLY): give SYNTH_ONLY=1 (stop after Yosys) or leave it out)
endif
endif
# The variables each target takes; a variable given on the command line that none of the
# goals takes is refused (`make test CONFIG=ulx3s` would run the regression unchanged).  The
# checks above name the usual mix-ups first.
given_here := $(foreach v,$(filter-out PYTHON VENV CHIPOTLE_%,$(.VARIABLES)),\
  $(if $(filter command line,$(origin $v)),$v))
not_taken := $(filter-out $(foreach g,$(goals),$(TAKES_$g)),$(given_here))
takers = $(strip $(foreach g,sim bench test test-default bitstream models,\
  $(if $(filter $1,$(TAKES_$g)),make@$g)))
ifneq ($(not_taken),)
$(error $(subst @,$(SPACE),$(subst $(SPACE),; ,$(strip $(foreach v,$(not_taken),$v=@applies@to@$(subst \
  $(SPACE),@or@,$(call takers,$v))))))$(COMMA) not make $(goals)$(if $(filter bitstream,$(goals)), \
  (make bitstream takes BOARD=$(COMMA) CONFIG= and SYNTH_ONLY=1; the clock is the board's: docs/fpga.md)))
endif
# optional `make sim` arguments, only those given (so the echoed command has no blank lines)
# (MODEL_DIR reaches the CLI as $$CHIPOTLE_MODEL_DIR, above: its errors then name it)
# (RUN_OPTS: those `make bench` takes too)
CONFIG_OPT = $(if $(value CONFIG),--config "$$CHIPOTLE_MAKE_CONFIG")
RUN_OPTS = $(strip $(if $(value CLOCK_MHZ),--clock-mhz "$$CHIPOTLE_MAKE_CLOCK_MHZ") \
  $(if $(value CONTEXT),--context "$$CHIPOTLE_MAKE_CONTEXT"))
SIM_OPTS = $(strip $(if $(value THREADS),--sim-threads "$$CHIPOTLE_MAKE_THREADS") $(RUN_OPTS) \
  $(if $(value SEED),--seed "$$CHIPOTLE_MAKE_SEED") $(if $(value PORT),--port "$$CHIPOTLE_MAKE_PORT") \
  $(if $(value BAUD),--baud "$$CHIPOTLE_MAKE_BAUD"))
sim: venv
	@$(call run_echoed,$(VENV)/bin/chipotle generate --backend "$$CHIPOTLE_MAKE_BACKEND" --prompt "$$CHIPOTLE_MAKE_PROMPT" \
	  --steps "$$CHIPOTLE_MAKE_STEPS" --temperature "$$CHIPOTLE_MAKE_TEMPERATURE" --topp "$$CHIPOTLE_MAKE_TOPP" \
	  $(strip $(CONFIG_OPT) --placement "$$CHIPOTLE_MAKE_PLACEMENT" $(SIM_OPTS)))

# `make bitstream` parameters: the board (ulx3s-85f, icebreaker); CONFIG given on the command
# line or in the environment replaces the board's chip configuration; SYNTH_ONLY=1 stops after
# Yosys.  Output and report in build/fpga/$(BOARD)/ (docs/fpga.md).
BOARD       ?= ulx3s-85f
SYNTH_ONLY  ?=
# (the options are gathered first so that make echoes the command on one line; BOARD and
# CONFIG reach it through the environment, as make sim's variables: the shell never parses
# their text)
unexport BOARD
$(foreach v,BOARD CONFIG,$(eval bitstream: export CHIPOTLE_MAKE_$v = $$(call given,$v)))
BITSTREAM_OPTS = --board "$$CHIPOTLE_MAKE_BOARD" \
  $(if $(filter command line environment,$(origin CONFIG)),--config "$$CHIPOTLE_MAKE_CONFIG") \
  $(if $(filter 1,$(value SYNTH_ONLY)),--synth-only)
bitstream: venv
	@export CHIPOTLE_MAKE_BITSTREAM=1; \
	  $(call run_echoed,$(PY) -m chipotle.sim.bitstream $(strip $(BITSTREAM_OPTS)))

# A file already there is kept only if its sha256 is the published one (a truncated or
# corrupt download is fetched again); a download is checked before it replaces anything.
models:
	@dir="$${CHIPOTLE_MODEL_DIR:-../shared/models}"; \
	if test -e "$$dir" && ! test -d "$$dir"; then \
	  echo "MODEL_DIR=$$dir is a file; give the folder that holds the model files" >&2; exit 1; fi; \
	mkdir -p "$$dir" || exit 1; \
	for pair in stories260K.bin:$(SHA_stories260K.bin) tok512.bin:$(SHA_tok512.bin); do \
	  f=$${pair%%:*}; sum=$${pair#*:}; \
	  if test -f "$$dir/$$f" && echo "$$sum  $$dir/$$f" | sha256sum -c --status; then \
	    echo "$$dir/$$f: present, sha256 the published one ($$sum)"; continue; fi; \
	  test -f "$$dir/$$f" && echo "$$dir/$$f: sha256 is not the published one: fetching it again"; \
	  curl -fL -o "$$dir/$$f.part" $(MODEL_URL)/$$f || { rm -f "$$dir/$$f.part"; \
	    echo "$(MODEL_URL)/$$f: download failed (no network?); copy stories260K.bin and" \
	      "tok512.bin into $$dir by hand, or give MODEL_DIR= the folder that holds them" >&2; \
	    exit 1; }; \
	  echo "$$sum  $$dir/$$f.part" | sha256sum -c --status || \
	    { echo "$(MODEL_URL)/$$f: the download's sha256 is not $$sum; kept $$dir/$$f.part"; exit 1; }; \
	  mv -f "$$dir/$$f.part" "$$dir/$$f" || exit 1; \
	  echo "$$dir/$$f: downloaded, sha256 the published one ($$sum)"; \
	done; ls -l "$$dir"

# the lint extra (a pinned ruff) once per pyproject.toml, not on every `make lint`
LINT_STAMP := $(VENV)/.chipotle-lint-installed
$(LINT_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e '.[lint]'
	@touch $@

lint: venv $(LINT_STAMP)
	$(VENV)/bin/ruff check sw hw sim tb

clean:
	rm -rf build .pytest_cache

distclean: clean
	rm -rf $(VENV)
