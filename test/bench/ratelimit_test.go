package bench

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/buildsmith/buildsmith/test/registrytest"
)

type rateLimitResult struct {
	n          int
	took       time.Duration
	ready      bool
	readyCount int
	cost       cost // every request, the limited ones included
	limited    int
	// early counts requests that came before the Retry-After of a 429
	// answered on the same repository had passed: on a builder's own
	// repository (only that builder asks there) and on the shared ones
	// (store, stack, lifecycle: every builder asks there).
	earlyOwn, earlyShared int
	worstEarly            time.Duration // how early the earliest one came
}

// rateLimitRun: n builders cold (as in scenario 1), with the registry
// answering 429 + Retry-After: 5 to a random half of the requests (half of
// them, seeded, so the runs are alike).
func rateLimitRun(t *testing.T, n int, seed64 uint64, limitFor time.Duration) rateLimitResult {
	f := registrytest.New(t)
	seed(t, f.Addr)
	f.Traffic().Reset()
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed64, 7))
	// Requests on the wire, in order of arrival, with whether each was
	// limited and when its 429 was answered.
	type seen struct {
		at, answered time.Time
		method, path string
		repo         string
		limited      bool
	}
	var log []*seen
	f.Inject("", "/v2/", -1, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		s := &seen{at: time.Now(), method: r.Method, path: r.URL.Path, repo: repoOf(r.URL.Path), limited: rng.IntN(2) == 0}
		log = append(log, s)
		mu.Unlock()
		if !s.limited {
			f.Handler.ServeHTTP(w, r)
			return
		}
		registrytest.Answer(http.StatusTooManyRequests, map[string]string{"Retry-After": "5"},
			registrytest.OCIError("TOOMANYREQUESTS", "slow down"))(w, r)
		mu.Lock()
		s.answered = time.Now()
		mu.Unlock()
	})
	p, _ := startController(t)
	start := time.Now()
	w := newWorld(t, f.Addr)
	w.createBuilders(t, 0, n, w.order())
	r := rateLimitResult{n: n}
	r.took, r.ready = w.waitBuildersReady(t, n, limitFor)
	r.readyCount, _, _ = w.readyCount(t)
	r.took = time.Since(start)
	r.cost = w.cost(f.Traffic().Requests())

	mu.Lock()
	defer mu.Unlock()
	// A request is early when it arrives on a repository less than 5 s
	// after a 429 about it (or about none) was answered. Requests arriving within
	// inFlight of that answer were sent before the client could have read
	// it (several go out together when a hold ends).
	const inFlight = 50 * time.Millisecond
	lastLimit := map[string]time.Time{}
	var trace strings.Builder
	for _, s := range log {
		fmt.Fprintf(&trace, "%s %-5v %s %s\n", s.at.Format("15:04:05.000"), s.limited, s.method, s.path)
		if s.limited {
			r.limited++
		}
		// A 429 to the ping (about no repository) holds every one.
		answered := lastLimit[s.repo]
		if host := lastLimit[""]; host.After(answered) {
			answered = host
		}
		if !answered.IsZero() {
			if since := s.at.Sub(answered); since > inFlight && since < 5*time.Second {
				if w.sharedRepos[s.repo] {
					r.earlyShared++
				} else {
					r.earlyOwn++
				}
				r.worstEarly = max(r.worstEarly, 5*time.Second-since)
			}
		}
		if s.limited && !s.answered.IsZero() {
			lastLimit[s.repo] = s.answered
		}
	}
	// BENCH_RL_TRACE=DIR keeps every request of each run and the
	// controller's log there, to see what a run waited on.
	if dir := os.Getenv("BENCH_RL_TRACE"); dir != "" {
		base := filepath.Join(dir, fmt.Sprintf("ratelimit-n%d-seed%d", n, seed64))
		_ = os.WriteFile(base+".requests.txt", []byte(trace.String()), 0o644)
		_ = os.WriteFile(base+".controller.log", []byte(p.Log()), 0o644)
	}
	return r
}

// repoOf returns the repository a registry API path is about, "" for the
// ping (as the registry client sees it).
func repoOf(path string) string {
	p := strings.TrimPrefix(path, "/v2/")
	for _, sep := range []string{"/manifests/", "/blobs/", "/tags/"} {
		if i := strings.LastIndex(p, sep); i > 0 {
			return p[:i]
		}
	}
	return ""
}

// TestRateLimit is scenario 4. The minimum is the requests of the same
// cold run without limits (measured here first).
func TestRateLimit(t *testing.T) {
	if !full {
		t.Skip("BENCH=1")
	}
	n := envInt("BENCH_RL_N", 10)
	runs := envInt("BENCH_RUNS", 3)
	limitFor := envDuration("BENCH_RL_TIMEOUT", 5*time.Minute)
	var base coldResult
	t.Run("baseline", func(t *testing.T) { base = coldRun(t, n, false) })
	var rs []rateLimitResult
	for i := range runs {
		t.Run(fmt.Sprintf("run%d", i+1), func(t *testing.T) { rs = append(rs, rateLimitRun(t, n, uint64(i+1), limitFor)) })
	}
	s := &section{title: fmt.Sprintf("4. Rate limit: 429 + Retry-After: 5 to 50 %% of requests, %d Builders cold", n),
		what: fmt.Sprintf("As scenario 1 with N=%d, with the registry answering 429 TOOMANYREQUESTS and Retry-After: 5 to a "+
			"random half of all requests (seeded per run). The minimum is the same run without limits: %d requests "+
			"(%s), Ready in %s. \"Early\" requests arrived on a repository less than 5 s after a 429 about it (or about "+
			"none: a ping) was answered, leaving out those arriving within 50 ms of it (sent before it could be read). Gave up after %s.",
			n, base.cost.requests, kinds(base.cost.byKind), seconds([]time.Duration{base.took}), limitFor),
		header: []string{"run", "Ready", "time", "requests", "of which 429", "× minimum", "early on own repo", "early on shared repos", "earliest by"}}
	var took []time.Duration
	allReady, noEarly := true, true
	for i, r := range rs {
		took = append(took, r.took)
		s.rows = append(s.rows, []string{fmt.Sprint(i + 1), fmt.Sprintf("%d/%d", r.readyCount, n), seconds([]time.Duration{r.took}),
			fmt.Sprint(r.cost.requests), fmt.Sprint(r.limited), fmt.Sprintf("%.2f", ratio(r.cost.requests, base.cost.requests)),
			fmt.Sprint(r.earlyOwn), fmt.Sprint(r.earlyShared), r.worstEarly.Round(time.Millisecond).String()})
		allReady = allReady && r.ready
		noEarly = noEarly && r.earlyOwn == 0 && r.earlyShared == 0
	}
	s.targets = []target{
		{"every builder Ready", "all runs", fmt.Sprintf("%s; %s", rowsCol(s.rows, 1), seconds(took)), allReady},
		{"no request before its Retry-After (own and shared repositories)", "0", rowsCol(s.rows, 6) + "; " + rowsCol(s.rows, 7), noEarly},
		{"total requests vs minimum", "reported", rowsCol(s.rows, 5), true},
	}
	addSection(s)
}
