package registry

import (
	"context"
	"testing"
)

// newTestClient returns a Client whose probes stop when the test ends.
func newTestClient(t testing.TB, opts Options) *Client {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return New(ctx, opts)
}
