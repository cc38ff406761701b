package registry

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// machine drives one registry's circuits (hostCircuits) through a table's
// steps, at times the table gives: no network, no goroutine, no clock.
type machine struct {
	t     *testing.T
	hc    *hostCircuits
	start time.Time
	now   time.Time
	holds map[Place]time.Time // Retry-After holds, until
	sent  map[string][]probeJob
}

func newMachine(t *testing.T, opts CircuitOptions) *machine {
	m := &machine{t: t, start: time.Unix(1_000_000, 0), holds: map[Place]time.Time{}, sent: map[string][]probeJob{}}
	m.now = m.start
	rules := &circuitRules{opts: opts.withDefaults(), jitter: func() float64 { return 0.5 }, // no jitter
		holdLeft: func(p Place) time.Duration { return max(m.holds[p].Sub(m.now), 0) }}
	m.hc = newHostCircuits("registry.example", rules)
	return m
}

// step is one event at a time since the start; it returns the probes it
// started (their places) and the waiters it woke or dropped ("-key").
type step struct {
	at time.Duration
	do func(*machine) (probes []string, woken []woken)
	// probes and woken are what the step must start and wake; nil: none.
	probes, woken []string
}

func (m *machine) started(jobs ...probeJob) []string {
	var places []string
	for _, job := range jobs {
		repo := job.cb.place.Repository
		m.sent[repo] = append(m.sent[repo], job)
		places = append(places, job.cb.place.String()+" "+job.req.URL.Path)
	}
	return places
}

func request(repo string) *http.Request {
	path := "/v2/"
	if repo != "" {
		path = "/v2/" + repo + "/manifests/1"
	}
	req, _ := http.NewRequest(http.MethodHead, "https://registry.example"+path, nil)
	return req
}

func failureOf(reason string, retryAfter time.Duration) *failure.Error {
	return &failure.Error{Class: failure.Transient, Reason: reason, RetryAfter: retryAfter, Err: errors.New(reason)}
}

// fail is a call failing on repo ("" the registry); a Retry-After also
// holds the place.
func fail(repo string, retryAfter time.Duration) func(*machine) ([]string, []woken) {
	return func(m *machine) ([]string, []woken) {
		place := Place{Host: m.hc.host, Repository: repo}
		reason := ReasonRegistryUnavailable
		if retryAfter > 0 {
			reason = ReasonRateLimited
			m.holds[place] = m.now.Add(retryAfter)
		}
		if job := m.hc.openAt(place, failureOf(reason, retryAfter), request(repo), m.now); job != nil {
			return m.started(*job), nil
		}
		return nil, nil
	}
}

func answer(repo string) func(*machine) ([]string, []woken) {
	return func(m *machine) ([]string, []woken) {
		return nil, m.hc.answered(Place{Host: m.hc.host, Repository: repo}, m.now)
	}
}

func waitOn(repo, key string) func(*machine) ([]string, []woken) {
	return func(m *machine) ([]string, []woken) {
		if m.hc.addWaiter(repo, key, func() {}, m.now) == nil {
			m.t.Fatalf("nothing open to wait on for %q", repo)
		}
		return nil, nil
	}
}

func tick(m *machine) ([]string, []woken) {
	probes, taken, _, _ := m.hc.tick(m.now)
	return m.started(probes...), taken
}

// probed ends the oldest probe of repo in flight: answered, or failed.
func probed(repo string, answered bool) func(*machine) ([]string, []woken) {
	return func(m *machine) ([]string, []woken) {
		jobs := m.sent[repo]
		if len(jobs) == 0 {
			m.t.Fatalf("no probe of %q in flight", repo)
		}
		m.sent[repo] = jobs[1:]
		var fail *failure.Error
		if !answered {
			fail = failureOf(ReasonRegistryUnavailable, 0)
		}
		return nil, m.hc.probed(jobs[0], fail, m.now)
	}
}

// admits is a call to repo asking to go through: "let through" or the
// state of the circuit refusing it.
func admits(repo, want string) func(*machine) ([]string, []woken) {
	return func(m *machine) ([]string, []woken) {
		var got string
		switch cb, letThrough := m.hc.covering(Place{Host: m.hc.host, Repository: repo}, &call{}, m.now); {
		case cb != nil:
			got = fmt.Sprintf("refused by %q, %s", cb.place.Repository, cb.state)
		case letThrough:
			got = "let through"
		default:
			got = "no circuit"
		}
		if got != want {
			m.t.Errorf("a call to %q at %v: %s, want %s", repo, m.now.Sub(m.start), got, want)
		}
		return nil, nil
	}
}

func (m *machine) states() map[string]string {
	out := map[string]string{}
	for repo, cb := range m.hc.open {
		out[repo] = cb.state.String()
	}
	return out
}

func keys(w []woken) []string {
	var out []string
	for _, x := range w {
		if x.wake == nil {
			out = append(out, "-"+x.key)
		} else {
			out = append(out, x.key)
		}
	}
	sort.Strings(out)
	return out
}

func repos(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s%d", prefix, i))
	}
	return out
}

// TestCircuitTransitions: the circuits of one registry, step by step, at
// given times (defaults: first probe after 200ms, probes 1s apart, no
// jitter).
func TestCircuitTransitions(t *testing.T) {
	ms := time.Millisecond
	const check = "registry.example /v2/"
	eight := repos("team/app-", 8)
	widespread := []step{{do: fail(eight[0], 0), probes: []string{check}}, {at: ms, do: probed("", true)}}
	for i, repo := range eight[1:] {
		widespread = append(widespread, step{at: time.Duration(10+i) * ms, do: fail(repo, 0)})
	}
	tests := []struct {
		name  string
		steps []step
		open  map[string]string // repository ("" the registry's own) → state
	}{{
		name:  "a repository's failure checks the registry's /v2/",
		steps: []step{{do: fail("team/a", 0), probes: []string{check}}},
		open:  map[string]string{"team/a": "open", "": "checking"},
	}, {
		name:  "the check answers: only the repository stays open, unswept",
		steps: []step{{do: fail("team/a", 0), probes: []string{check}}, {at: 5 * ms, do: probed("", true)}},
		open:  map[string]string{"team/a": "open"},
	}, {
		name:  "the check fails: the registry's circuit stays open",
		steps: []step{{do: fail("team/a", 0), probes: []string{check}}, {at: 5 * ms, do: probed("", false)}},
		open:  map[string]string{"team/a": "open", "": "open"},
	}, {
		name: "one check a probe interval",
		steps: []step{{do: fail("team/a", 0), probes: []string{check}}, {at: 5 * ms, do: probed("", true)},
			{at: 500 * ms, do: fail("team/b", 0)}, {at: 1005 * ms, do: fail("team/c", 0), probes: []string{check}}},
		open: map[string]string{"team/a": "open", "team/b": "open", "team/c": "open", "": "checking"},
	}, {
		name:  "a failure with a Retry-After checks nothing",
		steps: []step{{do: fail("team/a", 2*time.Second)}},
		open:  map[string]string{"team/a": "open"},
	}, {
		name: "the first probe after FirstProbe, then one a probe interval, with a waiter",
		steps: []step{{do: fail("", 0)}, {do: waitOn("", "ns/x")}, {at: 199 * ms, do: tick},
			{at: 200 * ms, do: tick, probes: []string{check}}, {at: 201 * ms, do: probed("", false)},
			{at: 1200 * ms, do: tick}, {at: 1201 * ms, do: tick, probes: []string{check}}},
		open: map[string]string{"": "open"},
	}, {
		name: "a probe that answers closes the circuit and wakes its waiters",
		steps: []step{{do: fail("", 0)}, {do: waitOn("", "ns/x")}, {do: waitOn("", "ns/y")},
			{at: 200 * ms, do: tick, probes: []string{check}}, {at: 250 * ms, do: probed("", true), woken: []string{"ns/x", "ns/y"}}},
		open: map[string]string{},
	}, {
		name:  "nobody waits: no probe, and it lapses after a probe interval",
		steps: []step{{do: fail("", 0)}, {at: 200 * ms, do: tick}, {at: 999 * ms, do: tick}, {at: time.Second, do: tick}},
		open:  map[string]string{},
	}, {
		name: "no probe before a Retry-After ends",
		steps: []step{{do: fail("team/a", 2*time.Second)}, {do: waitOn("team/a", "ns/x")},
			{at: 1999 * ms, do: tick}, {at: 2 * time.Second, do: tick, probes: []string{"registry.example/team/a /v2/team/a/manifests/1"}}},
		open: map[string]string{"team/a": "open"},
	}, {
		name: "a circuit that reopens soon after closing waits twice as long for its first probe",
		steps: []step{{do: fail("", 0)}, {do: waitOn("", "ns/x")}, {at: 200 * ms, do: tick, probes: []string{check}},
			{at: 300 * ms, do: probed("", true), woken: []string{"ns/x"}},
			{at: time.Second, do: fail("", 0)}, {at: time.Second, do: waitOn("", "ns/x")},
			{at: 1399 * ms, do: tick}, {at: 1400 * ms, do: tick, probes: []string{check}}},
		open: map[string]string{"": "open"},
	}, {
		name: "while the registry fails, only its own circuit is probed",
		steps: []step{{do: fail("team/a", 0), probes: []string{check}}, {do: waitOn("team/a", "ns/x")},
			{at: 5 * ms, do: probed("", false)}, {at: 1005 * ms, do: tick, probes: []string{check}}},
		open: map[string]string{"team/a": "open", "": "open"},
	}, {
		name: "a repository's answer closes the registry's circuit too",
		steps: []step{{do: fail("team/a", 0), probes: []string{check}}, {do: waitOn("team/a", "ns/x")},
			{at: 5 * ms, do: probed("", false)}, {at: 10 * ms, do: answer("team/a"), woken: []string{"ns/x"}}},
		open: map[string]string{},
	}, {
		name: "probes of several places are spaced to ProbesPerSecond",
		steps: []step{{do: fail("team/a", 0), probes: []string{check}}, {do: probed("", true)},
			{at: ms, do: fail("team/b", 0)}, {do: waitOn("team/a", "ns/x")}, {do: waitOn("team/b", "ns/y")},
			{at: 201 * ms, do: tick, probes: []string{"registry.example/team/a /v2/team/a/manifests/1"}},
			{at: 300 * ms, do: probed("team/a", false)}, {at: 1200 * ms, do: tick},
			{at: 1201 * ms, do: tick, probes: []string{"registry.example/team/b /v2/team/b/manifests/1"}}},
		open: map[string]string{"team/a": "open", "team/b": "open"},
	}, {
		name: "an answer sweeps the other places at once",
		steps: []step{{do: fail("team/a", 0), probes: []string{check}}, {do: probed("", true)},
			{at: ms, do: fail("team/b", 0)}, {at: ms, do: fail("team/c", 0)},
			{do: waitOn("team/b", "ns/y")}, {do: waitOn("team/c", "ns/z")},
			{at: 100 * ms, do: answer("team/a")},
			{at: 100 * ms, do: tick, probes: []string{"registry.example/team/b /v2/team/b/manifests/1", "registry.example/team/c /v2/team/c/manifests/1"}}},
		open: map[string]string{"team/b": "open", "team/c": "open"},
	}, {
		name: "a repository failing five probes is probed with its tag list",
		steps: []step{{do: fail("team/a", 2*time.Second)}, {do: waitOn("team/a", "ns/x")},
			{at: 2 * time.Second, do: tick, probes: []string{"registry.example/team/a /v2/team/a/manifests/1"}}, {at: 2 * time.Second, do: probed("team/a", false)},
			{at: 3 * time.Second, do: tick, probes: []string{"registry.example/team/a /v2/team/a/manifests/1"}}, {at: 3 * time.Second, do: probed("team/a", false)},
			{at: 4 * time.Second, do: tick, probes: []string{"registry.example/team/a /v2/team/a/manifests/1"}}, {at: 4 * time.Second, do: probed("team/a", false)},
			{at: 5 * time.Second, do: tick, probes: []string{"registry.example/team/a /v2/team/a/manifests/1"}}, {at: 5 * time.Second, do: probed("team/a", false)},
			{at: 6 * time.Second, do: tick, probes: []string{"registry.example/team/a /v2/team/a/manifests/1"}}, {at: 6 * time.Second, do: probed("team/a", false)},
			{at: 7 * time.Second, do: tick, probes: []string{"registry.example/team/a /v2/team/a/tags/list"}}},
		open: map[string]string{"team/a": "open"},
	}, {
		name:  "eight repositories failing in a row: the registry fails widespread",
		steps: widespread,
		open: map[string]string{"": "widespread", eight[0]: "open", eight[1]: "open", eight[2]: "open", eight[3]: "open",
			eight[4]: "open", eight[5]: "open", eight[6]: "open", eight[7]: "open"},
	}, {
		name: "widespread: one call to another repository a probe interval is let through",
		steps: append(slices.Clone(widespread), step{at: 17 * ms, do: waitOn(eight[3], "ns/w")},
			step{at: 20 * ms, do: admits("team/new-1", `refused by "", widespread`)},
			step{at: 1016 * ms, do: admits("team/new-1", "let through")},
			step{at: 1020 * ms, do: admits("team/new-2", `refused by "", widespread`)},
			step{at: 1020 * ms, do: admits(eight[3], `refused by "team/app-3", open`)},
			step{at: 2016 * ms, do: admits("team/new-2", "let through")}),
	}, {
		name: "widespread: a waiter is woken to be let through in turn",
		steps: append(slices.Clone(widespread), step{at: 20 * ms, do: waitOn("team/new", "ns/x")},
			step{at: 1015 * ms, do: tick}, step{at: 1016 * ms, do: tick, woken: []string{"ns/x"}}),
	}, {
		name: "widespread: any repository answering ends it",
		steps: append(slices.Clone(widespread), step{at: 20 * ms, do: waitOn("team/new", "ns/x")},
			step{at: 30 * ms, do: answer("team/new"), woken: []string{"ns/x"}}),
		open: map[string]string{eight[0]: "open", eight[1]: "open", eight[2]: "open", eight[3]: "open",
			eight[4]: "open", eight[5]: "open", eight[6]: "open", eight[7]: "open"},
	}, {
		name: "widespread: a call let through failing about no repository makes it whole",
		steps: append(slices.Clone(widespread), step{at: 20 * ms, do: fail("", 0)},
			step{at: 20 * ms, do: admits("team/new", `refused by "", open`)}),
	}, {
		name: "a wait not renewed for WaitExpiry is dropped",
		steps: []step{{do: fail("", 0)}, {do: waitOn("", "ns/x")}, {at: 200 * ms, do: tick, probes: []string{check}},
			{at: 14 * time.Minute, do: probed("", false)},
			{at: 15 * time.Minute, do: tick, woken: []string{"-ns/x"}},
			{at: 15*time.Minute + 999*ms, do: tick}, {at: 15*time.Minute + time.Second, do: tick}},
		open: map[string]string{},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t, CircuitOptions{})
			for i, s := range tc.steps {
				m.now = m.start.Add(s.at)
				probes, woken := s.do(m)
				if !slices.Equal(probes, s.probes) {
					t.Errorf("step %d at %v: probes %q, want %q", i, s.at, probes, s.probes)
				}
				if got := keys(woken); !slices.Equal(got, s.woken) {
					t.Errorf("step %d at %v: woken %q, want %q", i, s.at, got, s.woken)
				}
			}
			if tc.open != nil && !maps.Equal(m.states(), tc.open) {
				t.Errorf("open circuits %v, want %v", m.states(), tc.open)
			}
		})
	}
}
