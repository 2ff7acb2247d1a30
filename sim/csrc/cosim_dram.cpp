// DRAM storage of the simulation-only DRAM model (see sim/hdl/cosim_dram_storage.v).
// The testbench reaches it in-process: ctypes.CDLL(None).cosim_dram_buffer(size) returns the
// byte array, which Python wraps as a numpy array for bulk load and read-back.
#include <cstdint>
#include <cstring>
#include <vector>

static std::vector<uint8_t> g_dram;

// Writes at or above g_watch_from (the end of what the testbench reads back) - anywhere in the
// rest of DRAM, or past it - are counted, with the lowest such address: the guard over the whole
// DRAM that canary bytes cannot give cheaply (sim/runtime/guard.py).
static uint64_t g_watch_from = UINT64_MAX;
static uint64_t g_stray_bytes = 0;
static uint64_t g_stray_first = UINT64_MAX;

extern "C" {

// (Re)allocate `size` zeroed bytes and return them; the same buffer while the size is unchanged.
uint8_t* cosim_dram_buffer(uint64_t size) {
    if (g_dram.size() != size) g_dram.assign(size, 0);
    return g_dram.data();
}

uint64_t cosim_dram_size() { return g_dram.size(); }

// Count writes at or above `from` from now on (a new run): forget the earlier ones.
void cosim_dram_watch(uint64_t from) {
    g_watch_from = from;
    g_stray_bytes = 0;
    g_stray_first = UINT64_MAX;
}

// Bytes written at or above the watched address since cosim_dram_watch, and the lowest of them.
uint64_t cosim_dram_stray_bytes() { return g_stray_bytes; }
uint64_t cosim_dram_stray_first() { return g_stray_first; }

// Reads outside the buffer return 0 (the RTL checks ranges itself; prefetch may run past END).
unsigned int cosim_dram_read32(unsigned int addr) {
    uint32_t value = 0;
    if (static_cast<uint64_t>(addr) + 4 <= g_dram.size()) std::memcpy(&value, &g_dram[addr], 4);
    return value;
}

void cosim_dram_write32(unsigned int addr, unsigned int data, unsigned int strb) {
    for (unsigned int i = 0; i < 4; ++i) {
        uint64_t at = static_cast<uint64_t>(addr) + i;
        if (!(strb >> i & 1u)) continue;
        if (at >= g_watch_from) {
            ++g_stray_bytes;
            if (at < g_stray_first) g_stray_first = at;
        }
        if (at < g_dram.size()) g_dram[at] = static_cast<uint8_t>(data >> (8 * i));
    }
}

}  // extern "C"
