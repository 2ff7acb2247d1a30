// C++ side of a pyverilator model (sim/pyverilator_build.py compiles it in as the model's
// "main"): pyverilator-mm's generated wrapper (get_<port>/set_<port>, trace helpers), plus a
// clock loop so that Python can run many cycles in one ctypes call (sim/block.py).
//
// A cycle is a rising then a falling clock edge, eval() after each, as pyverilator's
// Clock.tick(): inputs set between cycles are sampled at the next rising edge, and outputs read
// after a cycle show the state after that edge.
#include "pyverilator_wrapper.cpp"  // generated into the build directory by sim/pyverilator_compat.py

extern "C" {

typedef int (*cosim_set_fn)(Vtop*, uint32_t);
typedef uint32_t (*cosim_get_fn)(Vtop*);

// Run up to `cycles` cycles, toggling the clock through `set_clock` (the wrapper's set_<clock>).
// Stops after the first cycle at whose end one of the `nstops` getters returns non-zero.
// With `trace` (the wrapper's start_vcd_trace result) the state before each cycle is dumped at
// *time and the state after the rising edge at *time + half; *time advances by two halves per
// cycle. Returns the number of cycles run.
uint64_t cosim_clock(Vtop* top, cosim_set_fn set_clock, const cosim_get_fn* stops, uint32_t nstops,
                     uint64_t cycles, void* trace, uint64_t* time, uint64_t half) {
#if VM_TRACE
    DUMP_TYPE* tfp = static_cast<DUMP_TYPE*>(trace);
#else
    (void)trace;
#endif
    for (uint64_t n = 0; n < cycles; ++n) {
#if VM_TRACE
        if (tfp) tfp->dump(*time);
#endif
        set_clock(top, 1);
        top->eval();
        *time += half;
#if VM_TRACE
        if (tfp) tfp->dump(*time);
#endif
        set_clock(top, 0);
        top->eval();
        *time += half;
        for (uint32_t i = 0; i < nstops; ++i) {
            if (stops[i](top)) return n + 1;
        }
    }
    return cycles;
}

// The simulation time precision as a power of ten (-12: 1 ps), the unit of trace times.
int cosim_time_precision(Vtop* top) { return top->contextp()->timeprecision(); }

// Dump the current state at `time` (e.g. once more before closing a trace).
void cosim_dump(void* trace, uint64_t time) {
#if VM_TRACE
    if (trace) static_cast<DUMP_TYPE*>(trace)->dump(time);
#else
    (void)trace;
    (void)time;
#endif
}

// Close and free a trace opened by the wrapper's start_vcd_trace (which never frees it).
void cosim_close_trace(void* trace) {
#if VM_TRACE
    DUMP_TYPE* tfp = static_cast<DUMP_TYPE*>(trace);
    if (tfp) {
        tfp->close();
        delete tfp;
    }
#else
    (void)trace;
#endif
}

}  // extern "C"
