// cocotb + Verilator main loop with a clock generated in C++.
//
// Derived from cocotb's share/lib/verilator/verilator.cpp (cocotb 2.1):
//   Copyright cocotb contributors
//   Licensed under the Revised BSD License, see LICENSE for details.
//   SPDX-License-Identifier: BSD-3-Clause
//
// Differences from cocotb's harness (sim/verilator_build.py builds with it):
// * With -DCOSIM_CLOCK=<port> the harness toggles that top-level input every half period
//   (-DCOSIM_CLOCK_PERIOD_NS, default 10; first rising edge at half a period), as
//   `always #5 clk = ~clk` would, but without --timing and without waking Python. The testbench
//   must not drive the clock itself (sim/cocotb_job.py checks COSIM_HARNESS_CLOCK).
// * Quiet stretches: when a whole time step ran no VPI callback, nothing but value-change
//   callbacks can be due before the next timed callback (cocotb Timer), so the clock edges up
//   to it are simulated with eval_step / callValueCbs / eval_end_step only. As soon as a
//   value-change callback fires (e.g. RisingEdge(dut.done)), that time step is finished through
//   the full cocotb region sequence and the loop returns to the general path. Event order and
//   simulation times seen by cocotb are the same as in the general loop.
// * With -DCOSIM_TRACE_GATE=<port> (and --trace) the trace file is opened when that top-level
//   output first goes high, written while it stays high, and closed when it falls: one window
//   of the run, and nothing is traced outside it (sim/waves/, sim/hdl/tb_top.v).
// * --trace-select FILE (with --trace): only the signals and scopes FILE lists are written, one
//   `LEVEL NAME` a line, handed to the trace object's dumpvars() before the file is opened
//   (WAVE_SIGNALS, sim/waves/selection.py); the build is the same for every selection.
// * --trace-names (with --trace-file F): write F's header (every traced signal, one sample at
//   time 0) and exit before cocotb starts: the names a selection is matched against.

#include <libgen.h>  // basename
#include <stdio.h>   // stderr, fprintf

#include <cstdint>
#include <fstream>  // std::ifstream
#include <memory>   // std::unique_ptr
#include <string>  // std::string

#include "Vtop.h"
#include "verilated.h"
#include "verilated_vpi.h"

#ifndef VM_TRACE_FST
#define VM_TRACE_FST 0
#endif

#if VM_TRACE
#if VM_TRACE_FST
#include <verilated_fst_c.h>
using verilated_trace_t = VerilatedFstC;
#elif VM_TRACE_SAIF
#include <verilated_saif_c.h>
using verilated_trace_t = VerilatedSaifC;
#else
#include <verilated_vcd_c.h>
using verilated_trace_t = VerilatedVcdC;
#endif
static verilated_trace_t *tfp;
static const char *trace_path;
#endif

#ifndef COSIM_CLOCK_PERIOD_NS
#define COSIM_CLOCK_PERIOD_NS 10
#endif

static vluint64_t main_time = 0;  // Current simulation time
#if VM_COVERAGE
static bool coverage_per_instance = false;
#endif

double sc_time_stamp() { return main_time; }

extern "C" {
void vlog_startup_routines_bootstrap(void);
}

static inline bool settle_value_callbacks() {
    bool cbs_called, again;
    cbs_called = again = VerilatedVpi::callValueCbs();
    while (again) {
        again = VerilatedVpi::callValueCbs();
    }
    return cbs_called;
}

static void wrap_up() {
    VerilatedVpi::callCbs(cbEndOfSimulation);
#if VM_TRACE
    if (tfp && tfp->isOpen()) {
        tfp->close();
    }
#endif
#if VM_COVERAGE
    if (coverage_per_instance) {
        Verilated::threadContextp()->coveragep()->forcePerInstance(true);
    }
    VerilatedCov::write();
#endif
}

static Vtop *trace_top;

static inline void dump_trace() {
#if VM_TRACE
    if (!tfp) return;
#ifdef COSIM_TRACE_GATE
    enum { BEFORE, OPEN, CLOSED };
    static int window = BEFORE;
    const bool on = trace_top->COSIM_TRACE_GATE;
    if (window == CLOSED || (window == BEFORE && !on)) return;
    if (window == BEFORE) {
        tfp->open(trace_path);
        window = OPEN;
    }
    tfp->dump(main_time);  // the sample where the gate falls is the window's last
    if (!on) {
        tfp->close();
        window = CLOSED;
    }
#else
    tfp->dump(main_time);
#endif
#endif
}

// Active .. ReadWrite regions of one time step; `evaluated`: the first eval_step (and the value
// callbacks after it) already ran. Returns whether any callback was called.
static bool eval_regions(Vtop *top, bool evaluated, bool trace_flush) {
    bool called = false;
    do {
        do {
            if (evaluated) {
                evaluated = false;
            } else {
                top->eval_step();
                VerilatedVpi::clearEvalNeeded();
                VerilatedVpi::doInertialPuts();
                called |= settle_value_callbacks();
            }
        } while (VerilatedVpi::evalNeeded());
        called |= VerilatedVpi::callCbs(cbReadWriteSynch);
        VerilatedVpi::doInertialPuts();
        called |= settle_value_callbacks();
    } while (VerilatedVpi::evalNeeded());

    top->eval_end_step();
    called |= VerilatedVpi::callCbs(cbReadOnlySynch);
    dump_trace();
#if VM_TRACE
    if (tfp && trace_flush && tfp->isOpen()) tfp->flush();
#else
    (void)trace_flush;
#endif
    return called;
}

int main(int argc, char **argv) {
#if VM_TRACE_FST
    const char *traceFile = "dump.fst";
#elif VM_TRACE_SAIF
    const char *traceFile = "dump.saif";
#else
    const char *traceFile = "dump.vcd";
#endif
    bool traceOn = false;
    bool traceFlush = false;
    bool traceNames = false;
    const char *traceSelect = nullptr;
    bool coveragePerInstance = false;

    for (int i = 1; i < argc; i++) {
        std::string arg = std::string(argv[i]);
        if (arg == "--coverage-per-instance") {
#if VM_COVERAGE
            coveragePerInstance = true;
#else
            fprintf(stderr, "Error: --coverage-per-instance requires a coverage build\n");
            return -1;
#endif
        } else if (arg == "--trace") {
#if VM_TRACE
            traceOn = true;
#else
            fprintf(stderr, "Error: --trace requires the design to be built with trace support\n");
            return -1;
#endif
        } else if (arg == "--trace-flush") {
            traceFlush = true;
        } else if (arg == "--trace-names") {
            traceNames = true;
        } else if (arg == "--trace-select") {
            if (++i < argc) {
                traceSelect = argv[i];
            } else {
                fprintf(stderr, "Error: --trace-select requires a parameter\n");
                return -1;
            }
        } else if (arg == "--trace-file") {
            if (++i < argc) {
                traceFile = argv[i];
            } else {
                fprintf(stderr, "Error: --trace-file requires a parameter\n");
                return -1;
            }
        } else if (arg == "--help") {
            fprintf(stderr,
                    "usage: %s [--coverage-per-instance] [--trace] [--trace-flush] "
                    "[--trace-file TRACEFILE] [--trace-select FILE] [--trace-names]\n\n"
                    "cocotb + Verilator sim (clock in C++)\n",
                    basename(argv[0]));
            return 0;
        }
    }

    Verilated::commandArgs(argc, argv);
#if VM_COVERAGE
    coverage_per_instance = coveragePerInstance;
#else
    (void)coveragePerInstance;
#endif
    std::unique_ptr<Vtop> top(new Vtop(""));
    trace_top = top.get();
    Verilated::fatalOnVpiError(false);  // otherwise it will fail on systemtf

#if VM_TRACE
    Verilated::traceEverOn(true);
    if (traceOn || traceNames) {
        tfp = new verilated_trace_t;
        top->trace(tfp, 99);
        trace_path = traceFile;
        if (traceSelect) {
            std::ifstream select(traceSelect);
            if (!select) {
                fprintf(stderr, "Error: cannot read the trace selection %s\n", traceSelect);
                return -1;
            }
            int level;
            std::string scope;
            while (select >> level >> scope) tfp->dumpvars(level, scope);
        }
        if (traceNames) {
            tfp->open(traceFile);
            tfp->dump(0);
            tfp->close();
            return 0;
        }
#ifndef COSIM_TRACE_GATE
        tfp->open(traceFile);
#endif
    }
#else
    (void)traceOn;
    (void)traceFile;
    (void)traceNames;
    (void)traceSelect;
#endif

    const vluint64_t NONE = static_cast<vluint64_t>(~0ULL);
#ifdef COSIM_CLOCK
    // Half a clock period in simulation time units (the time precision, e.g. 1 ps).
    vluint64_t half_period = COSIM_CLOCK_PERIOD_NS;
    for (int p = Verilated::threadContextp()->timeprecision(); p < -9; ++p) half_period *= 10;
    half_period /= 2;
    if (half_period == 0) {
        fprintf(stderr, "Error: clock period below the simulation time precision\n");
        return -1;
    }
    vluint64_t next_edge = half_period;
    top->COSIM_CLOCK = 0;
#else
    const vluint64_t next_edge = NONE;
#endif

    vlog_startup_routines_bootstrap();
    Verilated::addExitCb([](void *) { wrap_up(); }, nullptr);
    VerilatedVpi::callCbs(cbStartOfSimulation);
    settle_value_callbacks();

    bool active = true;  // a callback ran in the last time step (start-up counts as one)
    bool first = true;
    while (!Verilated::gotFinish()) {
        bool called = false;
        if (!first) {
            const vluint64_t cocotb_deadline = VerilatedVpi::cbNextDeadline();
            const vluint64_t timing_deadline = top->eventsPending() ? top->nextTimeSlot() : NONE;
            const vluint64_t deadline = std::min(cocotb_deadline, timing_deadline);
#ifdef COSIM_CLOCK
            if (!active && next_edge < deadline) {
                // Quiet stretch: until `deadline` only value-change callbacks can be due.
                bool woke = false;
                while (next_edge < deadline && !Verilated::gotFinish()) {
                    main_time = next_edge;
                    next_edge += half_period;
                    top->COSIM_CLOCK = !top->COSIM_CLOCK;
                    top->eval_step();
                    VerilatedVpi::clearEvalNeeded();
                    if (VerilatedVpi::callValueCbs()) {
                        woke = true;
                        break;
                    }
                    top->eval_end_step();
                    dump_trace();
                }
                if (woke) {
                    // A watched signal changed and Python ran: finish this time step in full.
                    settle_value_callbacks();
                    eval_regions(top.get(), true, traceFlush);
                    active = true;
                }
                continue;
            }
#endif
            const vluint64_t next_time = std::min(deadline, next_edge);
            // No clock, no timed callbacks and no timing events left: the simulation is over.
            if (next_time == NONE) break;
            main_time = next_time;
#ifdef COSIM_CLOCK
            if (main_time == next_edge) {
                top->COSIM_CLOCK = !top->COSIM_CLOCK;
                next_edge += half_period;
            }
#endif
            // cbNextSimTime, then timed callbacks (e.g. cocotb Timer), at the start of the step.
            called |= VerilatedVpi::callCbs(cbNextSimTime);
            called |= settle_value_callbacks();
            called |= VerilatedVpi::callCbs(cbAfterDelay);
            called |= settle_value_callbacks();
        }
        first = false;
        called |= eval_regions(top.get(), false, traceFlush);
        active = called;
    }

    top->final();

    wrap_up();

#if VM_TRACE
    if (tfp) {
        delete tfp;
        tfp = nullptr;
    }
#endif

    if (Verilated::threadContextp()->errorCount() > 0) {
        return 1;
    }
    return 0;
}
