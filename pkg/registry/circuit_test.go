package registry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"

	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// noProbes keeps circuits open for the length of a test: no probe, no drop.
var noProbes = CircuitOptions{FirstProbe: time.Hour, ProbeInterval: time.Hour}

// TestOutagesOpenTheRightCircuit: each kind of failure of a read of
// team/app opens the circuit of the right place, or none; a repository's
// failure opens the registry's circuit too only when /v2/ fails as well.
func TestOutagesOpenTheRightCircuit(t *testing.T) {
	hang := func(f *registrytest.Registry) func(http.ResponseWriter, *http.Request) { return f.Hang }
	answer := func(code int, headers map[string]string) func(*registrytest.Registry) func(http.ResponseWriter, *http.Request) {
		return func(*registrytest.Registry) func(http.ResponseWriter, *http.Request) {
			return registrytest.Answer(code, headers, registrytest.OCIError("X", "fault"))
		}
	}
	tests := []struct {
		name   string
		down   bool   // connections refused
		path   string // the requests the fault applies to
		fault  func(*registrytest.Registry) func(http.ResponseWriter, *http.Request)
		reason string
		open   []string // places, "" for the registry
	}{
		{name: "refused", down: true, reason: ReasonRegistryUnavailable, open: []string{""}},
		{name: "503 on the repository", path: "/team/app/", fault: answer(503, nil), reason: ReasonRegistryUnavailable, open: []string{"team/app"}},
		{name: "500 on the repository", path: "/team/app/", fault: answer(500, nil), reason: ReasonRegistryUnavailable, open: []string{"team/app"}},
		{name: "408 on the repository", path: "/team/app/", fault: answer(408, nil), reason: ReasonRegistryUnavailable, open: []string{"team/app"}},
		{name: "429 with a long Retry-After", path: "/team/app/", fault: answer(429, map[string]string{"Retry-After": "60"}), reason: ReasonRateLimited, open: []string{"team/app"}},
		{name: "reset", path: "/team/app/", fault: func(*registrytest.Registry) func(http.ResponseWriter, *http.Request) { return registrytest.Reset },
			reason: ReasonRegistryUnavailable, open: []string{"team/app"}},
		{name: "hang on the repository", path: "/team/app/", fault: hang, reason: ReasonRegistryUnavailable, open: []string{"team/app"}},
		// The ping fails first: the call never reaches the repository.
		{name: "503 everywhere", path: "/v2/", fault: answer(503, nil), reason: ReasonRegistryUnavailable, open: []string{""}},
		{name: "hang everywhere", path: "/v2/", fault: hang, reason: ReasonRegistryUnavailable, open: []string{""}},
		{name: "503 on the repository, then on /v2/", path: "/v2/", fault: func(f *registrytest.Registry) func(http.ResponseWriter, *http.Request) {
			pinged := false
			return func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/v2/" && !pinged {
					pinged = true
					f.Handler.ServeHTTP(w, r)
					return
				}
				registrytest.Answer(503, nil, "")(w, r)
			}
		}, reason: ReasonRegistryUnavailable, open: []string{"", "team/app"}},
		{name: "401", path: "/team/app/", fault: answer(401, nil), reason: ReasonUnauthorized},
		{name: "403", path: "/team/app/", fault: answer(403, nil), reason: ReasonUnauthorized},
		{name: "404", path: "/team/app/", fault: answer(404, nil), reason: ReasonImageNotFound},
		{name: "400", path: "/team/app/", fault: answer(400, nil), reason: ReasonRegistryRejected},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T, network *registrytest.Network) {
				f := registrytest.NewOn(t, network)
				f.Push("team/app:1")
				c := newBubbleClient(t, network, Options{Circuits: noProbes, AnswerTimeout: 300 * time.Millisecond})
				if tc.down {
					f.Down()
				} else {
					f.Inject("", tc.path, -1, tc.fault(f))
				}
				_, err := c.As(nil).Resolve(context.Background(), f.Ref("team/app:1"))
				if Classify(err).Reason != tc.reason {
					t.Fatalf("reason %q, want %q: %v", Classify(err).Reason, tc.reason, err)
				}
				var want []string
				for _, repo := range tc.open {
					want = append(want, Place{Host: f.Addr, Repository: repo}.String())
				}
				synctest.Wait() // the registry's /v2/ is checked in the background
				got := openPlaces(c)
				if !slices.Equal(got, want) {
					t.Errorf("open circuits %q, want %q", got, want)
				}
				if len(want) > 0 && errPlace(err).Host != f.Addr {
					t.Errorf("error's host %q", errPlace(err).Host)
				}
			})
		})
	}
}

// openPlaces lists the places whose circuit is open.
func openPlaces(c *Client) []string {
	var out []string
	for _, o := range c.Circuits().Open() {
		out = append(out, o.Place.String())
	}
	return out
}

// TestOpenCircuitSendsNothing: while a repository's circuit is open, calls
// to it fail at once, naming it, without a request; other repositories of
// the registry are called as usual.
func TestOpenCircuitSendsNothing(t *testing.T) {
	inBubble(t, func(t *testing.T, network *registrytest.Network) {
		f := registrytest.NewOn(t, network)
		f.Push("team/app:1")
		f.Push("team/other:1")
		f.Inject("", "/team/app/", -1, registrytest.Answer(503, nil, ""))
		c := newBubbleClient(t, network, Options{Circuits: noProbes})
		ctx := context.Background()
		if _, err := c.As(nil).Resolve(ctx, f.Ref("team/app:1")); Classify(err).Reason != ReasonRegistryUnavailable {
			t.Fatalf("Resolve: %v", err)
		}
		synctest.Wait()
		if got, want := openPlaces(c), []string{f.Addr + "/team/app"}; !slices.Equal(got, want) {
			t.Fatalf("open circuits %q, want %q", got, want)
		}
		before := f.Count("", "/team/app/")
		for range 20 {
			_, err := c.As(nil).ReadImage(ctx, f.Ref("team/app:1"), nil)
			if Classify(err).Reason != ReasonRegistryUnavailable || errPlace(err).Host != f.Addr || !strings.Contains(err.Error(), f.Addr+"/team/app is failing") {
				t.Fatalf("while open: %v", err)
			}
		}
		if n := f.Count("", "/team/app/") - before; n != 0 {
			t.Errorf("%d requests to a repository whose circuit is open", n)
		}
		if _, err := c.As(nil).Resolve(ctx, f.Ref("team/other:1")); err != nil {
			t.Errorf("another repository of the registry: %v", err)
		}
	})
}

// TestProbeResendsTheFailingRead: the probe of a repository is the read
// that failed, sent first after the first probe delay, then once a probe
// interval; /v2/ answering does not close the repository's circuit; when
// the read answers, the waiter is woken by the next probe.
func TestProbeResendsTheFailingRead(t *testing.T) {
	inBubble(t, func(t *testing.T, network *registrytest.Network) {
		f := registrytest.NewOn(t, network)
		f.Push("team/app:1")
		f.Inject("", "/team/app/", -1, registrytest.Answer(503, nil, ""))
		c := newBubbleClient(t, network, Options{})
		ctx := context.Background()
		if _, err := c.As(nil).Resolve(ctx, f.Ref("team/app:1")); Classify(err).Reason != ReasonRegistryUnavailable {
			t.Fatalf("Resolve: %v", err)
		}
		woken := make(chan time.Time, 1)
		if c.Circuits().Wait(f.Addr, "team/app", Waiter{Key: "ns/a"}, func() { woken <- time.Now() }) != Waiting {
			t.Fatal("no open circuit to wait on")
		}
		synctest.Wait() // the check of /v2/ (it answers)
		f.ForgetRequests()
		advance(2500 * time.Millisecond)
		probes := f.Requests()
		// After 200ms, 1.2s and 2.2s.
		if len(probes) != 3 {
			t.Errorf("%d probes in 2.5s: %q", len(probes), probes)
		}
		for _, p := range probes {
			if p != "HEAD /v2/team/app/manifests/1" {
				t.Errorf("probe %q, want the failed HEAD of the manifest", p)
			}
		}
		select {
		case <-woken:
			t.Fatal("woken while the repository still fails")
		default:
		}
		if got := openPlaces(c); len(got) != 1 {
			t.Fatalf("open circuits %q: /v2/ answering closed the repository's", got)
		}

		f.ClearFaults()
		recovered := time.Now()
		advance(time.Second)
		select {
		case at := <-woken:
			if d := at.Sub(recovered); d != 700*time.Millisecond {
				t.Errorf("woken %v after the repository answered, want at the next probe (700ms)", d)
			}
		default:
			t.Fatal("not woken a probe interval after the repository answered")
		}
		if open := c.Circuits().Open(); len(open) != 0 {
			t.Errorf("still open: %v", open)
		}
	})
}

// TestProbeWaitsForRetryAfter: a repository that answered 429 with
// Retry-After: 2 gets no request, probe included, for 2 seconds.
func TestProbeWaitsForRetryAfter(t *testing.T) {
	inBubble(t, func(t *testing.T, network *registrytest.Network) {
		f := registrytest.NewOn(t, network)
		f.Push("team/app:1")
		c := newBubbleClient(t, network, Options{MaxRetryAfterWait: -1})
		var mu sync.Mutex
		var at []time.Time
		f.Inject("", "/team/app/", -1, func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			at = append(at, time.Now())
			limited := len(at) == 1
			mu.Unlock()
			if limited {
				registrytest.Answer(429, map[string]string{"Retry-After": "2"}, "")(w, r)
				return
			}
			f.Handler.ServeHTTP(w, r)
		})
		if _, err := c.As(nil).Resolve(context.Background(), f.Ref("team/app:1")); Classify(err).Reason != ReasonRateLimited || Classify(err).RetryAfter < time.Second {
			t.Fatalf("Resolve: %v (Retry-After %v)", err, Classify(err).RetryAfter)
		}
		f.ForgetRequests()
		woken := make(chan struct{})
		if c.Circuits().Wait(f.Addr, "team/app", Waiter{Key: "ns/a"}, func() { close(woken) }) != Waiting {
			t.Fatal("no open circuit to wait on")
		}
		advance(1990 * time.Millisecond)
		if reqs := f.Requests(); len(reqs) != 0 {
			t.Fatalf("requests before the Retry-After ended: %q", reqs)
		}
		advance(20 * time.Millisecond)
		select {
		case <-woken:
		default:
			t.Fatal("not woken when the Retry-After of 2s ended")
		}
		mu.Lock()
		defer mu.Unlock()
		if len(at) != 2 {
			t.Fatalf("%d requests to the repository, want the 429 and one probe", len(at))
		}
		if gap := at[1].Sub(at[0]); gap < 2*time.Second {
			t.Errorf("probe %v after a 429 with Retry-After: 2", gap)
		}
		// Nothing else either: no registry check during the hold.
		for _, r := range f.Requests() {
			if !strings.Contains(r, "/team/app/") {
				t.Errorf("request %q after a 429 with Retry-After", r)
			}
		}
	})
}

// TestProberStopsWhenNobodyWaits: a circuit nobody waits on costs no
// request and is dropped; one whose last waiter left stops being probed.
func TestProberStopsWhenNobodyWaits(t *testing.T) {
	inBubble(t, func(t *testing.T, network *registrytest.Network) {
		f := registrytest.NewOn(t, network)
		f.Push("team/app:1")
		f.Inject("", "/team/app/", -1, registrytest.Answer(503, nil, ""))
		c := newBubbleClient(t, network, Options{})
		if _, err := c.As(nil).Resolve(context.Background(), f.Ref("team/app:1")); err == nil {
			t.Fatal("no error")
		}
		synctest.Wait() // the check of /v2/ (it answers)
		f.ForgetRequests()
		advance(1500 * time.Millisecond)
		if reqs := f.Requests(); len(reqs) != 0 {
			t.Errorf("requests with nobody waiting: %q", reqs)
		}
		if open := c.Circuits().Open(); len(open) != 0 {
			t.Errorf("a circuit nobody waits on is still open: %v", open)
		}

		if _, err := c.As(nil).Resolve(context.Background(), f.Ref("team/app:1")); err == nil {
			t.Fatal("no error")
		}
		if c.Circuits().Wait(f.Addr, "team/app", Waiter{Key: "ns/a"}, func() { t.Error("woken while failing") }) != Waiting {
			t.Fatal("no circuit to wait on")
		}
		advance(1500 * time.Millisecond)
		if f.Count("", "/team/app/") == 0 {
			t.Fatal("not probed while waited on")
		}
		c.Circuits().Forget("ns/a")
		f.ForgetRequests()
		advance(3 * time.Second)
		if reqs := f.Requests(); len(reqs) != 0 {
			t.Errorf("probes after the last waiter left: %q", reqs)
		}
		if open := c.Circuits().Open(); len(open) != 0 {
			t.Errorf("a circuit whose last waiter left is still open: %v", open)
		}
	})
}

// TestManyPlacesBoundedProbes: 30 repositories of one registry fail (its
// /v2/ answers) with 300 objects waiting on them. The first widespreadAfter
// repositories are found failing by a request each; then the registry's
// circuit opens, widespread, and the other repositories' calls fail at once
// (one a second let through), so discovering the outage does not cost a
// request per repository. The probes stay within the registry's budget, in
// turn; when the repositories answer again, one probe's answer sweeps the
// rest and every object, reconciled again by one worker as a controller
// would, succeeds once, within seconds.
func TestManyPlacesBoundedProbes(t *testing.T) {
	inBubble(t, func(t *testing.T, network *registrytest.Network) {
		f := registrytest.NewOn(t, network)
		const repos, perRepo = 30, 10
		for i := range repos {
			f.Push(fmt.Sprintf("team/app-%d:1", i))
		}
		f.Inject("", "/team/app-", -1, registrytest.Answer(503, nil, ""))
		f.ForgetRequests()
		c := newBubbleClient(t, network, Options{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()

		// One worker reconciles the objects in turn: an object that fails waits
		// on the circuit that refused it and is queued again when woken.
		type object struct{ key, repo string }
		queue := make(chan object, repos*perRepo)
		var queued atomic.Int64 // queued or being reconciled
		enqueue := func(o object) { queued.Add(1); queue <- o }
		var mu sync.Mutex
		succeeded := map[string]int{}
		go func() {
			for {
				var o object
				select {
				case o = <-queue:
				case <-ctx.Done():
					return
				}
				_, err := c.As(nil).Resolve(ctx, f.Ref(o.repo+":1"))
				switch {
				case err == nil:
					mu.Lock()
					succeeded[o.key]++
					mu.Unlock()
				case Classify(err).Reason != ReasonRegistryUnavailable:
					t.Errorf("%s: %v", o.key, err)
				case c.Circuits().Wait(f.Addr, o.repo, Waiter{Key: o.key}, func() { enqueue(o) }) != Waiting:
					t.Errorf("%s: failed with no circuit to wait on: %v", o.key, err)
				}
				queued.Add(-1)
			}
		}()
		for i := range repos {
			for j := range perRepo {
				repo := fmt.Sprintf("team/app-%d", i)
				enqueue(object{key: fmt.Sprintf("%s/%d", repo, j), repo: repo})
			}
		}
		want := []string{f.Addr}
		for i := range widespreadAfter {
			want = append(want, fmt.Sprintf("%s/team/app-%d", f.Addr, i))
		}
		slices.Sort(want)
		// Time moves on while the worker reconciles each object once (the
		// first object's call retries after a backoff).
		for advance(0); queued.Load() > 0; {
			advance(10 * time.Millisecond)
		}
		if open := openPlaces(c); !slices.Equal(open, want) {
			t.Fatalf("open circuits: %q, want the registry's and its first %d repositories'", open, widespreadAfter)
		}
		// The first failure was retried in-call; the others were not (the
		// registry was failing by then); widespreadAfter repositories were
		// found failing by one request each; a probe or two fell due meanwhile.
		if n := f.Count("", "/team/app-"); n > widespreadAfter+2+2 {
			t.Errorf("%d requests to discover that %d repositories fail", n, repos)
		}
		f.ForgetRequests()
		const watch = 3 * time.Second
		advance(watch)
		probes := f.Requests()
		// A probe a second and an object let through to try its repository a
		// second: 6 in 3s, and never more than 8.
		if len(probes) < 2 || len(probes) > 8 {
			t.Errorf("%d probes in %v for %d failing repositories: %q", len(probes), watch, repos, probes)
		}
		if len(probes) != len(slices.Compact(slices.Sorted(slices.Values(probes)))) {
			t.Errorf("a repository was probed twice before the others: %q", probes)
		}

		f.ClearFaults()
		recovered := time.Now()
		for {
			mu.Lock()
			n := len(succeeded)
			mu.Unlock()
			if n == repos*perRepo {
				break
			}
			if time.Since(recovered) > 2*time.Second {
				t.Fatalf("%d of %d objects succeeded 2s after recovery", n, repos*perRepo)
			}
			advance(10 * time.Millisecond)
		}
		t.Logf("all %d objects succeeded %v after recovery", repos*perRepo, time.Since(recovered))
		mu.Lock()
		defer mu.Unlock()
		for key, n := range succeeded {
			if n != 1 {
				t.Errorf("%s reconciled to success %d times", key, n)
			}
		}
	})
}

// TestRegistryCircuitHoldsEveryRepository: when the registry itself fails
// (a repository's read and /v2/ both answer 503), calls to its other
// repositories fail at once too, and only /v2/ is probed until it answers;
// then the repositories' circuits are probed and their waiters woken.
func TestRegistryCircuitHoldsEveryRepository(t *testing.T) {
	inBubble(t, func(t *testing.T, network *registrytest.Network) {
		f := registrytest.NewOn(t, network)
		f.Push("team/app:1")
		f.Push("team/other:1")
		c := newBubbleClient(t, network, Options{})
		ctx := context.Background()
		for _, ref := range []string{"team/app:1", "team/other:1"} {
			if _, err := c.As(nil).Resolve(ctx, f.Ref(ref)); err != nil { // pinged before the fault
				t.Fatal(err)
			}
		}
		f.Inject("", "/v2/", -1, registrytest.Answer(503, nil, ""))
		if _, err := c.As(nil).Resolve(ctx, f.Ref("team/app:1")); err == nil {
			t.Fatal("no error")
		}
		woken := make(chan string, 2)
		if c.Circuits().Wait(f.Addr, "team/app", Waiter{Key: "app"}, func() { woken <- "app" }) != Waiting {
			t.Fatal("no circuit to wait on")
		}
		want := []string{f.Addr, f.Addr + "/team/app"}
		synctest.Wait()
		if open := openPlaces(c); !slices.Equal(open, want) {
			t.Fatalf("open circuits %q, want %q", open, want)
		}
		// Nobody waits on the registry's own circuit, but app waits on its
		// repository's, which is not probed while the registry's is open: it
		// must not lapse.
		advance(1500 * time.Millisecond)
		f.ForgetRequests()
		_, err := c.As(nil).Resolve(ctx, f.Ref("team/other:1"))
		if Classify(err).Reason != ReasonRegistryUnavailable || !strings.Contains(err.Error(), f.Addr+" is failing") {
			t.Fatalf("another repository while the registry fails: %v", err)
		}
		if c.Circuits().Wait(f.Addr, "team/other", Waiter{Key: "other"}, func() { woken <- "other" }) != Waiting {
			t.Fatal("could not wait on the registry")
		}
		advance(2 * time.Second)
		probes := f.Requests()
		for _, r := range probes {
			if r != "GET /v2/" {
				t.Errorf("request %q while the registry's circuit is open, want only GET /v2/ probes", r)
			}
		}
		if len(probes) == 0 {
			t.Error("the registry was not probed")
		}

		// /v2/ answers again, team/app still fails: the registry's waiter is
		// woken, app's circuit stays open.
		f.ClearFaults()
		f.Inject("", "/team/app/", -1, registrytest.Answer(503, nil, ""))
		advance(time.Second)
		select {
		case w := <-woken:
			if w != "other" {
				t.Fatalf("%s woken while its repository fails", w)
			}
		default:
			t.Fatal("the registry's waiter was not woken a probe interval after /v2/ answered")
		}
		want = []string{f.Addr + "/team/app"}
		if open := openPlaces(c); !slices.Equal(open, want) {
			t.Fatalf("open circuits with /v2/ answering: %q, want %q", open, want)
		}
		advance(1500 * time.Millisecond)
		select {
		case w := <-woken:
			t.Fatalf("%s woken while its repository fails", w)
		default:
		}
		f.ClearFaults()
		advance(time.Second)
		select {
		case <-woken:
		default:
			t.Fatal("app not woken a probe interval after its repository answered")
		}
	})
}

// TestHangIsNoticedInSeconds: a registry that accepts connections and never
// answers fails a read after AnswerTimeout, as RegistryUnavailable.
func TestHangIsNoticedInSeconds(t *testing.T) {
	f := registrytest.New(t)
	f.Push("team/app:1")
	f.Inject("", "", -1, f.Hang)
	c := newTestClient(t, Options{AnswerTimeout: 500 * time.Millisecond})
	start := time.Now()
	_, err := c.As(nil).Resolve(context.Background(), f.Ref("team/app:1"))
	took := time.Since(start)
	if Classify(err).Reason != ReasonRegistryUnavailable || !strings.Contains(err.Error(), "no answer for 500ms") {
		t.Fatalf("Resolve on a hung registry: %v", err)
	}
	// The ping and the HEAD could each wait; nothing is retried in-call.
	if took > 2*time.Second {
		t.Errorf("took %v with an answer timeout of 500ms", took)
	}
}

// TestFlappingCircuitIsDamped: a push that fails while reads of its
// repository answer (a registry in read-only maintenance) opens the
// repository's circuit; its probe (a read) answers, and the waiter's retry
// fails again. Each time the circuit opens again soon after closing, its
// first probe waits twice as long: the waiter is not woken into the same
// failure every few hundred milliseconds.
func TestFlappingCircuitIsDamped(t *testing.T) {
	inBubble(t, func(t *testing.T, network *registrytest.Network) {
		f := registrytest.NewOn(t, network)
		f.Inject("PUT", "/team/app/manifests/", -1, registrytest.Answer(503, nil, ""))
		c := newBubbleClient(t, network, Options{})
		img, err := random.Image(64, 1)
		if err != nil {
			t.Fatal(err)
		}
		tag := f.Ref("team/app:1").(name.Tag)
		woken := make(chan struct{}, 1)
		// How long each push's waiter waits to be woken by the probe that
		// closes the circuit: undamped, the first probe delay each time;
		// damped, twice the last.
		var waits []time.Duration
		for push := range 4 {
			if _, err := c.As(nil).Write(context.Background(), tag, img); Classify(err).Reason != ReasonRegistryUnavailable {
				t.Fatalf("push %d: %v", push, err)
			}
			failed := time.Now()
			if c.Circuits().Wait(f.Addr, "team/app", Waiter{Key: "ns/a"}, func() { woken <- struct{}{} }) != Waiting {
				t.Fatalf("push %d: no circuit to wait on", push)
			}
			for len(woken) == 0 {
				if time.Since(failed) > 5*time.Second {
					t.Fatalf("not woken 5s after push %d", push)
				}
				advance(10 * time.Millisecond)
			}
			<-woken
			waits = append(waits, time.Since(failed))
		}
		ms := time.Millisecond
		if want := []time.Duration{200 * ms, 400 * ms, 800 * ms, 1600 * ms}; !slices.Equal(waits, want) {
			t.Errorf("woken %v after each push failed, want %v", waits, want)
		}
		for _, p := range f.Requests() {
			if strings.HasPrefix(p, "GET /v2/team/app/tags/list") {
				return
			}
		}
		t.Errorf("the failed push was not probed with a read of its repository: %q", f.Requests())
	})
}

// TestHungProbeKeepsTheCircuitOpen: a probe that gets no answer within its
// timeout is a failure, not an answer: the waiter of a repository that
// hangs is not woken into the hang.
func TestHungProbeKeepsTheCircuitOpen(t *testing.T) {
	inBubble(t, func(t *testing.T, network *registrytest.Network) {
		f := registrytest.NewOn(t, network)
		f.Push("team/app:1")
		f.Inject("", "/team/app/", -1, f.Hang)
		// The answer timeout cuts each probe.
		c := newBubbleClient(t, network, Options{AnswerTimeout: 300 * time.Millisecond})
		if _, err := c.As(nil).Resolve(context.Background(), f.Ref("team/app:1")); Classify(err).Reason != ReasonRegistryUnavailable {
			t.Fatalf("Resolve: %v", err)
		}
		woken := make(chan struct{})
		if c.Circuits().Wait(f.Addr, "team/app", Waiter{Key: "ns/a"}, func() { close(woken) }) != Waiting {
			t.Fatal("no circuit to wait on")
		}
		advance(3 * time.Second)
		select {
		case <-woken:
			t.Fatal("woken while every probe hangs")
		default:
		}
		results := c.Circuits().ProbeResults()
		if failed := results[ProbeResult{Host: f.Addr}]; failed < 2 {
			t.Errorf("probe results %v, want hung probes counted as failed", results)
		}
		// The probe sent into the hang is cut 0.3 s after it went; the next
		// goes a probe interval after that.
		f.ClearFaults()
		advance(1300 * time.Millisecond)
		select {
		case <-woken:
		default:
			t.Fatal("not woken a probe interval after the last probe into the hang gave up")
		}
	})
}

// TestHangEndNoticedInASecond: while a place hangs, its probes do not wait
// for each other: another goes about a second after the last, so the end
// of a hang is noticed within about a second, not when the probe sent into
// it gives up (its 5 s timeout); and they stay about one a second.
func TestHangEndNoticedInASecond(t *testing.T) {
	inBubble(t, func(t *testing.T, network *registrytest.Network) {
		f := registrytest.NewOn(t, network)
		f.Push("team/app:1")
		f.ForgetRequests()
		f.Inject("", "/team/app/", -1, f.Hang)
		// The default answer timeout (5 s) cuts the read, and
		// the probes later than this test looks.
		c := newBubbleClient(t, network, Options{})
		if _, err := c.As(nil).Resolve(context.Background(), f.Ref("team/app:1")); Classify(err).Reason != ReasonRegistryUnavailable {
			t.Fatalf("Resolve: %v", err)
		}
		woken := make(chan struct{})
		if c.Circuits().Wait(f.Addr, "team/app", Waiter{Key: "ns/a"}, func() { close(woken) }) != Waiting {
			t.Fatal("no circuit to wait on")
		}
		synctest.Wait() // the check of /v2/ (it answers)
		hung := func() int { return f.Count("", "/team/app/") }
		before := hung() // the read that opened the circuit
		// Probes hang, each with most of its timeout left: at 0.2, 1.2, 2.2 s.
		advance(2500 * time.Millisecond)
		if n := hung() - before; n < 3 {
			t.Fatalf("%d probes sent into the hang in 2.5s, want 3", n)
		}
		f.ClearFaults()
		advance(time.Second)
		select {
		case <-woken:
		default:
			t.Fatal("not woken at the next probe after the hang ended: waiting for a hung one to give up")
		}
		if n := hung() - before; n != 4 {
			t.Errorf("%d probes of the hung repository in 3.5s, want one a second from 0.2s: %q", n, f.Requests())
		}
	})
}

// TestRegistryCheckHoldsCallsWhileAsked: when a repository of a registry
// times out, the registry's /v2/ is asked at once whether it answers at
// all, and calls to its other repositories wait for that answer instead of
// each sending requests into a hang: when /v2/ answers they go ahead (a
// repository that answers is not failed because another did not); when it
// does not, they fail without a request, and the registry's circuit stays
// open beside the repository's.
func TestRegistryCheckHoldsCallsWhileAsked(t *testing.T) {
	for _, tc := range []struct {
		name         string
		registryHang bool
	}{
		{"whole registry hangs", true},
		{"one repository hangs", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T, network *registrytest.Network) {
				f := registrytest.NewOn(t, network)
				f.Push("team/app:1")
				f.Push("team/other:1")
				const answerTimeout = 300 * time.Millisecond
				c := newBubbleClient(t, network, Options{AnswerTimeout: answerTimeout})
				ctx := context.Background()
				for _, ref := range []string{"team/app:1", "team/other:1"} {
					if _, err := c.As(nil).Resolve(ctx, f.Ref(ref)); err != nil { // before the fault: pinged, authorized
						t.Fatal(err)
					}
				}
				f.Inject("", "/team/app/", -1, f.Hang)
				if tc.registryHang {
					f.Inject("", "", -1, f.Hang)
				}
				if _, err := c.As(nil).Resolve(ctx, f.Ref("team/app:1")); Classify(err).Reason != ReasonRegistryUnavailable {
					t.Fatalf("Resolve team/app: %v", err)
				}
				c.Circuits().Wait(f.Addr, "team/app", Waiter{Key: "ns/app"}, func() {})
				f.ForgetRequests()
				_, err := c.As(nil).Resolve(ctx, f.Ref("team/other:1"))
				sent := f.Count("", "/team/other/")
				if tc.registryHang {
					if Classify(err).Reason != ReasonRegistryUnavailable || sent != 0 {
						t.Errorf("team/other of a hung registry: %v after %q", err, f.Requests())
					}
				} else if err != nil || sent != 1 {
					t.Errorf("team/other, which answers: %v after %q", err, f.Requests())
				}
				want := []string{f.Addr + "/team/app"}
				if tc.registryHang {
					c.Circuits().Wait(f.Addr, "team/other", Waiter{Key: "ns/other"}, func() {})
					want = []string{f.Addr, f.Addr + "/team/app"}
				}
				synctest.Wait()
				if open := openPlaces(c); !slices.Equal(open, want) {
					t.Errorf("open circuits %q, want %q", open, want)
				}
			})
		})
	}
}

// TestSweepOutlivesOneBrokenPlace: 20 repositories of a registry fail; when
// all but one answer again, the first probe that gets an answer sweeps the
// others, and the one still broken does not stop that sweep: every other
// waiter is woken within seconds, not one repository a second.
func TestSweepOutlivesOneBrokenPlace(t *testing.T) {
	inBubble(t, func(t *testing.T, network *registrytest.Network) {
		f := registrytest.NewOn(t, network)
		const repos = 20
		for i := range repos {
			f.Push(fmt.Sprintf("team/app-%d:1", i))
		}
		c := newBubbleClient(t, network, Options{})
		ctx := context.Background()
		if _, err := c.As(nil).Resolve(ctx, f.Ref("team/app-0:1")); err != nil { // pinged before the fault
			t.Fatal(err)
		}
		f.Inject("", "/team/app-", -1, registrytest.Answer(503, nil, ""))
		woken := make(chan int, repos)
		for i := range repos {
			repo := fmt.Sprintf("team/app-%d", i)
			if _, err := c.As(nil).Resolve(ctx, f.Ref(repo+":1")); Classify(err).Reason != ReasonRegistryUnavailable {
				t.Fatalf("%s: %v", repo, err)
			}
			if c.Circuits().Wait(f.Addr, repo, Waiter{Key: repo}, func() { woken <- i }) != Waiting {
				t.Fatalf("%s: no circuit", repo)
			}
		}
		advance(2 * time.Second) // the circuits are probed, in turn, and fail
		f.ClearFaults()
		f.Inject("", "/team/app-0/", -1, registrytest.Answer(503, nil, ""))
		recovered := time.Now()
		got := map[int]bool{}
		for len(got) < repos-1 {
			select {
			case i := <-woken:
				if i == 0 {
					t.Fatal("team/app-0 woken while it fails")
				}
				got[i] = true
				continue
			default:
			}
			// One probe a second in turn would take about 19 s.
			if time.Since(recovered) > 3*time.Second {
				t.Fatalf("%d of %d answering repositories' waiters woken %v after they answered",
					len(got), repos-1, time.Since(recovered))
			}
			advance(10 * time.Millisecond)
		}
		t.Logf("every answering repository's waiter woken %v after they answered", time.Since(recovered))
	})
}

// TestNoResendIntoAnOpenCircuit: a call waiting out a short Retry-After
// inside the call does not send again once the place's circuit has opened
// meanwhile (another call found it failing).
func TestNoResendIntoAnOpenCircuit(t *testing.T) {
	inBubble(t, func(t *testing.T, network *registrytest.Network) {
		f := registrytest.NewOn(t, network)
		f.Push("team/app:1")
		c := newBubbleClient(t, network, Options{})
		if _, err := c.As(nil).Resolve(context.Background(), f.Ref("team/app:1")); err != nil { // pinged before the fault
			t.Fatal(err)
		}
		f.Inject("", "/team/app/", -1, registrytest.Answer(503, map[string]string{"Retry-After": "1"}, ""))
		f.ForgetRequests()
		patient := make(chan error)
		go func() {
			_, err := c.As(nil).Resolve(context.Background(), f.Ref("team/app:1"))
			patient <- err
		}()
		// While the patient call waits out its Retry-After, another call (played
		// here) finds the place failing: its circuit opens, and it waits on it.
		synctest.Wait()
		if n := f.Count("", "/team/app/"); n != 1 {
			t.Fatalf("%d requests before the patient call waits out its Retry-After, want 1", n)
		}
		select {
		case err := <-patient:
			t.Fatalf("the patient call returned without waiting out its Retry-After: %v", err)
		default:
		}
		probe, err := http.NewRequest(http.MethodHead, "http://"+f.Addr+"/v2/team/app/manifests/1", nil)
		if err != nil {
			t.Fatal(err)
		}
		place := Place{Host: f.Addr, Repository: "team/app"}
		c.circuits.trip(place, placed(place, failure.Transient, ReasonRegistryUnavailable, 0, errors.New("503")), probe)
		if c.Circuits().Wait(f.Addr, "team/app", Waiter{Key: "ns/other"}, func() {}) != Waiting {
			t.Fatal("no circuit")
		}
		advance(time.Second)
		select {
		case err = <-patient:
		default:
			t.Fatal("the patient call did not return once its Retry-After ended")
		}
		if Classify(err).Reason != ReasonRegistryUnavailable {
			t.Errorf("the patient call: %v", err)
		}
		// The patient call's one request; the rest are the circuit's probes
		// (resending, the patient call would send one a second).
		synctest.Wait()
		var probes int64
		for _, n := range c.Circuits().ProbeResults() {
			probes += n
		}
		if n := int64(f.Count("", "/team/app/")); n-probes > 1 {
			t.Errorf("%d requests into an open circuit, %d of them probes: %q", n, probes, f.Requests())
		}
	})
}

// TestRegistryCheckTimeout: the /v2/ check a repository's failure starts is
// cut after CheckTimeout, not after the longer ProbeTimeout of the probes
// that re-send a failed read: calls to the registry's other repositories
// wait on it, holding their workers.
func TestRegistryCheckTimeout(t *testing.T) {
	sent := make(chan *http.Request, 4)
	send := func(req *http.Request) (*http.Response, error) {
		sent <- req
		<-req.Context().Done() // a hang
		return nil, req.Context().Err()
	}
	opts := CircuitOptions{ProbeTimeout: time.Minute, CheckTimeout: 2 * time.Second, FirstProbe: time.Hour}
	synctest.Test(t, func(t *testing.T) {
		c := newCircuits(t.Context(), opts, newRetryAfterHolds(0), send, newHostNames(0, nil))
		failed, err := http.NewRequest(http.MethodHead, "https://registry.example/v2/team/app/manifests/1", nil)
		if err != nil {
			t.Fatal(err)
		}
		c.trip(Place{Host: "registry.example", Repository: "team/app"},
			placed(Place{Host: "registry.example"}, failure.Transient, ReasonRegistryUnavailable, 0, errors.New("no answer")), failed)
		check := <-sent
		if check.URL.Path != "/v2/" {
			t.Fatalf("check %s, want /v2/", check.URL.Path)
		}
		advance(opts.CheckTimeout - time.Millisecond)
		if check.Context().Err() != nil {
			t.Fatal("the check was cut before the check timeout")
		}
		advance(time.Millisecond)
		if check.Context().Err() == nil {
			t.Fatalf("the check still waits at the check timeout %v", opts.CheckTimeout)
		}
	})
}

// TestWidespreadFailureLetsCallsThroughInTurn: widespreadAfter repositories
// of a registry fail one after another while its /v2/ answers: its own
// circuit opens, widespread, and a call to another repository fails at once
// without a request, saying so. Its object, waiting on the registry, is
// woken within about a probe interval to try its repository; that one
// answers, which ends the widespread failure for everyone (the failing
// repositories keep their circuits).
func TestWidespreadFailureLetsCallsThroughInTurn(t *testing.T) {
	inBubble(t, func(t *testing.T, network *registrytest.Network) {
		f := registrytest.NewOn(t, network)
		f.Push("team/good:1")
		for i := range widespreadAfter {
			f.Push(fmt.Sprintf("team/bad-%d:1", i))
		}
		f.Inject("", "/team/bad-", -1, registrytest.Answer(503, nil, ""))
		f.ForgetRequests()
		c := newBubbleClient(t, network, Options{})
		ctx := context.Background()
		for i := range widespreadAfter {
			if _, err := c.As(nil).Resolve(ctx, f.Ref(fmt.Sprintf("team/bad-%d:1", i))); Classify(err).Reason != ReasonRegistryUnavailable {
				t.Fatalf("team/bad-%d: %v", i, err)
			}
		}
		registryOpen := func() bool {
			for _, o := range c.Circuits().Open() {
				if o.Place == (Place{Host: f.Addr}) {
					return true
				}
			}
			return false
		}
		if !registryOpen() {
			t.Fatalf("open circuits %v: the registry's is not", c.Circuits().Open())
		}

		_, err := c.As(nil).Resolve(ctx, f.Ref("team/good:1"))
		if e := Classify(err); e == nil || e.Reason != ReasonRegistryUnavailable || errPlace(err).Repository != "" ||
			!strings.Contains(err.Error(), "let through one a second") {
			t.Fatalf("a repository without a circuit during a widespread failure: %v", err)
		}
		if n := f.Count("", "/team/good/"); n != 0 {
			t.Fatalf("%d requests to team/good while it was refused", n)
		}
		woken := make(chan struct{}, 1)
		if c.Circuits().Wait(f.Addr, "team/good", Waiter{Key: "good"}, func() { woken <- struct{}{} }) != Waiting {
			t.Fatal("nothing to wait on")
		}
		advance(time.Second)
		select {
		case <-woken:
		default:
			t.Fatal("the waiting object was not woken a probe interval later to try its repository")
		}
		if _, err := c.As(nil).Resolve(ctx, f.Ref("team/good:1")); err != nil {
			t.Fatalf("woken, team/good was not let through: %v", err)
		}
		if registryOpen() {
			t.Errorf("a repository answered, and the registry's circuit is still open: %v", c.Circuits().Open())
		}
		if _, err := c.As(nil).Resolve(ctx, f.Ref("team/bad-0:1")); errPlace(err).Repository != "team/bad-0" {
			t.Errorf("a failing repository after the widespread failure ended: %v", err)
		}
	})
}

// TestWidespreadFailureBecomesWhole: a call let through a widespread
// failure that fails on the registry itself (it stopped taking
// connections) turns the widespread failure into the registry's: calls are
// no longer let through, and the registry's circuit is probed with /v2/,
// whose answer ends it.
func TestWidespreadFailureBecomesWhole(t *testing.T) {
	inBubble(t, func(t *testing.T, network *registrytest.Network) {
		f := registrytest.NewOn(t, network)
		f.Inject("", "/team/bad-", -1, registrytest.Answer(503, nil, ""))
		c := newBubbleClient(t, network, Options{})
		ctx := context.Background()
		for i := range widespreadAfter {
			repo := fmt.Sprintf("team/bad-%d", i)
			if _, err := c.As(nil).Resolve(ctx, f.Ref(repo+":1")); Classify(err).Reason != ReasonRegistryUnavailable {
				t.Fatalf("%s: %v", repo, err)
			}
			c.Circuits().Wait(f.Addr, repo, Waiter{Key: repo}, func() {}) // its object waits, as a controller's would
		}
		f.Down()
		advance(time.Second) // a call's turn to be let through
		if _, err := c.As(nil).Resolve(ctx, f.Ref("team/other:1")); errPlace(err).Untried {
			t.Fatalf("not let through: %v", err)
		}
		advance(time.Second)
		_, err := c.As(nil).Resolve(ctx, f.Ref("team/third:1"))
		if e := errPlace(err); Classify(err) == nil || e.Untried || e.Repository != "" || !strings.Contains(err.Error(), "nothing is sent there") {
			t.Fatalf("after a call let through could not connect: %v, want a refusal by the registry's own circuit", err)
		}
		woken := make(chan struct{}, 1)
		if c.Circuits().Wait(f.Addr, "team/third", Waiter{Key: "third"}, func() { woken <- struct{}{} }) != Waiting {
			t.Fatal("nothing to wait on")
		}
		f.Up()
		advance(time.Second)
		select {
		case <-woken:
		default:
			t.Fatalf("not woken a probe interval after the registry took connections again: %v", c.Circuits().Open())
		}
	})
}
