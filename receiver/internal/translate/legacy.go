package translate

import "github.com/gpuprobe/gpuprobe/record"

// The legacy default stream's implicit synchronisation, for the
// approximate spans of processes without the shim.
//
// Work enqueued on the legacy default stream (stream 0, CU_STREAM_LEGACY)
// waits for the work enqueued before it on every blocking stream, and work
// enqueued on a blocking stream waits for the legacy stream's earlier work.
// A blocking stream is one created without the non-blocking flag
// (cudaStreamCreate, cudaStreamCreateWithFlags/WithPriority and
// cuStreamCreate/WithPriority with flags & 1 == 0), or a thread's
// per-thread default stream. The host probes see the creations, so a
// launch, copy, event record or event wait on a stream that the legacy
// stream orders against adds a wait (as cudaStreamWaitEvent does) from the
// one stream on the other, up to that call's enter_ns: a sync that closes
// the legacy stream (a synchronous cudaMemcpy, the commonest) then closes
// the blocking streams' launches enqueued before the legacy stream's last
// work, and the other way round.
//
// A stream whose creation was not seen (created before the probes were
// attached, or by an entry point not probed) is not treated as blocking:
// its launches wait for their own sync, as before. Streams that PyTorch
// creates are non-blocking, so none of this applies to them. One context
// per process is assumed, as for cudaDeviceSynchronize: the legacy stream
// of one device is taken to order the blocking streams of every device.

// streamNonBlocking is CU_STREAM_NON_BLOCKING / cudaStreamNonBlocking.
const streamNonBlocking = 0x1

// maxStreamFlags bounds the per-process stream flags kept (cleared when
// full: streams then count as not known to be blocking).
const maxStreamFlags = 4096

// streamCall applies a successful stream creation or destruction.
func (p *hostProc) streamCall(r *record.HostCall) {
	if !r.API.CreatesStream() {
		delete(p.shimless.blocking, keyOf(r.API, r.Args[0], r.TID))
		return
	}
	if r.Args[0] == 0 {
		return
	}
	k := keyOf(r.API, r.Args[0], r.TID)
	if _, ok := p.shimless.blocking[k]; !ok && len(p.shimless.blocking) >= maxStreamFlags {
		clear(p.shimless.blocking)
	}
	p.shimless.blocking[k] = uint32(r.Args[1])&streamNonBlocking == 0
}

// isBlocking reports whether stream k is known to order with the legacy
// stream.
func (p *hostProc) isBlocking(k streamKey) bool {
	return k.stream == streamPerThread || p.shimless.blocking[k]
}

// legacyOrder applies the legacy stream's implicit ordering to work that a
// call entered at at enqueued on stream k.
func (p *hostProc) legacyOrder(k streamKey, at uint64) {
	if _, ok := p.shimless.capturing[k]; ok {
		return // captured work does not run now
	}
	legacy := streamKey{}
	if k != legacy {
		if p.isBlocking(k) && (len(p.shimless.streams[legacy]) > 0 || len(p.shimless.waits[legacy]) > 0) {
			p.addWait(k, streamWait{at: at, src: legacy, upTo: at})
		}
		return
	}
	var srcs []streamKey
	for s := range p.shimless.streams {
		if s != legacy && p.isBlocking(s) {
			srcs = append(srcs, s)
		}
	}
	for s := range p.shimless.waits {
		if _, open := p.shimless.streams[s]; !open && s != legacy && p.isBlocking(s) {
			srcs = append(srcs, s)
		}
	}
	for _, s := range srcs {
		p.addWait(legacy, streamWait{at: at, src: s, upTo: at})
	}
}
