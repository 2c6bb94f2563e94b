// Package e2e runs gpuprobe end to end against real backends: the ocb-built
// collector distribution (bin/otelcol-gpuprobe), Jaeger v2 (built from its Go
// module source, memory storage) and Prometheus (built the same way, with its
// OTLP receiver on, scraping the collector's internal telemetry where a test
// asks). Nothing here is a fake backend: the tests start the real
// programs as child processes bound to 127.0.0.1 on free ports, drive data
// through the collector, and read it back through each backend's own API.
//
// The package's non-test files are the harness: starting and stopping
// processes (Process), finding or building the binaries (Binaries), and small
// clients for the Jaeger query API, PromQL and the Prometheus text format.
//
// Binaries come from the environment when set, else they are built:
//
//	GPUPROBE_OTELCOL     the collector (default: make bin/otelcol-gpuprobe, or
//	                     bin/otelcol-gpuprobe-lean for the adversarial suite and the load test)
//	GPUPROBE_HARNESS     the test harness (default: make bin/gpuprobe-harness)
//	GPUPROBE_SHIM        the shim (default: make bin/libgpuprobe.so)
//	GPUPROBE_JAEGER      Jaeger (default: scripts/build-backend.sh jaeger v1.76.0)
//	GPUPROBE_PROMETHEUS  Prometheus (default: scripts/build-backend.sh prometheus v0.315.0)
//
// Applications run through the real shim on the MOCK driver of the shim's
// tests (shim/testdata, built with gcc), each in a cgroup v2 scope of its
// own named as a container runtime names it: that test needs root and a
// writable cgroup2 hierarchy, and fails without them.
//
// Backends are cached under $GPUPROBE_CACHE (default ~/.cache/gpuprobe). The
// tests are skipped with -short, since a cold build takes many minutes.
package e2e
