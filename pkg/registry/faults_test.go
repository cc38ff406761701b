package registry

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/buildsmith/buildsmith/test/registrytest"
)

// newTestClient returns a Client whose probes stop when the test ends.
func newTestClient(t testing.TB, opts Options) *Client {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	opts.LoopbackRegistries = true // the test registries listen on 127.0.0.1
	return New(ctx, opts)
}

// inBubble runs test in a synctest bubble, on an in-memory network: time
// moves only when every goroutine of the test waits (on a timer, a channel,
// an answer on the network), so what falls due happens in order, a hang
// lasts until its timeout without a real second passing, and
// synctest.Wait returns once the circuits, their probers and the probes
// in flight have done what is due now.
func inBubble(t *testing.T, test func(t *testing.T, network *registrytest.Network)) {
	synctest.Test(t, func(t *testing.T) { test(t, registrytest.NewNetwork()) })
}

// newBubbleClient returns a test client of the registries on network, its
// probes not jittered.
func newBubbleClient(t testing.TB, network *registrytest.Network, opts Options) *Client {
	transport := network.Transport()
	transport.MaxResponseHeaderBytes = opts.withDefaults().MaxHeaderBytes // as the default Transport's
	opts.Transport = transport
	c := newTestClient(t, opts)
	c.circuits.rules.jitter = func() float64 { return 0.5 }
	return c
}

// advance moves the bubble's time on by d, and waits until what fell due
// meanwhile is done.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// errPlace is the place err is about; zero when it names none.
func errPlace(err error) PlaceError {
	if pe, ok := PlaceOf(err); ok {
		return *pe
	}
	return PlaceError{}
}
