// Plain C++ Verilator harness for sim_top (no cocotb, no VPI callbacks): the reference point of
// `make bench` (sim/bench.py). Same verilated model, same flags, same DPI DRAM
// (sim/csrc/cosim_dram.cpp) as the cocotb-driven run; only the main loop differs.
//
//   sim_top --image FILE --dram-bytes N --insn-base A --desc-base B --desc-count C
//           [--max-cycles M] [--repeat R] [--dump FILE --dump-size N]
//
// For each repetition: load the image into the DRAM (zeroed), reset 4 cycles, pulse start, clock
// until done or error (or M cycles), and print one JSON line:
//   {"run": i, "done": b, "error": b, "error_code": n, "error_index": n, "cycles": n,
//    "wall_s": s, "cpu_s": s, "perf": "<hex of the 1024-bit perf record>"}
// `cycles` counts clock cycles from the cycle after start to done/error; `wall_s` and `cpu_s`
// (process CPU time) time that loop.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "Vtop.h"
#include "verilated.h"

extern "C" uint8_t* cosim_dram_buffer(uint64_t size);

double sc_time_stamp() { return 0; }

namespace {

struct Args {
    std::string image, dump;
    uint64_t dram_bytes = 0, dump_size = 0, max_cycles = 400000000ULL;
    uint32_t insn_base = 0, desc_base = 0, desc_count = 0;
    int repeat = 1;
};

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr,
                 "error: %s\nusage: sim_top --image FILE --dram-bytes N --insn-base A "
                 "--desc-base B --desc-count C [--max-cycles M] [--repeat R] "
                 "[--dump FILE --dump-size N]\n",
                 why);
    std::exit(2);
}

Args parse(int argc, char** argv) {
    Args a;
    for (int i = 1; i < argc; ++i) {
        const std::string key = argv[i];
        if (key.rfind("+verilator", 0) == 0) continue;  // Verilator runtime options
        if (i + 1 >= argc) usage(("missing value after " + key).c_str());
        const char* value = argv[++i];
        const uint64_t number = std::strtoull(value, nullptr, 0);
        if (key == "--image") a.image = value;
        else if (key == "--dump") a.dump = value;
        else if (key == "--dram-bytes") a.dram_bytes = number;
        else if (key == "--dump-size") a.dump_size = number;
        else if (key == "--max-cycles") a.max_cycles = number;
        else if (key == "--insn-base") a.insn_base = static_cast<uint32_t>(number);
        else if (key == "--desc-base") a.desc_base = static_cast<uint32_t>(number);
        else if (key == "--desc-count") a.desc_count = static_cast<uint32_t>(number);
        else if (key == "--repeat") a.repeat = static_cast<int>(number);
        else usage(("unknown option " + key).c_str());
    }
    if (a.image.empty() || a.dram_bytes == 0) usage("--image and --dram-bytes are required");
    return a;
}

std::vector<uint8_t> read_file(const std::string& path) {
    std::FILE* fh = std::fopen(path.c_str(), "rb");
    if (!fh) {
        std::fprintf(stderr, "error: cannot open %s\n", path.c_str());
        std::exit(2);
    }
    std::vector<uint8_t> bytes;
    uint8_t chunk[1 << 16];
    size_t got;
    while ((got = std::fread(chunk, 1, sizeof chunk, fh)) > 0) bytes.insert(bytes.end(), chunk, chunk + got);
    std::fclose(fh);
    return bytes;
}

double cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
    const Args args = parse(argc, argv);
    const std::vector<uint8_t> image = read_file(args.image);
    if (image.size() > args.dram_bytes) usage("the image is larger than the DRAM");

    auto context = std::make_unique<VerilatedContext>();
    context->commandArgs(argc, argv);
    auto top = std::make_unique<Vtop>(context.get(), "");
    uint8_t* dram = cosim_dram_buffer(args.dram_bytes);

    auto cycle = [&]() {  // one clock period: falling then rising edge
        top->clk = 0;
        top->eval();
        context->timeInc(5);
        top->clk = 1;
        top->eval();
        context->timeInc(5);
    };

    int status = 0;
    for (int run = 0; run < args.repeat; ++run) {
        std::memset(dram, 0, args.dram_bytes);
        std::memcpy(dram, image.data(), image.size());
        top->start = 0;
        top->insn_base = args.insn_base;
        top->desc_base = args.desc_base;
        top->desc_count = args.desc_count;
        top->rst = 1;
        for (int i = 0; i < 4; ++i) cycle();
        top->rst = 0;
        cycle();
        top->start = 1;
        cycle();
        top->start = 0;

        const auto t0 = std::chrono::steady_clock::now();
        const double cpu0 = cpu_seconds();
        uint64_t cycles = 0;
        while (!top->done && !top->error && cycles < args.max_cycles) {
            cycle();
            ++cycles;
        }
        const double cpu = cpu_seconds() - cpu0;
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

        std::string perf;
        char word[9];
        for (int w = 31; w >= 0; --w) {
            std::snprintf(word, sizeof word, "%08x", top->perf[w]);
            perf += word;
        }
        std::printf(
            "{\"run\": %d, \"done\": %s, \"error\": %s, \"error_code\": %u, \"error_index\": %u, "
            "\"cycles\": %llu, \"wall_s\": %.6f, \"cpu_s\": %.6f, \"perf\": \"%s\"}\n",
            run, top->done ? "true" : "false", top->error ? "true" : "false",
            static_cast<unsigned>(top->error_code), static_cast<unsigned>(top->error_index),
            static_cast<unsigned long long>(cycles), wall, cpu, perf.c_str());
        std::fflush(stdout);
        if (!top->done) status = 1;
    }
    if (!args.dump.empty()) {
        const uint64_t size = args.dump_size ? args.dump_size : image.size();
        std::FILE* fh = std::fopen(args.dump.c_str(), "wb");
        if (!fh || std::fwrite(dram, 1, size, fh) != size) {
            std::fprintf(stderr, "error: cannot write %s\n", args.dump.c_str());
            return 2;
        }
        std::fclose(fh);
    }
    top->final();
    return status;
}
