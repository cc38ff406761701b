package registry

import (
	"context"
	"testing"
	"time"

	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestNoCallBeforeRetryAfter: once a registry answered 429 with
// Retry-After, no call of the Client reaches it (any repository, any
// operation) before that time; each such call fails at once as rate
// limited with the time left; after it, calls go through again.
func TestNoCallBeforeRetryAfter(t *testing.T) {
	f := registrytest.New(t)
	f.Push("team/app:1")
	f.Push("team/other:1")
	f.Inject("", "/team/app/manifests/", 1, registrytest.Answer(429, map[string]string{"Retry-After": "30"},
		registrytest.OCIError("TOOMANYREQUESTS", "slow down")))
	c := newTestClient(t, Options{})
	now := time.Now()
	c.waits.now = func() time.Time { return now }
	ctx := context.Background()

	if _, err := c.Resolve(ctx, f.Ref("team/app:1"), nil); Reason(err) != ReasonRateLimited || RetryAfter(err) != 30*time.Second {
		t.Fatalf("first call: %s, Retry-After %v: %v", Reason(err), RetryAfter(err), err)
	}
	f.ForgetRequests()

	now = now.Add(10 * time.Second)
	for name, call := range map[string]func() error{
		"resolve of the same tag": func() error { _, err := c.Resolve(ctx, f.Ref("team/app:1"), nil); return err },
		"read of another repository": func() error {
			_, err := c.ReadImage(ctx, f.Ref("team/other:1"), nil, nil)
			return err
		},
	} {
		err := call()
		if Classify(err) != Transient || Reason(err) != ReasonRateLimited || RetryAfter(err) != 20*time.Second || Host(err) != f.Addr {
			t.Errorf("%s 10 s after: %v %s, Retry-After %v, host %q: %v", name, Classify(err), Reason(err), RetryAfter(err), Host(err), err)
		}
	}
	if got := f.Requests(); len(got) != 0 {
		t.Errorf("requests reached the registry before its Retry-After: %v", got)
	}

	now = now.Add(20 * time.Second)
	if _, err := c.Resolve(ctx, f.Ref("team/app:1"), nil); err != nil {
		t.Fatalf("after Retry-After: %v", err)
	}
}
