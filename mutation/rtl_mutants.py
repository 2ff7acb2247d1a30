"""Semantic mutants of the RTL generator (hdl_gen/), and the RTL tests that must kill them.

Each mutant is killed only by simulating it: the runner regenerates ``rtl/tiny/sim_top.v`` from
the mutated generator in a copy of the checkout and runs :data:`KILLERS` there (instruction-level
programs on the ``tiny`` config, RTL against the ISA simulator and the reference ops, with guard
bands). ``equivalent`` mutants are expected to survive; the line says why no test can see them.
"""

from __future__ import annotations

from mutation.rtl_mutants_control import CONTROL
from mutation.rtl_mutants_datapath import DATAPATH
from mutation.rtl_mutants_stall import STALL
from mutation.table import Mutant

CONFIG = "tiny"  # the preset whose RTL each mutant regenerates; every killer runs on it

# pytest node ids, run in this order with -x (cheap and broad first): the first failure kills.
KILLERS = (
    "tests/instruction/test_rtl_vs_isa.py::test_kernels_match_isa_simulator[tiny]",
    "tests/instruction/test_dram_stall_rtl.py",
    "tests/instruction/test_load_overlap_rtl.py",
    "tests/instruction/test_desc_prefetch_rtl.py::test_descriptors_are_read_ahead[tiny]",
    "tests/instruction/test_rtl_vs_isa.py::test_random_programs_match_isa_simulator[tiny]",
    "tests/instruction/test_conv.py::test_conv_rtl_matches_reference_and_isa[tiny]",
    "tests/instruction/test_edges_rtl.py",
    "tests/instruction/test_store_transpose.py::test_transposing_store_matches_reference_ops[tiny]",
    "tests/instruction/test_gemm_transposed.py::test_transposed_weights_read_key_rows_as_columns[tiny]",
    "tests/instruction/test_gemm_overlap_rtl.py::test_back_to_back_gemms_overlap_their_drain_exactly[tiny]",
    "tests/instruction/test_error_per_opcode.py",
    "tests/instruction/test_token_meet_rtl.py::test_push_and_pop_in_one_cycle_keep_the_count",
    "tests/instruction/test_stride_edges_rtl.py",
    "tests/instruction/test_token_flags_rtl.py",
    "tests/instruction/test_requant_ties_rtl.py::test_rtl_rounds_ties_up[tiny]",
    "tests/instruction/test_rtl_vs_isa.py::test_bad_programs_stop_with_the_right_code[tiny]",
    "tests/instruction/test_bad_program_agreement.py::test_directed_cases_stop_alike",
    "tests/instruction/test_dwconv.py::test_dwconv_rtl_matches_reference_and_isa[tiny]",
    "tests/instruction/test_dwconv_max.py::test_dwconv_max_rtl_matches_reference_and_isa[tiny]",
    "tests/instruction/test_dwconv.py::test_bad_dwconv_stops_the_rtl_with_the_same_code[tiny]",
    "tests/instruction/test_conv.py::test_bad_conv_stops_the_rtl_with_the_same_code[tiny]",
    "tests/instruction/test_conv.py::test_conv_runs_as_fast_as_the_gemm_over_its_im2col_copy[tiny]",
    "tests/instruction/test_accum_gate.py::test_accum_gate_matches_reference_ops[tiny]",
    "tests/instruction/test_accum_gate.py::test_bad_gates_stop_both_simulators",
    "tests/instruction/test_store_table.py::test_store_table_matches_reference_ops[tiny]",
    "tests/instruction/test_store_table.py::test_table_past_param_is_local_range",
    "tests/instruction/test_store_zero_point.py::test_store_zero_point_matches_reference_ops[tiny]",
    "tests/instruction/test_store_bias.py::test_store_bias_matches_reference_ops[tiny]",
    "tests/instruction/test_store_residual.py::test_store_residual_matches_reference_ops[tiny]",
    "tests/instruction/test_store_residual.py::test_bad_residuals_stop_both_simulators_alike",
    "tests/instruction/test_dma_and_postproc.py::test_postprocessing_matches_reference_ops[tiny]",
    "tests/instruction/test_dma_and_postproc.py::test_dma_sweep_with_guard_bytes[tiny]",
    "tests/instruction/test_sync_token_rtl.py",
    "tests/instruction/test_guard_bands_rtl.py",
    "tests/instruction/test_perf_counters_rtl.py",
    "tests/instruction/test_bad_program_agreement.py::test_random_programs_stop_alike",
    # (an 8x8 config: a STORE reads ACC sooner after its token than a GEMM's rows drain)
    "tests/instruction/test_gemm_overlap_rtl.py::test_back_to_back_gemms_overlap_their_drain_exactly[small_lat1]",
)

#: Every curated RTL mutant, in the order the runner takes them.
RTL_MUTANTS: list[Mutant] = [*DATAPATH, *CONTROL, *STALL]
