package registry

import (
	"context"
	"testing"
)

// newTestClient returns a Client whose probes stop when the test ends.
func newTestClient(t testing.TB, opts Options) *Client {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	opts.LoopbackRegistries = true // the test registries listen on 127.0.0.1
	return New(ctx, opts)
}
