// Package localhost is what running servers on this machine takes, for the
// tests and the demo: a free port to give one, and a poll that waits until it
// answers (or until anything else holds).
package localhost

import (
	"context"
	"fmt"
	"net"
	"time"
)

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Poll calls cond every interval until it holds, and returns how long that
// took. It gives up when timeout has passed, with an error naming what it
// waited for and cond's last state, or when ctx ends.
func Poll(ctx context.Context, timeout, interval time.Duration, what string, cond func() (ok bool, state string)) (time.Duration, error) {
	start := time.Now()
	for {
		ok, state := cond()
		took := time.Since(start)
		if ok {
			return took, nil
		}
		if took >= timeout {
			return took, fmt.Errorf("%s: not after %v; last state: %s", what, timeout, state)
		}
		select {
		case <-ctx.Done():
			return took, fmt.Errorf("%s: %w", what, context.Cause(ctx))
		case <-time.After(interval):
		}
	}
}
