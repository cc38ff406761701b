package registry

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"

	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// faultPath is where TestFaults injects its fault: a write's is its tag's
// manifest, not the manifests its registry probe PUTs by digest first.
func faultPath(write bool) string {
	if write {
		return "/manifests/1"
	}
	return "/manifests/"
}

// TestFaults drives the Client against a registry that injects one fault
// each, and checks the classification, the Retry-After, how many requests
// ggcr made (in-call retries for transient answers, none for 401/404), and
// that a hung registry cannot park the caller past its deadline.
func TestFaults(t *testing.T) {
	// Longer than the in-call retries (sleeps of ≈200ms and ≈600ms); in
	// the bubble, the hang cases take no real time.
	const timeout = 2 * time.Second
	type op int
	const (
		resolve op = iota
		read
		write
	)
	tests := []struct {
		name   string
		op     op
		method string // the faulty request's method
		fault  func(f *registrytest.Registry) func(http.ResponseWriter, *http.Request)
		times  int // how often the fault fires; 0 means always
		// want
		class      failure.Class // 0: success
		reason     string
		retryAfter time.Duration
		requests   int // requests with method to the manifest (or blob upload) path
	}{
		{name: "HEAD 404 falls back to one GET for diagnostics", op: resolve, method: "GET",
			fault: nil, class: failure.Waiting, reason: ReasonImageNotFound, requests: 1},
		{name: "HEAD 401", op: resolve, method: "HEAD",
			fault: func(*registrytest.Registry) func(http.ResponseWriter, *http.Request) {
				return registrytest.Answer(401, nil, "")
			},
			class: failure.Waiting, reason: ReasonUnauthorized, requests: 1},
		{name: "GET 401 with diagnostics", op: read, method: "GET",
			fault: func(*registrytest.Registry) func(http.ResponseWriter, *http.Request) {
				return registrytest.Answer(401, nil, registrytest.OCIError("UNAUTHORIZED", "authentication required"))
			},
			class: failure.Waiting, reason: ReasonUnauthorized, requests: 1},
		{name: "GET 403 DENIED", op: read, method: "GET",
			fault: func(*registrytest.Registry) func(http.ResponseWriter, *http.Request) {
				return registrytest.Answer(403, nil, registrytest.OCIError("DENIED", "requested access to the resource is denied"))
			},
			class: failure.Waiting, reason: ReasonUnauthorized, requests: 1},
		{name: "GET 404 MANIFEST_UNKNOWN", op: read, method: "GET",
			fault: func(*registrytest.Registry) func(http.ResponseWriter, *http.Request) {
				return registrytest.Answer(404, nil, registrytest.OCIError("MANIFEST_UNKNOWN", "manifest unknown"))
			},
			class: failure.Waiting, reason: ReasonImageNotFound, requests: 1},
		{name: "429 with a Retry-After longer than MaxRetryAfterWait is not waited out in-call", op: resolve, method: "HEAD",
			fault: func(*registrytest.Registry) func(http.ResponseWriter, *http.Request) {
				return registrytest.Answer(429, map[string]string{"Retry-After": "70"}, "")
			},
			class: failure.Transient, reason: ReasonRateLimited, retryAfter: 70 * time.Second, requests: 1},
		{name: "429 with Retry-After date", op: read, method: "GET",
			fault: func(*registrytest.Registry) func(http.ResponseWriter, *http.Request) {
				at := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
				return registrytest.Answer(429, map[string]string{"Retry-After": at}, registrytest.OCIError("TOOMANYREQUESTS", "slow down"))
			},
			// An HTTP date has whole seconds: the 90 s lose up to one to
			// truncation and a little more to the request's own time.
			class: failure.Transient, reason: ReasonRateLimited, retryAfter: 88 * time.Second, requests: 1},
		{name: "429 without Retry-After is retried in-call", op: resolve, method: "HEAD",
			fault: func(*registrytest.Registry) func(http.ResponseWriter, *http.Request) {
				return registrytest.Answer(429, nil, "")
			},
			class: failure.Transient, reason: ReasonRateLimited, requests: 3},
		// ggcr retries in-call by status code only, so a 403 is not retried
		// even when its diagnostic says rate limit; the requeue is.
		{name: "403 TOOMANYREQUESTS is a rate limit", op: read, method: "GET",
			fault: func(*registrytest.Registry) func(http.ResponseWriter, *http.Request) {
				return registrytest.Answer(403, nil, registrytest.OCIError("TOOMANYREQUESTS", "pull rate limit"))
			},
			class: failure.Transient, reason: ReasonRateLimited, requests: 1},
		{name: "500", op: resolve, method: "HEAD",
			fault: func(*registrytest.Registry) func(http.ResponseWriter, *http.Request) {
				return registrytest.Answer(500, nil, "")
			},
			class: failure.Transient, reason: ReasonRegistryUnavailable, requests: 3},
		{name: "502", op: read, method: "GET",
			fault: func(*registrytest.Registry) func(http.ResponseWriter, *http.Request) {
				return registrytest.Answer(502, nil, "bad gateway")
			},
			class: failure.Transient, reason: ReasonRegistryUnavailable, requests: 3},
		{name: "503 with Retry-After", op: resolve, method: "HEAD",
			fault: func(*registrytest.Registry) func(http.ResponseWriter, *http.Request) {
				return registrytest.Answer(503, map[string]string{"Retry-After": "20"}, "")
			},
			class: failure.Transient, reason: ReasonRegistryUnavailable, retryAfter: 20 * time.Second, requests: 1},
		{name: "503 UNAVAILABLE", op: read, method: "GET",
			fault: func(*registrytest.Registry) func(http.ResponseWriter, *http.Request) {
				return registrytest.Answer(503, nil, registrytest.OCIError("UNAVAILABLE", "maintenance"))
			},
			class: failure.Transient, reason: ReasonRegistryUnavailable, requests: 3},
		{name: "504", op: resolve, method: "HEAD",
			fault: func(*registrytest.Registry) func(http.ResponseWriter, *http.Request) {
				return registrytest.Answer(504, nil, "")
			},
			class: failure.Transient, reason: ReasonRegistryUnavailable, requests: 3},
		{name: "two 503s then success: in-call retries recover", op: resolve, method: "HEAD", times: 2,
			fault: func(*registrytest.Registry) func(http.ResponseWriter, *http.Request) {
				return registrytest.Answer(503, nil, "")
			},
			requests: 3},
		// Three tries by ggcr; the first is on the connection kept alive from
		// the ping, and net/http redials once by itself when a reused
		// connection breaks before any answer.
		{name: "connection reset", op: read, method: "GET",
			fault: func(*registrytest.Registry) func(http.ResponseWriter, *http.Request) { return registrytest.Reset },
			class: failure.Transient, reason: ReasonRegistryUnavailable, requests: 4},
		{name: "answer cut short", op: read, method: "GET",
			fault: func(*registrytest.Registry) func(http.ResponseWriter, *http.Request) { return registrytest.CutShort },
			class: failure.Transient, reason: ReasonRegistryUnavailable, requests: 1},
		{name: "hang", op: resolve, method: "HEAD",
			fault: func(f *registrytest.Registry) func(http.ResponseWriter, *http.Request) { return f.Hang },
			class: failure.Transient, reason: ReasonRegistryUnavailable, requests: 1},
		{name: "malformed manifest", op: read, method: "GET",
			fault: func(*registrytest.Registry) func(http.ResponseWriter, *http.Request) {
				return registrytest.MalformedManifest
			},
			class: failure.Permanent, reason: ReasonInvalidImage, requests: 1},
		{name: "push rejected with 400 MANIFEST_INVALID", op: write, method: "PUT",
			fault: func(*registrytest.Registry) func(http.ResponseWriter, *http.Request) {
				return registrytest.Answer(400, nil, registrytest.OCIError("MANIFEST_INVALID", "manifest invalid"))
			},
			class: failure.Permanent, reason: ReasonRegistryRejected, requests: 1},
		{name: "push answered 503 is retried in-call", op: write, method: "PUT",
			fault: func(*registrytest.Registry) func(http.ResponseWriter, *http.Request) {
				return registrytest.Answer(503, nil, "")
			},
			class: failure.Transient, reason: ReasonRegistryUnavailable, requests: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T, network *registrytest.Network) {
				f := registrytest.NewOn(t, network)
				tag := "team/app:1"
				if tc.fault != nil {
					f.Push(tag)
					times := tc.times
					if times == 0 {
						times = -1
					}
					// Reads fault on every method, so that a HEAD failure's
					// follow-up GET meets the same fault; writes only on theirs.
					faultMethod := ""
					if tc.op == write {
						faultMethod = tc.method
					}
					f.Inject(faultMethod, faultPath(tc.op == write), times, tc.fault(f))
				}
				f.ForgetRequests()
				c := newBubbleClient(t, network, Options{Timeout: timeout})

				start := time.Now()
				var err error
				switch tc.op {
				case resolve:
					_, err = c.As(nil).Resolve(context.Background(), f.Ref(tag))
				case read:
					_, err = c.As(nil).ReadImage(context.Background(), f.Ref(tag), nil)
				case write:
					img, _ := random.Image(256, 1)
					err = func() error {
						_, err := c.As(nil).Write(context.Background(), f.Ref("team/out:1").(name.Tag), img)
						return err
					}()
				}
				elapsed := time.Since(start)

				var got failure.Error // the zero value for no error
				if err != nil {
					got = *Classify(err)
				}
				if got.Class != tc.class {
					t.Fatalf("Class = %v, want %v (err: %v)", got.Class, tc.class, err)
				}
				if got.Reason != tc.reason {
					t.Errorf("Reason = %q, want %q (err: %v)", got.Reason, tc.reason, err)
				}
				if got.RetryAfter < tc.retryAfter || got.RetryAfter > tc.retryAfter+2*time.Second || (tc.retryAfter == 0 && got.RetryAfter != 0) {
					t.Errorf("RetryAfter = %v, want %v", got.RetryAfter, tc.retryAfter)
				}
				if err != nil && errPlace(err).Host != f.Addr {
					t.Errorf("Host = %q, want %q", errPlace(err).Host, f.Addr)
				}
				if got := f.Count(tc.method, faultPath(tc.op == write)); got != tc.requests {
					t.Errorf("%d %s requests to manifests, want %d (all: %v)", got, tc.method, tc.requests, f.Requests())
				}
				// A deadline is a promise: no operation outlives it by more
				// than ggcr's last uninterruptible retry sleep.
				if elapsed > timeout+time.Second {
					t.Errorf("returned after %v, deadline %v", elapsed, timeout)
				}
			})
		})
	}
}

func TestRefusedConnections(t *testing.T) {
	f := registrytest.New(t)
	f.Down()
	c := newTestClient(t, Options{})
	before := c.Stats()
	_, err := c.As(nil).Resolve(context.Background(), f.Ref("team/app:1"))
	if e := Classify(err); e.Class != failure.Transient || e.Reason != ReasonRegistryUnavailable {
		t.Fatalf("refused: %v / %s: %v", e.Class, e.Reason, err)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("error does not wrap ECONNREFUSED: %v", err)
	}
	if open := c.Circuits().Open(); len(open) != 1 || open[0].Place != (Place{Host: f.Addr}) {
		t.Errorf("open circuits %v, want the registry's", open)
	}
	// Refusals are not retried in-call: the circuit's probe watches the
	// registry instead. ggcr's ping races https and http for loopback
	// registries: two dials. A dial racing the listener's close just before
	// is sometimes reset instead of refused ("connect: connection reset by
	// peer", seen in tests), and resets are retried once: three.
	if diff := c.Stats().Sub(before); diff.Total() < 2 || diff.Total() > 3 {
		t.Errorf("%d requests for one refused resolve, want 2 or 3: %v", diff.Total(), diff.Requests)
	}
}

// TestClassifyErrors covers errors the fault registry cannot produce here
// (DNS, certificates) and the wrapping the classifier must see through.
func TestClassifyErrors(t *testing.T) {
	refused := &url.Error{Op: "Get", URL: "https://r.example/v2/", Err: &net.OpError{
		Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}}
	_, badRefErr := name.ParseReference("UPPER/Case")
	tests := []struct {
		name   string
		err    error
		class  failure.Class
		reason string
	}{
		{"nil", nil, 0, ""},
		{"connection refused in url.Error", refused, failure.Transient, ReasonRegistryUnavailable},
		{"wrapped twice", fmt.Errorf("resolving: %w", fmt.Errorf("HEAD: %w", refused)), failure.Transient, ReasonRegistryUnavailable},
		{"joined", errors.Join(errors.New("https failed"), refused), failure.Transient, ReasonRegistryUnavailable},
		{"NXDOMAIN", &url.Error{Op: "Get", URL: "https://nope.invalid/v2/", Err: &net.OpError{Op: "dial", Net: "tcp",
			Err: &net.DNSError{Err: "no such host", Name: "nope.invalid", IsNotFound: true}}}, failure.Transient, ReasonRegistryUnavailable},
		{"DNS timeout", &net.DNSError{Err: "i/o timeout", Name: "r.example", IsTimeout: true}, failure.Transient, ReasonRegistryUnavailable},
		{"deadline", fmt.Errorf("HEAD: %w", context.DeadlineExceeded), failure.Transient, ReasonRegistryUnavailable},
		{"unknown authority", &url.Error{Op: "Get", URL: "https://r.example/v2/", Err: x509.UnknownAuthorityError{}}, failure.Waiting, ReasonCertificateInvalid},
		{"hostname mismatch", x509.HostnameError{Host: "r.example", Certificate: &x509.Certificate{}}, failure.Waiting, ReasonCertificateInvalid},
		{"bad reference", badRefErr, failure.Permanent, ReasonInvalidReference},
		{"already classified, wrapped", fmt.Errorf("store: %w", waitingError(ReasonSecretNotFound, errors.New("x"))), failure.Waiting, ReasonSecretNotFound},
		{"unknown error", errors.New("something odd"), failure.Transient, ReasonRegistryError},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Classify(tc.err)
			if tc.err == nil {
				if got != nil {
					t.Errorf("Classify(nil) = %#v, want nil", got)
				}
				return
			}
			if got.Class != tc.class {
				t.Errorf("Class = %v, want %v", got.Class, tc.class)
			}
			if got.Reason != tc.reason {
				t.Errorf("Reason = %q, want %q", got.Reason, tc.reason)
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		status int
		value  string
		want   time.Duration
	}{
		{429, "3", 3 * time.Second},
		{503, "120", 2 * time.Minute},
		{429, now.Add(30 * time.Second).Format(http.TimeFormat), 30 * time.Second},
		{429, now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{429, "-5", 0},
		{429, "soon", 0},
		{429, "", 0},
		{429, "99999999", 24 * time.Hour},
		{500, "3", 0}, // only 429 and 503 give Retry-After that meaning
	}
	for _, tc := range tests {
		resp := &http.Response{StatusCode: tc.status, Header: http.Header{}}
		if tc.value != "" {
			resp.Header.Set("Retry-After", tc.value)
		}
		if got := parseRetryAfter(resp, now); got != tc.want {
			t.Errorf("parseRetryAfter(%d, %q) = %v, want %v", tc.status, tc.value, got, tc.want)
		}
	}
}

func TestErrorsCarryNoSecrets(t *testing.T) {
	// The Authorization header ggcr sends never reaches an error message.
	f := registrytest.New(t)
	f.Push("team/app:1")
	f.Inject("", "/manifests/", -1, registrytest.Answer(401, nil, registrytest.OCIError("UNAUTHORIZED", "bad credentials")))
	c := newTestClient(t, Options{})
	kc := staticKeychain{user: "robot", password: "s3cr3t-p4ss"}
	_, err := c.As(kc).ReadImage(context.Background(), f.Ref("team/app:1"), nil)
	if err == nil {
		t.Fatal("no error")
	}
	if strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "cm9ib3Q6") {
		t.Errorf("error leaks credentials: %v", err)
	}
}
