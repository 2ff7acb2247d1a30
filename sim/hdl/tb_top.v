// Testbench top of the accelerator simulation (sim/rtl_backend.py, sim/bench.py): sim_top
// (rtl/<config>/sim_top.v, unchanged) with one register stage on every input.
//
// Why the registers: Amaranth resets synchronously, so every register's next-state logic reads
// `rst`. While `rst` is a top-level input, Verilator must re-evaluate all of that logic in its
// input-combinational ("ico") region on every eval() - on both clock edges - in case an input
// changed. Behind a flop, the inputs reach the design only at a rising edge and the falling-edge
// eval is nearly free. The testbench drives these inputs synchronously anyway; the design sees
// them one cycle later, which changes no result or performance counter (they count from start).
// The clock is a plain input: the simulator toggles it in C++ (sim/csrc/cocotb_main.cpp,
// sim/csrc/bench_main.cpp) - no --timing, no Python per cycle.
//
// Waveform builds (+define+COSIM_WAVES) add `wave_on`: the harness dumps only while it is high
// (sim/waves/). The window comes from plusargs, read once: +wave_by=insn|cycles, +wave_from=N,
// +wave_to=M. By instruction it opens when a unit starts an instruction with index >= N and
// closes once every instruction below M has retired; by cycles it is the accelerator's cycle
// counter in [N, M). No +wave_by: the whole run. It always closes at `done`.
module tb_top #(
    parameter ERROR_CODE_BITS = 4,
    parameter PERF_BITS = 1024,
    parameter CYCLES_LSB = 64
) (
    input  wire                       clk,
    input  wire                       rst,
    input  wire                       start,
    input  wire [31:0]                insn_base,
    input  wire [31:0]                desc_base,
    input  wire [31:0]                desc_count,
    output wire                       running,
    output wire                       done,
    output wire                       error,
    output wire [ERROR_CODE_BITS-1:0] error_code,
    output wire [31:0]                error_index,
    // The whole counter record changes every cycle; waveforms show its fields (dut.perf.*).
    /*verilator tracing_off*/
    output wire [PERF_BITS-1:0]       perf
    /*verilator tracing_on*/
`ifdef COSIM_WAVES
    ,
    output wire                       wave_on
`endif
);
    reg        rst_q = 1'b1;
    reg        start_q = 1'b0;
    reg [31:0] insn_base_q = 32'b0;
    reg [31:0] desc_base_q = 32'b0;
    reg [31:0] desc_count_q = 32'b0;
    wire [31:0] insn_started;
    wire [31:0] insn_frontier;

    always @(posedge clk) begin
        rst_q <= rst;
        start_q <= start;
        insn_base_q <= insn_base;
        desc_base_q <= desc_base;
        desc_count_q <= desc_count;
    end

    sim_top dut (
        .clk(clk),
        .rst(rst_q),
        .start(start_q),
        .insn_base(insn_base_q),
        .desc_base(desc_base_q),
        .desc_count(desc_count_q),
        .running(running),
        .done(done),
        .error(error),
        .error_code(error_code),
        .error_index(error_index),
        .perf(perf),
        .insn_started(insn_started),
        .insn_frontier(insn_frontier)
    );

`ifdef COSIM_WAVES
    reg [63:0] wave_from = 64'd0;
    reg [63:0] wave_to = ~64'd0;
    reg        wave_by_insn = 1'b0;
    reg [8*8-1:0] wave_by = "";
    initial begin
        if ($value$plusargs("wave_by=%s", wave_by)) wave_by_insn = (wave_by == "insn");
        if (!$value$plusargs("wave_from=%d", wave_from)) wave_from = 64'd0;
        if (!$value$plusargs("wave_to=%d", wave_to)) wave_to = ~64'd0;
    end
    /*verilator tracing_off*/
    wire [63:0] cycles = perf[CYCLES_LSB +: 64];
    /*verilator tracing_on*/
    wire in_window = wave_by_insn
        ? ({32'd0, insn_started} > wave_from) && ({32'd0, insn_frontier} < wave_to)
        : (cycles >= wave_from) && (cycles < wave_to);
    assign wave_on = in_window && !done;
`endif
endmodule
