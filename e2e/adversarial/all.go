package adversarial

import (
	"context"

	"github.com/gpuprobe/gpuprobe/gpuprobe/agent"
)

// All runs every hostile class at once. Here they all run as one uid, and
// the agent keeps pre-HELLO slots per uid: a uid whose other clients keep
// dialing may see its own new connections evicted before their HELLO
// (docs/security.md), so the idle class holds its connections without
// its legitimate dial; the honest client, connected before, must keep
// every record accounted. The idle class alone checks the dial. The
// rings class is held to the node's ring budget here, not to its uid's
// share: the other classes' root sessions map rings too.
func All(ctx context.Context, socket string) error {
	return parallel(len(Classes), func(i int) error {
		switch Classes[i].Name {
		case "idle":
			return idleFlood(ctx, socket, false)
		case "rings":
			return ringHog(ctx, socket, agent.DefaultRingMemory)
		}
		return Classes[i].Run(ctx, socket)
	})
}
