// The seeded back-pressure generator of the DRAM model (sim/hdl/cosim_dram_pause.v), in the
// manner of cocotbext-axi's pause generators: per channel, each cycle is paused with a given
// probability, or starts a burst of paused cycles; each read gets an extra latency with a given
// probability. The testbench sets the profile per run (sim/backends/dram_stall.py holds the
// profiles); until then, and with the `none` profile, nothing is ever paused.
#include <cstdint>
#include <initializer_list>

namespace {

struct Channel {
    uint32_t stall_permille = 0;  // a cycle paused on its own
    uint32_t burst_permille = 0;  // a cycle that starts a burst of paused cycles
    uint32_t burst_min = 0, burst_max = 0;  // a burst's length in cycles
    uint32_t left = 0;  // paused cycles left in the current burst
};

struct Pause {
    Channel rd, wr;
    uint32_t extra_permille = 0;  // a read with extra latency
    uint32_t extra_max = 0;  // its extra cycles: 1..extra_max
    uint64_t seed = 0;
    uint64_t state = 0;  // splitmix64, restarted from `seed` by every reset
    uint64_t counts[4] = {0, 0, 0, 0};  // paused read, paused write cycles, delayed reads, extra
};

Pause g_pause;

uint64_t next_random() {
    uint64_t z = (g_pause.state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

bool chance(uint32_t permille) { return permille && next_random() % 1000 < permille; }

uint32_t uniform(uint32_t lo, uint32_t hi) {
    return hi <= lo ? lo : lo + static_cast<uint32_t>(next_random() % (hi - lo + 1));
}

bool paused(Channel& ch) {
    if (ch.left) {
        --ch.left;
        return true;
    }
    if (chance(ch.burst_permille)) {
        ch.left = uniform(ch.burst_min, ch.burst_max) - 1;
        return true;
    }
    return chance(ch.stall_permille);
}

}  // namespace

extern "C" {

// Set the profile and seed (the same seed gives the same pauses, cycle by cycle).
void cosim_dram_pause_config(unsigned int rd_stall, unsigned int wr_stall,
                             unsigned int burst, unsigned int burst_min, unsigned int burst_max,
                             unsigned int extra, unsigned int extra_max, uint64_t seed) {
    g_pause = Pause{};
    g_pause.rd.stall_permille = rd_stall;
    g_pause.wr.stall_permille = wr_stall;
    for (Channel* ch : {&g_pause.rd, &g_pause.wr}) {
        ch->burst_permille = burst;
        ch->burst_min = burst_min ? burst_min : 1;
        ch->burst_max = burst_max;
    }
    g_pause.extra_permille = extra;
    g_pause.extra_max = extra_max > 255 ? 255 : extra_max;
    g_pause.seed = g_pause.state = seed;
}

// The next cycle's bits: 0 read ready, 1 write ready, 2.. the extra latency of a read. In reset
// the generator restarts (its seed, no burst, counts 0): the pauses of a run are a function of
// its cycles since reset, whatever the harness did before.
unsigned int cosim_dram_pause_next(unsigned int rst) {
    Pause& p = g_pause;
    if (rst) {
        p.state = p.seed;
        p.rd.left = p.wr.left = 0;
        for (uint64_t& count : p.counts) count = 0;
        return 3u;
    }
    bool unpaused = !p.rd.stall_permille && !p.wr.stall_permille && !p.rd.burst_permille &&
                    !p.extra_permille;
    if (unpaused) return 3u;
    unsigned int rd = paused(p.rd) ? 0u : 1u;
    unsigned int wr = paused(p.wr) ? 0u : 2u;
    unsigned int extra = chance(p.extra_permille) ? uniform(1, p.extra_max) : 0u;
    p.counts[0] += !rd;
    p.counts[1] += !wr;
    p.counts[2] += extra != 0;
    p.counts[3] += extra;
    return rd | wr | (extra << 2);
}

// What the generator did since the last reset (cycles, not requests: an extra latency or a
// pause counts whether or not a request came in that cycle): see Pause::counts.
void cosim_dram_pause_counts(uint64_t* out) {
    for (int i = 0; i < 4; ++i) out[i] = g_pause.counts[i];
}

}  // extern "C"
