package adversarial

import "context"

// All runs every hostile class at once.
func All(ctx context.Context, socket string) error {
	return parallel(len(Classes), func(i int) error { return Classes[i].Run(ctx, socket) })
}
