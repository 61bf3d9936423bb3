// Verilator's default vl_finish() prints "- <file>:<line>: Verilog $finish" on stdout; cocotb
// ends every run with vpi_control(vpiFinish), so each simulation would print "- :0: Verilog
// $finish" after the testbench's own output (the story of `make sim`).  With VL_USER_FINISH
// defined (chipotle.sim.toolchain.verilator_build_args) Verilator leaves vl_finish() to us:
// the same end of simulation, without the line.
#include "verilated.h"

void vl_finish(const char* filename, int linenum, const char* hier) VL_MT_UNSAFE {
    (void)filename;
    (void)linenum;
    (void)hier;
    Verilated::threadContextp()->gotFinish(true);
}
