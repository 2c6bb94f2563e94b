// Package procres builds the OpenTelemetry resource of a process that the
// receiver reports on: what the collector knows of it itself (its pid
// from SO_PEERCRED, its executable and container from /proc, the host),
// and what the application says of itself (OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, sent by its shim in HELLO), which can name its
// service but never override the collector's facts nor claim what the
// pipeline's processors add (k8s.*, host.*, cloud.*: claims.go).
package procres
