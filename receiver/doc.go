// Package receiver is the gpuprobe OpenTelemetry Collector receiver (type
// "gpuprobe"). It serves the agent socket that CUDA applications' shim
// connects to, polls the shared-memory rings the shim and the GPU write
// records into, and turns the records into spans and metrics (see
// docs/telemetry.md for every name, unit and attribute).
package receiver

//go:generate go tool mdatagen metadata.yaml
