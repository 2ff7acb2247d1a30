// Simulation-only DRAM storage. The bytes live in C++ (sim/csrc/cosim_dram.cpp), so the
// testbench loads and reads the whole DRAM image in-process (ctypes + numpy) instead of through
// VPI, and the clock never wakes Python. Timing (latency, one beat per cycle) is modelled by
// hdl_gen/dram_model.py around this module.
module cosim_dram_storage #(
    parameter BUS_BYTES = 16
) (
    input  wire                   clk,
    input  wire                   rd_en,
    input  wire [31:0]            rd_addr,   // BUS_BYTES-aligned
    output reg  [BUS_BYTES*8-1:0] rd_data,   // valid the cycle after rd_en
    input  wire                   wr_en,
    input  wire [31:0]            wr_addr,   // BUS_BYTES-aligned
    input  wire [BUS_BYTES*8-1:0] wr_data,
    input  wire [BUS_BYTES-1:0]   wr_strb
);
    import "DPI-C" function int unsigned cosim_dram_read32(input int unsigned addr);
    import "DPI-C" function void cosim_dram_write32(
        input int unsigned addr, input int unsigned data, input int unsigned strb);

    integer i;
    always @(posedge clk) begin
        if (rd_en)
            for (i = 0; i < BUS_BYTES / 4; i = i + 1)
                rd_data[i*32 +: 32] <= cosim_dram_read32(rd_addr + 4 * i);
        if (wr_en)
            for (i = 0; i < BUS_BYTES / 4; i = i + 1)
                if (wr_strb[i*4 +: 4] != 4'b0)
                    cosim_dram_write32(wr_addr + 4 * i, wr_data[i*32 +: 32], {28'b0, wr_strb[i*4 +: 4]});
    end
endmodule
