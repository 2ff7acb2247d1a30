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
    parameter CYCLES_LSB = 64,
    parameter DRAM_READ_LSB = 704,
    parameter DRAM_WRITE_LSB = 768
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


    // Timeline (sim/backends/rtl_timeline.py reads it): with +timeline=<file>, one line per
    // change of a unit's `busy` (its frame's RUN state, what the *_busy counters count) and of a
    // token counter, written at the rising edge where the counters see it, with the cycle
    // counter and the DRAM byte counters; `R` when a run starts. Without the plusarg nothing is
    // written (one test of a constant register per cycle). Pyverilator builds read it too: their
    // wrapper hands each model its command line (sim/verilate/pyverilator_compat.py, item 6).
    /*verilator tracing_off*/
    integer    timeline_fd = 0;
    reg [8*1024-1:0] timeline_path;
    initial begin
        if ($value$plusargs("timeline=%s", timeline_path))
            timeline_fd = $fopen(timeline_path, "w");
    end
    wire [63:0] tl_cycles = perf[CYCLES_LSB +: 64];
    wire [63:0] tl_read = perf[DRAM_READ_LSB +: 64];
    wire [63:0] tl_write = perf[DRAM_WRITE_LSB +: 64];
    wire [2:0] tl_busy = {dut.accel.store.busy, dut.accel.compute.busy, dut.accel.load.busy};
    wire [31:0] tl_index [0:2];
    wire [3:0]  tl_opcode [0:2];
    assign tl_index[0] = dut.accel.load.index;
    assign tl_index[1] = dut.accel.compute.index;
    assign tl_index[2] = dut.accel.store.index;
    assign tl_opcode[0] = dut.accel.load.opcode;
    assign tl_opcode[1] = dut.accel.compute.opcode;
    assign tl_opcode[2] = dut.accel.store.opcode;
    wire [31:0] tl_tokens [0:3];  // l2c, c2l, c2s, s2c
    assign tl_tokens[0] = 32'(dut.accel.tokens_l2c.count);
    assign tl_tokens[1] = 32'(dut.accel.tokens_c2l.count);
    assign tl_tokens[2] = 32'(dut.accel.tokens_c2s.count);
    assign tl_tokens[3] = 32'(dut.accel.tokens_s2c.count);
    reg [2:0]  tl_busy_q = 3'b0;
    reg [31:0] tl_tokens_q [0:3];
    reg        tl_running_q = 1'b0;
    reg        tl_ended_q = 1'b0;
    integer    tl_k;
    initial for (tl_k = 0; tl_k < 4; tl_k = tl_k + 1) tl_tokens_q[tl_k] = 32'd0;
    always @(posedge clk) begin
        if (timeline_fd != 0) begin
            if (running && !tl_running_q) $fwrite(timeline_fd, "R\n");
            for (tl_k = 0; tl_k < 3; tl_k = tl_k + 1)
                if (running && tl_busy[tl_k] != tl_busy_q[tl_k])
                    $fwrite(timeline_fd, "U %0d %0d %0d %0d %0d %0d %0d\n", tl_k, tl_busy[tl_k],
                            tl_cycles, tl_index[tl_k], tl_opcode[tl_k], tl_read, tl_write);
            for (tl_k = 0; tl_k < 4; tl_k = tl_k + 1)
                if (running && tl_tokens[tl_k] != tl_tokens_q[tl_k])
                    $fwrite(timeline_fd, "T %0d %0d %0d\n", tl_k, tl_cycles, tl_tokens[tl_k]);
            if ((done || error) && !tl_ended_q) $fflush(timeline_fd);
            tl_ended_q <= done || error;
            tl_busy_q <= tl_busy;
            for (tl_k = 0; tl_k < 4; tl_k = tl_k + 1) tl_tokens_q[tl_k] <= tl_tokens[tl_k];
            tl_running_q <= running;
        end
    end
    /*verilator tracing_on*/

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
