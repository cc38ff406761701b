package bench

import (
	"fmt"
	"math/rand/v2"
	"net/http"
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
	limitedAt := map[string][]time.Time{} // by repository
	// Requests on the wire, in order, with whether each was limited.
	type seen struct {
		at      time.Time
		repo    string
		limited bool
	}
	var log []seen
	f.Inject("", "/v2/", -1, func(w http.ResponseWriter, r *http.Request) {
		repo := repoOf(r.URL.Path)
		mu.Lock()
		limit := rng.IntN(2) == 0
		now := time.Now()
		log = append(log, seen{at: now, repo: repo, limited: limit})
		if limit {
			limitedAt[repo] = append(limitedAt[repo], now)
		}
		mu.Unlock()
		if limit {
			registrytest.Answer(http.StatusTooManyRequests, map[string]string{"Retry-After": "5"},
				registrytest.OCIError("TOOMANYREQUESTS", "slow down"))(w, r)
			return
		}
		f.Handler.ServeHTTP(w, r)
	})
	startController(t)
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
	lastLimit := map[string]time.Time{}
	for _, s := range log {
		if s.limited {
			r.limited++
		}
		if at, ok := lastLimit[s.repo]; ok && s.repo != "" && s.at.Sub(at) < 5*time.Second {
			if w.sharedRepos[s.repo] {
				r.earlyShared++
			} else {
				r.earlyOwn++
			}
			r.worstEarly = max(r.worstEarly, 5*time.Second-s.at.Sub(at))
		}
		if s.limited {
			lastLimit[s.repo] = s.at
		}
	}
	return r
}

func repoOf(path string) string {
	p := strings.TrimPrefix(path, "/v2/")
	for _, sep := range []string{"/manifests/", "/blobs/"} {
		if i := strings.LastIndex(p, sep); i >= 0 {
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
	n := envInt("BENCH_RL_N", 20)
	runs := envInt("BENCH_RUNS", 3)
	limitFor := envDuration("BENCH_RL_TIMEOUT", 60*time.Second)
	var base coldResult
	t.Run("baseline", func(t *testing.T) { base = coldRun(t, n, false) })
	var rs []rateLimitResult
	for i := range runs {
		t.Run(fmt.Sprintf("run%d", i+1), func(t *testing.T) { rs = append(rs, rateLimitRun(t, n, uint64(i+1), limitFor)) })
	}
	s := &section{title: fmt.Sprintf("4. Rate limit: 429 + Retry-After: 5 to 50 %% of requests, %d Builders cold", n),
		what: fmt.Sprintf("As scenario 1 with N=%d, with the registry answering 429 TOOMANYREQUESTS and Retry-After: 5 to a "+
			"random half of all requests (seeded per run). The minimum is the same run without limits: %d requests "+
			"(%s), Ready in %s. \"Early\" requests came on a repository less than 5 s after a 429 on it. Gave up after %s.",
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
		noEarly = noEarly && r.earlyOwn == 0
	}
	s.targets = []target{
		{"every builder Ready", "all runs", fmt.Sprintf("%s; %s", rowsCol(s.rows, 1), seconds(took)), allReady},
		{"no request before its Retry-After (a builder's own repository)", "0", rowsCol(s.rows, 6), noEarly},
		{"total requests vs minimum", "reported", rowsCol(s.rows, 5), true},
	}
	addSection(s)
}
