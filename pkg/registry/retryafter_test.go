package registry

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestNoCallBeforeRetryAfter: once a registry answered 429 with a long
// Retry-After about a repository, no call of the Client reaches that
// repository (any operation) before that time: each fails at once as rate
// limited with the time left. Other repositories are not held. After the
// time, calls go through again.
func TestNoCallBeforeRetryAfter(t *testing.T) {
	inBubble(t, func(t *testing.T, network *registrytest.Network) {
		f := registrytest.NewOn(t, network)
		f.Push("team/app:1")
		f.Push("team/other:1")
		f.Inject("", "/team/app/manifests/", 1, registrytest.Answer(429, map[string]string{"Retry-After": "30"},
			registrytest.OCIError("TOOMANYREQUESTS", "slow down")))
		c := newBubbleClient(t, network, Options{}) // nobody waits on the circuit: it lapses
		ctx := context.Background()

		if _, err := c.As(nil).Resolve(ctx, f.Ref("team/app:1")); Classify(err).Reason != ReasonRateLimited || Classify(err).RetryAfter != 30*time.Second {
			t.Fatalf("first call: %s, Retry-After %v: %v", Classify(err).Reason, Classify(err).RetryAfter, err)
		}
		f.ForgetRequests()

		time.Sleep(10 * time.Second)
		for name, call := range map[string]func() error{
			"resolve of the same tag": func() error { _, err := c.As(nil).Resolve(ctx, f.Ref("team/app:1")); return err },
			"read of another tag of the repository": func() error {
				_, err := c.As(nil).ReadImage(ctx, f.Ref("team/app:2"), nil)
				return err
			},
		} {
			err := call()
			if e := Classify(err); e.Class != failure.Transient || e.Reason != ReasonRateLimited || e.RetryAfter != 20*time.Second || errPlace(err).Host != f.Addr {
				t.Errorf("%s 10 s after: %v %s, Retry-After %v, host %q: %v", name, e.Class, e.Reason, e.RetryAfter, errPlace(err).Host, err)
			}
		}
		if got := f.Requests(); len(got) != 0 {
			t.Errorf("requests reached the repository before its Retry-After: %v", got)
		}
		if _, err := c.As(nil).ReadImage(ctx, f.Ref("team/other:1"), nil); err != nil {
			t.Errorf("another repository is held too: %v", err)
		}

		time.Sleep(20 * time.Second)
		if _, err := c.As(nil).Resolve(ctx, f.Ref("team/app:1")); err != nil {
			t.Fatalf("after Retry-After: %v", err)
		}
	})
}

// TestShortRetryAfterIsWaitedOut: a 429 with a Retry-After within
// MaxRetryAfterWait is waited out inside the call, which then succeeds;
// a call made meanwhile on the same repository waits too: no request
// reaches it before the time the registry asked for.
func TestShortRetryAfterIsWaitedOut(t *testing.T) {
	inBubble(t, func(t *testing.T, network *registrytest.Network) {
		f := registrytest.NewOn(t, network)
		f.Push("team/app:1")
		f.Push("team/app:2")
		var mu sync.Mutex
		var at []time.Time
		record := func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			at = append(at, time.Now())
			mu.Unlock()
		}
		limitedAt := make(chan time.Time, 1)
		f.Inject("", "/team/app/manifests/1", 1, func(w http.ResponseWriter, r *http.Request) {
			limitedAt <- time.Now()
			registrytest.Answer(429, map[string]string{"Retry-After": "1"}, registrytest.OCIError("TOOMANYREQUESTS", "slow down"))(w, r)
		})
		c := newBubbleClient(t, network, Options{})
		ctx := context.Background()
		if _, err := c.As(nil).Resolve(ctx, f.Ref("team/app:2")); err != nil { // the /v2/ ping, out of the way
			t.Fatal(err)
		}
		f.Inject("", "/v2/team/app/", -1, func(w http.ResponseWriter, r *http.Request) {
			record(w, r)
			f.Handler.ServeHTTP(w, r)
		})

		done := make(chan error, 1)
		go func() {
			_, err := c.As(nil).Resolve(ctx, f.Ref("team/app:1"))
			done <- err
		}()
		limited := <-limitedAt
		// Requests sent before the 429 came back cannot have known of it.
		for left, _ := c.holds.left(f.Addr, "team/app"); left == 0; left, _ = c.holds.left(f.Addr, "team/app") {
			if time.Since(limited) > 900*time.Millisecond {
				t.Fatal("the client never held the repository after its 429")
			}
			time.Sleep(time.Millisecond)
		}
		if _, err := c.As(nil).ReadImage(ctx, f.Ref("team/app:2"), nil); err != nil {
			t.Errorf("the other tag's read: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("the limited call: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		after := 0
		for _, when := range at {
			if gap := when.Sub(limited); gap < 0 {
				continue // sent before the 429
			} else if gap < time.Second {
				t.Errorf("a request came %v after a 429 with Retry-After: 1", gap.Round(time.Millisecond))
			}
			after++
		}
		if after < 2 {
			t.Errorf("%d requests after the 429, want the limited one again and the other tag's", after)
		}
	})
}

func TestRepositoryOf(t *testing.T) {
	for path, want := range map[string]string{
		"/v2/":                                    "",
		"/v2/team/app/manifests/1":                "team/app",
		"/v2/a/b/c/blobs/sha256:00":               "a/b/c",
		"/v2/team/app/blobs/uploads/":             "team/app",
		"/v2/team/manifests/app/manifests/latest": "team/manifests/app",
		"/v2/team/app/tags/list":                  "team/app",
		"/token":                                  "",
	} {
		if got := repositoryOf(path); got != want {
			t.Errorf("repositoryOf(%q) = %q, want %q", path, got, want)
		}
	}
}

// TestWithMaxHoldWait: a call on a context that may not wait (an object with
// no status yet, see reconciler.Policy.Reconcile) fails on its first 429,
// after one request, as RateLimited with the Retry-After; the same call on
// a plain context waits the hold out and succeeds.
func TestWithMaxHoldWait(t *testing.T) {
	inBubble(t, func(t *testing.T, network *registrytest.Network) {
		f := registrytest.NewOn(t, network)
		f.Push("team/app:1")
		c := newBubbleClient(t, network, Options{})
		f.Inject("", "/team/app/manifests/1", 1, registrytest.Answer(429, map[string]string{"Retry-After": "1"}, ""))

		before := f.Requests()
		_, err := c.As(nil).Resolve(WithMaxHoldWait(context.Background(), 0), f.Ref("team/app:1"))
		fe := Classify(err)
		if fe.Reason != ReasonRateLimited || fe.RetryAfter <= 0 || fe.RetryAfter > time.Second {
			t.Fatalf("Resolve = %v (%s, Retry-After %v), want RateLimited with about 1s", err, fe.Reason, fe.RetryAfter)
		}
		if sent := len(f.Requests()) - len(before); sent > 2 { // the ping, and the manifest once
			t.Errorf("%d requests, want the one answered 429 (and the ping): %v", sent, f.Requests())
		}

		f.Inject("", "/team/app/manifests/1", 1, registrytest.Answer(429, map[string]string{"Retry-After": "1"}, ""))
		time.Sleep(time.Second) // the first hold is over
		// The call waits the second hold out, and succeeds.
		start := time.Now()
		if _, err := c.As(nil).Resolve(context.Background(), f.Ref("team/app:1")); err != nil {
			t.Errorf("a call that may wait: %v", err)
		}
		if waited := time.Since(start); waited < time.Second || waited > 2*time.Second {
			t.Errorf("the call returned after %v, want after the registry's Retry-After of 1s", waited)
		}
	})
}

// TestRetryAfterHoldsAreBounded: a registry that redirects every read to a
// fresh long path and answers there 429 with a day's Retry-After makes one
// hold, on the repository the call was about, not one per path; holds of
// paths longer than a repository hold their host; and however many places
// ask, at most maxHolds holds are kept.
func TestRetryAfterHoldsAreBounded(t *testing.T) {
	inBubble(t, func(t *testing.T, network *registrytest.Network) {
		f := registrytest.NewOn(t, network)
		f.Push("team/app:1")
		var redirects atomic.Int64
		f.Inject(http.MethodGet, "/team/app/manifests/", -1, func(w http.ResponseWriter, r *http.Request) {
			n := redirects.Add(1)
			// 16 KiB: the Location header stays under the header bound.
			http.Redirect(w, r, fmt.Sprintf("/v2/elsewhere/%d/%s/manifests/1", n, strings.Repeat("p", 16<<10)), http.StatusTemporaryRedirect)
		})
		f.Inject("", "/elsewhere/", -1, registrytest.Answer(429, map[string]string{"Retry-After": "86400"}, ""))
		c := newBubbleClient(t, network, Options{})
		ctx := context.Background()

		for range 40 {
			_, _ = c.As(nil).ReadImage(ctx, f.Ref("team/app:1"), nil)
			time.Sleep(time.Second)
		}
		if n := c.holds.holds.Len(); n != 1 {
			t.Errorf("%d holds after 40 reads redirected to fresh paths, want 1", n)
		}
		if left, _ := c.holds.left(f.Addr, "team/app"); left < 23*time.Hour {
			t.Errorf("the call's repository is held for %v, want about a day", left)
		}

		// Redirected outside /v2/: the repository the read was about is held,
		// not the host, and the message says so.
		g := registrytest.NewOn(t, network)
		g.Push("team/app:1")
		g.Push("team/other:1")
		g.Inject(http.MethodGet, "/team/app/manifests/", -1, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, fmt.Sprintf("/fresh/%d", redirects.Add(1)), http.StatusTemporaryRedirect)
		})
		g.Inject("", "/fresh/", -1, registrytest.Answer(429, map[string]string{"Retry-After": "86400"}, ""))
		_, _ = c.As(nil).ReadImage(ctx, g.Ref("team/app:1"), nil)
		_, err := c.As(nil).ReadImage(ctx, g.Ref("team/app:1"), nil) // held
		left, _ := c.holds.left(g.Addr, "team/app")
		if _, hostHeld := c.holds.holds.Get(holdKey{g.Addr, ""}); hostHeld || left < 23*time.Hour || !strings.Contains(fmt.Sprint(err), g.Addr+"/team/app ") {
			t.Errorf("a read redirected outside /v2/: host held %v, the repository for %v: %v", hostHeld, left, err)
		}
		if _, err := c.As(nil).ReadImage(ctx, g.Ref("team/other:1"), nil); err != nil {
			t.Errorf("another repository of the host: %v", err)
		}

		// A path whose repository is longer than a name may be holds the host.
		long := holdKey{"registry.example", strings.Repeat("r", maxHeldRepository+1)}
		req, _ := http.NewRequest(http.MethodGet, "https://"+long.host+"/v2/"+long.repo+"/manifests/1", nil)
		if got := heldPlace(req); got != (holdKey{long.host, ""}) {
			t.Errorf("a path of a %d-byte repository is held as %+v, want its host", len(long.repo), got)
		}

		holds := newRetryAfterHolds(time.Second)
		for i := range maxHolds + 100 {
			holds.note("registry.example", fmt.Sprintf("team/app-%d", i), 429, time.Hour)
		}
		if n := holds.holds.Len(); n != maxHolds {
			t.Errorf("%d holds kept, want at most %d", n, maxHolds)
		}
	})
}
