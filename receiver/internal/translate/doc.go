// Package translate turns gpuprobe records (package record) into OTLP spans
// and metrics. It joins the records of one kernel launch (launch, warps,
// completion) under a bounded set of pending launches, maps GPU and host
// timestamps onto CLOCK_REALTIME, folds kernel names beyond a limit into
// "other", samples spans, and keeps cumulative metrics.
//
// A record flows down four stages; each owns its state and calls only the
// stages below it, never one beside or above it (stages_test.go holds the
// package to it):
//
//  1. decode (Translator, translate.go): one decoder per record type;
//     Handle dispatches a record to the stages below, in order.
//  2. per-client state (clientTable, client.go): what a source
//     said of itself: its peer, device numbers (validated against the
//     resourceBook), kernel handles and its process's metric series,
//     each within the client's budget (budget.go), and its threads'
//     application span contexts (spancontext.go). It binds a launch
//     record to its kernel and its thread's span before the record is
//     paired.
//  3. pairing (launchTable; its state in pending.go, its record path in
//     launches.go, a launch's end in lifecycle.go): the pending
//     launches, by key and per source, waiting for their device, window,
//     completion and host-call records. A finishing launch's times are
//     mapped to CLOCK_REALTIME once (times.go), for the stream gap, the
//     series and the spans. Its parts, which hand their results back to
//     it and hold no pointer to each other: graphTable (runs of CUDA
//     graph nodes, graph.go; their pairing in launches.go), windowTable
//     (driver windows, graph launch calls, coverage; windows.go,
//     graphgroups.go, coverage.go), streamTable (stream order,
//     streamgap.go) and hostTable (host calls and the shim-less
//     approximation; hostcalls.go, approx.go, legacy.go). A finished
//     launch goes to emission.
//  4. emission: spanOut (spans.go, spanlimit.go) builds the spans, reading
//     the resourceBook (resource.go) for the process and device they
//     describe; seriesStore (series.go, metrics.go) keeps the metric series.
//
// A Translator is not safe for concurrent use; the receiver drives it from
// its one poll goroutine.
package translate
