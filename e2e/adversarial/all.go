package adversarial

import "context"

// All runs every hostile class at once. Here they all run as one uid, and
// the agent keeps pre-HELLO slots per uid: a uid whose other clients keep
// dialing may see its own new connections evicted before their HELLO
// (docs/security.md), so the idle class holds its connections without
// its legitimate dial; the honest client, connected before, must keep
// every record accounted. The idle class alone checks the dial.
func All(ctx context.Context, socket string) error {
	return parallel(len(Classes), func(i int) error {
		if Classes[i].Name == "idle" {
			return idleFlood(ctx, socket, false)
		}
		return Classes[i].Run(ctx, socket)
	})
}
