package registry

import (
	"context"
	"fmt"
	"github.com/buildsmith/buildsmith/pkg/failure"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
)

func pings(f *registrytest.Registry) int {
	n := 0
	for _, r := range f.Requests() {
		if r == "GET /v2/" {
			n++
		}
	}
	return n
}

// TestRegistryIsPingedOnce: reads of several repositories and several
// pushes (each with a fresh pusher, each of which used to ping) ask the
// registry's /v2/ once.
func TestRegistryIsPingedOnce(t *testing.T) {
	f := registrytest.New(t)
	for _, repo := range []string{"a", "b", "c"} {
		f.Push("team/" + repo + ":1")
	}
	f.ForgetRequests() // the pushes' own pings
	c := newTestClient(t, Options{})
	ctx := context.Background()
	for _, repo := range []string{"a", "b", "c"} {
		if _, err := c.As(nil).ReadImage(ctx, f.Ref("team/"+repo+":1"), nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, repo := range []string{"x", "y"} {
		img, _ := random.Image(64, 1)
		if _, err := c.As(nil).Write(ctx, f.Ref("out/"+repo+":1").(name.Tag), img); err != nil {
			t.Fatal(err)
		}
	}
	if n := pings(f); n != 1 {
		t.Errorf("%d pings for 3 reads and 2 writes, want 1:\n%v", n, f.Requests())
	}
}

// TestPingAskedAgainAfterUnauthorized: a 401 to a request drops the
// remembered answer (the registry may have started asking for
// credentials), so the next new transport pings again.
func TestPingAskedAgainAfterUnauthorized(t *testing.T) {
	f := registrytest.New(t)
	for _, repo := range []string{"a", "b", "c"} {
		f.Push("team/" + repo + ":1")
	}
	f.ForgetRequests()
	c := newTestClient(t, Options{})
	ctx := context.Background()
	if _, err := c.As(nil).Resolve(ctx, f.Ref("team/a:1")); err != nil {
		t.Fatal(err)
	}
	f.Inject("", "/v2/team/b/", -1, registrytest.Answer(http.StatusUnauthorized,
		map[string]string{"WWW-Authenticate": `Basic realm="test"`}, registrytest.OCIError("UNAUTHORIZED", "who are you")))
	if _, err := c.As(nil).Resolve(ctx, f.Ref("team/b:1")); Classify(err).Reason != ReasonUnauthorized {
		t.Fatalf("Resolve of a refused repository: %v (%s), want %s", err, Classify(err).Reason, ReasonUnauthorized)
	}
	if n := pings(f); n != 1 {
		t.Fatalf("%d pings before the 401, want 1", n)
	}
	if _, err := c.As(nil).Resolve(ctx, f.Ref("team/c:1")); err != nil {
		t.Fatal(err)
	}
	if n := pings(f); n != 2 {
		t.Errorf("%d pings, want a second one after the 401: %v", n, f.Requests())
	}
}

// TestPingKeptThroughItsOwnChallenge: a registry that asks for credentials
// answers a refused request with the challenge its ping gave; that is no
// reason to ask again.
func TestPingKeptThroughItsOwnChallenge(t *testing.T) {
	f := registrytest.New(t)
	f.Push("team/a:1")
	f.Push("team/b:1")
	requireBasicAuth(f, "robot", "s3cr3t")
	f.ForgetRequests()
	c := newTestClient(t, Options{})
	ctx := context.Background()
	if _, err := c.As(staticKeychain{user: "robot", password: "wrong"}).Resolve(ctx, f.Ref("team/a:1")); Classify(err).Reason != ReasonUnauthorized {
		t.Fatalf("wrong password: %v", err)
	}
	if _, err := c.As(staticKeychain{user: "robot", password: "s3cr3t"}).Resolve(ctx, f.Ref("team/b:1")); err != nil {
		t.Fatal(err)
	}
	if n := pings(f); n != 1 {
		t.Errorf("%d pings, want 1: %v", n, f.Requests())
	}
}

// TestOnePingInFlight: transports made at the same time wait for one ping.
func TestOnePingInFlight(t *testing.T) {
	f := registrytest.New(t)
	repos := []string{"a", "b", "c", "d", "e", "f"}
	for _, repo := range repos {
		f.Push("team/" + repo + ":1")
	}
	f.ForgetRequests()
	f.Inject("GET", "/v2/", -1, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			time.Sleep(100 * time.Millisecond) // everyone asks meanwhile
		}
		f.Handler.ServeHTTP(w, r)
	})
	c := newTestClient(t, Options{})
	var wg sync.WaitGroup
	for _, repo := range repos {
		wg.Go(func() {
			if _, err := c.As(nil).Resolve(context.Background(), f.Ref("team/"+repo+":1")); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := pings(f); n != 1 {
		t.Errorf("%d pings for %d repositories at once, want 1", n, len(repos))
	}
}

func TestSameChallenge(t *testing.T) {
	const ping = `Bearer realm="https://auth.example/token",service="registry.example"`
	for _, tc := range []struct {
		kept, got string
		same      bool
	}{
		{ping, `Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a:pull",error="insufficient_scope"`, true},
		{ping, `bearer realm="https://auth.example/token"`, true},
		{ping, `Bearer realm="https://other.example/token",service="registry.example"`, false},
		{ping, `Basic realm="https://auth.example/token"`, false},
		{`Basic realm="r"`, `Basic realm="r"`, true},
		{"", `Basic realm="r"`, false}, // a kept 200
	} {
		if got := sameChallenge(tc.kept, tc.got); got != tc.same {
			t.Errorf("sameChallenge(%q, %q) = %v, want %v", tc.kept, tc.got, got, tc.same)
		}
	}
}

// TestPingAnswersBounded: a tenant naming thousands of registries (one
// server answering under many names), each answering its ping with a long
// challenge and megabytes of other headers, leaves at most maxPingBytes of
// answers kept: only the status and the challenge of each, none whose
// challenge is over maxChallenge; a kept answer is still used.
func TestPingAnswersBounded(t *testing.T) {
	sent := 0
	junk := strings.Repeat("j", 1<<20)
	challenge := `Bearer realm="https://auth.example/token",service="` + strings.Repeat("s", maxChallenge-110) + `"`
	answer := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		sent++
		// Two challenges, as registries offering Negotiate or Basic answer.
		header := http.Header{"X-Junk": {junk, junk, junk, junk, junk, junk, junk, junk}, "Www-Authenticate": {challenge, "Basic"}}
		if strings.HasPrefix(req.URL.Host, "long") {
			header.Set("WWW-Authenticate", challenge+strings.Repeat("x", 100))
		}
		return &http.Response{StatusCode: http.StatusUnauthorized, Header: header, Body: http.NoBody, Request: req}, nil
	})
	p := newPingCache(answer)
	ping := func(key pingKey) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, "http://"+key.host+"/v2/", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.ping(req, key); err != nil {
			t.Fatal(err)
		}
	}
	hosts := 2 * maxPingBytes / maxChallenge
	for i := range hosts {
		key := pingKey{"http", fmt.Sprintf("host%d.example:5000", i)}
		if _, ok, _ := p.lookup(key); ok {
			t.Fatalf("%s answered before its ping", key.host)
		}
		ping(key)
	}
	kept := 0
	for key, a := range p.answers {
		kept += a.cost(key)
	}
	if kept != p.bytes || p.bytes > maxPingBytes {
		t.Errorf("%d bytes kept (counted %d), want at most %d", kept, p.bytes, maxPingBytes)
	}
	last := pingKey{"http", fmt.Sprintf("host%d.example:5000", hosts-1)}
	a, ok, _ := p.lookup(last)
	if !ok {
		t.Fatal("the last answer was not kept")
	}
	replayed := a.response(&http.Request{})
	if len(replayed.Header) != 1 || !slices.Equal(replayed.Header.Values("WWW-Authenticate"), []string{challenge, "Basic"}) || replayed.StatusCode != http.StatusUnauthorized {
		t.Errorf("replayed %d with headers %d long, want 401 and the challenge alone", replayed.StatusCode, len(fmt.Sprint(replayed.Header)))
	}
	if sent != hosts {
		t.Errorf("%d pings sent, want one per host", sent)
	}
	if _, ok, _ := p.lookup(pingKey{"http", "long.example"}); ok {
		t.Fatal("long.example answered before its ping")
	}
	ping(pingKey{"http", "long.example"})
	if _, ok, _ := p.lookup(pingKey{"http", "long.example"}); ok {
		t.Errorf("a challenge over %d bytes was kept", maxChallenge)
	}
}

// TestAnswerHeadersBounded: a registry answering with more headers than
// --registry-max-header-bytes fails the request, classified, without
// the controller reading them all.
func TestAnswerHeadersBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := range 8 {
			w.Header().Set(fmt.Sprintf("X-Junk-%d", i), strings.Repeat("j", 128<<10))
		}
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(srv.Close)
	c := newTestClient(t, Options{})
	ref, _ := name.ParseReference(strings.TrimPrefix(srv.URL, "http://") + "/team/app:1")
	_, err := c.As(nil).Resolve(context.Background(), ref)
	// Waiting on the registry (or the flag), whichever scheme ggcr tried
	// first on a loopback host: not InsecureRegistry.
	if e := Classify(err); err == nil || e.Class != failure.Waiting || e.Reason != ReasonRegistryError ||
		!strings.Contains(err.Error(), "more than 64.0 KiB of headers (--registry-max-header-bytes)") {
		t.Fatalf("headers of 1 MiB: %v (%+v), want a Waiting RegistryError naming --registry-max-header-bytes", err, e)
	}
}

// TestPingStaleOnlyForItsHost: a 401 contradicting a registry's kept answer
// keeps a ping to that registry sent before it from being kept (its answer
// may be the old one), and leaves pings to other registries alone.
func TestPingStaleOnlyForItsHost(t *testing.T) {
	release := make(chan struct{})
	p := newPingCache(roundTripFunc(func(req *http.Request) (*http.Response, error) {
		<-release
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
	}))
	kept := pingAnswer{status: http.StatusUnauthorized, at: time.Now(), challenges: []string{`Bearer realm="https://auth.b.example/token"`}}
	p.answers[pingKey{"http", "b.example"}] = kept
	var wg sync.WaitGroup
	for _, host := range []string{"a.example", "b.example"} {
		key := pingKey{"https", host}
		if _, ok, wait := p.lookup(key); ok || wait != nil {
			t.Fatalf("%s: an answer or a ping already", host)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodGet, "https://"+host+"/v2/", nil)
			if _, err := p.ping(req, key); err != nil {
				t.Error(err)
			}
		}()
	}
	p.challenged("b.example", `Bearer realm="https://elsewhere.example/token"`)
	close(release)
	wg.Wait()
	if _, ok, _ := p.lookup(pingKey{"https", "a.example"}); !ok {
		t.Error("a.example's answer was not kept after b.example's challenge changed")
	}
	if _, ok, _ := p.lookup(pingKey{"https", "b.example"}); ok {
		t.Error("b.example's ping, sent before its challenge changed, was kept")
	}
}
