// Simulation-only back-pressure of the DRAM model (hdl_gen/dram_model.py): each rising edge asks
// the seeded generator in C++ (sim/csrc/cosim_dram_pause.cpp) whether the read and write channels
// are ready in the next cycle and how many extra cycles a read accepted then waits. The testbench
// chooses the profile and seed per run (sim/backends/dram_stall.py); unconfigured, both channels
// are always ready with no extra latency.
module cosim_dram_pause #(
    parameter EXTRA_BITS = 8
) (
    input  wire                  clk,
    input  wire                  rst,        // restarts the generator: pauses count from reset
    output reg                   rd_ready,
    output reg                   wr_ready,
    output reg [EXTRA_BITS-1:0]  rd_extra
);
    import "DPI-C" function int unsigned cosim_dram_pause_next(input int unsigned rst);

    initial begin
        rd_ready = 1'b1;
        wr_ready = 1'b1;
        rd_extra = {EXTRA_BITS{1'b0}};
    end

    reg [31:0] pause_bits;
    always @(posedge clk) begin
        pause_bits = cosim_dram_pause_next({31'b0, rst});
        rd_ready <= pause_bits[0];
        wr_ready <= pause_bits[1];
        rd_extra <= pause_bits[2 +: EXTRA_BITS];
    end
endmodule
