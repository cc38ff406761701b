package registry

import (
	"context"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// newTestClient returns a Client whose probes stop when the test ends.
func newTestClient(t testing.TB, opts Options) *Client {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	opts.LoopbackRegistries = true // the test registries listen on 127.0.0.1
	return New(ctx, opts)
}

// fakeTime is the time of a test client's circuits: it moves only when the
// test advances it, and probes are not jittered. The wire keeps real time
// (a hang is still cut by the answer timeout).
type fakeTime struct {
	t     testing.TB
	c     *Client
	clock *testingclock.FakeClock
}

// newFakeTimeClient returns a test client on a fake clock.
func newFakeTimeClient(t testing.TB, opts Options) (*Client, *fakeTime) {
	clock := testingclock.NewFakeClock(time.Now())
	opts.Clock = clock
	c := newTestClient(t, opts)
	c.circuits.rules.jitter = func() float64 { return 0.5 }
	return c, &fakeTime{t: t, c: c, clock: clock}
}

// advance moves the time on by d, in steps of 10ms, letting the circuits
// do what falls due at each before the next, as real time would.
func (ft *fakeTime) advance(d time.Duration) {
	ft.t.Helper()
	// What the test did before (a circuit opened, a waiter added) nudges
	// probers: they tick before the clock moves. A prober ticking while it
	// moves would arm its timer past the time it records as its next, and
	// settle would wait for a tick that never comes.
	ft.settle(false)
	for d > 0 {
		step := min(d, 10*time.Millisecond)
		ft.clock.Step(step)
		d -= step
		ft.settle(false)
	}
}

// settle waits until the circuits have done what is due now: every prober
// has ticked and waits for a later time, and, unless hung allows probes
// that wait on a hang, every probe has been answered and its waiters woken.
func (ft *fakeTime) settle(hung bool) {
	ft.t.Helper()
	c := ft.c.circuits
	eventually(ft.t, "the circuits settle", func() bool {
		c.mu.Lock()
		now := c.clock.Now()
		for _, p := range c.probers {
			if !p.next.After(now) {
				c.mu.Unlock()
				return false
			}
		}
		c.mu.Unlock()
		// Read after the probers' times: a tick that ended before has
		// counted the probes it started.
		return c.ticksPending.Load() == 0 && (hung || c.probesRunning.Load() == 0)
	})
}

// eventually waits until cond holds, checking every millisecond for up to
// 10 s of real time (work on the wire, over loopback), and fails the test
// if it never does.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	poll := time.NewTicker(time.Millisecond)
	defer poll.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		<-poll.C
	}
}

// errPlace is the place err is about; zero when it names none.
func errPlace(err error) PlaceError {
	if pe, ok := PlaceOf(err); ok {
		return *pe
	}
	return PlaceError{}
}
