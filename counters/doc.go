// Package counters holds the C sources of gpuprobe-counters, the per-node
// sampler of GPU hardware counters (CUPTI PM sampling), and its tests.
// There is no Go API: the program is built by counters/counters.mk (`make
// bin/gpuprobe-counters`) with gcc and no CUDA header or library; it loads
// libcuda and libcupti with dlopen at run time (src/load.c) and declares
// the ABI it uses itself (src/cupti_pm.h, checked against the toolkit's
// headers on the GPU machine by src/abi_check.cc).
//
// The tests run it against a stand-in libcupti and libcuda
// (testdata/mock_cupti.c): the default metric set picked from a chip's
// enumeration, metrics left out (not offered, a second pass), every sample
// written once and in order across counter-data-image reuse, and the
// fail-open exits: no PM sampling in this CUPTI, no driver, the device held
// by another profiler. docs/counters.md says what it measures and why it
// runs apart from the collector and the shim.
package counters
