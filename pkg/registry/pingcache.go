package registry

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/buildsmith/buildsmith/pkg/worker"
)

// pingTTL is how long a registry's answer to the /v2/ ping is reused.
// The answer says only which authentication the registry wants, which
// changes when it is reconfigured, not between requests.
const pingTTL = 5 * time.Minute

// pingCache answers ggcr's /v2/ pings (one before the first request of
// every authenticated transport) from the registry's last answer: 200 or
// 401 with its challenge, kept for pingTTL, dropped by a 401 whose
// challenge differs, one ping per registry in flight, at most
// maxPingBytes kept. Why, and what it saves: docs/design.md § Registry
// client decisions, "The /v2/ ping is remembered per registry".
//
// Only what ggcr reads of a ping is kept: the status and the challenge,
// up to maxChallenge bytes (a longer one is not kept, and costs its
// registry a ping each time). Registries are tenants' choice, and a
// tenant's may answer with megabytes of headers.
type pingCache struct {
	next http.RoundTripper

	mu       sync.Mutex
	answers  map[pingKey]pingAnswer
	bytes    int // kept, as pingAnswer.cost counts them
	inFlight map[pingKey]*pingInFlight
}

// pingInFlight is a ping sent and not answered yet.
type pingInFlight struct {
	answered chan struct{} // closed when it is
	// stale: a 401 contradicted what the registry said before the ping
	// was answered, so its answer may be what the registry said before
	// too: it is not kept.
	stale bool
}

// Bounds of the answers kept: one per registry in use (and scheme), a few
// hundred bytes each (Docker Hub's challenge is about 120; realm, service
// and scope make a few hundred at most).
const (
	maxPingBytes = 1 << 20
	maxChallenge = 4 << 10
)

type pingKey struct{ scheme, host string }

type pingAnswer struct {
	status     int
	challenges []string // WWW-Authenticate, each (ggcr picks among them)
	at         time.Time
}

// challengeBytes is how long an answer's challenges are together.
func challengeBytes(challenges []string) int {
	n := 0
	for _, c := range challenges {
		n += len(c)
	}
	return n
}

// cost is about the memory an answer kept under key takes.
func (a pingAnswer) cost(key pingKey) int {
	return 128 + len(key.host) + 16*len(a.challenges) + challengeBytes(a.challenges)
}

// challenge is the first challenge, "" for none.
func (a pingAnswer) challenge() string {
	if len(a.challenges) == 0 {
		return ""
	}
	return a.challenges[0]
}

func newPingCache(next http.RoundTripper) *pingCache {
	return &pingCache{next: next, answers: map[pingKey]pingAnswer{}, inFlight: map[pingKey]*pingInFlight{}}
}

func (p *pingCache) RoundTrip(req *http.Request) (*http.Response, error) {
	if !isPing(req) {
		resp, err := p.next.RoundTrip(req)
		if err == nil && resp.StatusCode == http.StatusUnauthorized {
			p.challenged(req.URL.Host, resp.Header.Get("WWW-Authenticate"))
		}
		return resp, err
	}
	key := pingKey{req.URL.Scheme, req.URL.Host}
	for {
		answer, ok, wait := p.lookup(key)
		if ok {
			return answer.response(req), nil
		}
		if wait == nil {
			return p.ping(req, key)
		}
		waited := worker.Wait(req.Context())
		select {
		case <-wait: // answered: look again
		case <-req.Context().Done():
			waited()
			return nil, req.Context().Err()
		}
		waited()
	}
}

// lookup returns the kept answer for key; or, when there is none, the
// ping in flight to wait for; or, when there is none either, nil after
// marking this caller's ping in flight.
func (p *pingCache) lookup(key pingKey) (answer pingAnswer, ok bool, wait chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if answer, ok := p.answers[key]; ok {
		if time.Now().Sub(answer.at) < pingTTL {
			return answer, true, nil
		}
		p.drop(key)
	}
	if ping, ok := p.inFlight[key]; ok {
		return pingAnswer{}, false, ping.answered
	}
	p.inFlight[key] = &pingInFlight{answered: make(chan struct{})}
	return pingAnswer{}, false, nil
}

// ping sends req and keeps an answer that describes the registry. Callers
// waiting on it then use that answer, or send their own when there is none
// (a 429, a refused connection).
func (p *pingCache) ping(req *http.Request, key pingKey) (*http.Response, error) {
	resp, err := p.next.RoundTrip(req)
	p.mu.Lock()
	defer p.mu.Unlock()
	ping := p.inFlight[key]
	if err == nil && (resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized) && !ping.stale {
		answer := pingAnswer{status: resp.StatusCode, challenges: slices.Clone(resp.Header.Values("WWW-Authenticate")), at: time.Now()}
		if challengeBytes(answer.challenges) <= maxChallenge {
			p.makeRoom(answer.cost(key))
			p.answers[key] = answer
			p.bytes += answer.cost(key)
		}
	}
	close(ping.answered)
	delete(p.inFlight, key)
	return resp, err
}

// challenged drops host's kept answers that a 401 with challenge
// contradicts.
func (p *pingCache) challenged(host, challenge string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, answer := range p.answers {
		if key.host == host && !sameChallenge(answer.challenge(), challenge) {
			p.drop(key)
			for _, scheme := range []string{"https", "http"} {
				if ping, ok := p.inFlight[pingKey{scheme, host}]; ok {
					ping.stale = true
				}
			}
		}
	}
}

// drop forgets key's answer; p.mu must be held.
func (p *pingCache) drop(key pingKey) {
	if answer, ok := p.answers[key]; ok {
		p.bytes -= answer.cost(key)
		delete(p.answers, key)
	}
}

// makeRoom drops expired answers, then the oldest, until one of cost bytes
// fits; p.mu must be held.
func (p *pingCache) makeRoom(cost int) {
	if p.bytes+cost <= maxPingBytes {
		return
	}
	now := time.Now()
	for key, answer := range p.answers {
		if now.Sub(answer.at) >= pingTTL {
			p.drop(key)
		}
	}
	for p.bytes+cost > maxPingBytes && len(p.answers) > 0 {
		var oldest pingKey
		for key, answer := range p.answers {
			if oldest == (pingKey{}) || answer.at.Before(p.answers[oldest].at) {
				oldest = key
			}
		}
		p.drop(oldest)
	}
}

var realmParameter = regexp.MustCompile(`(?i)\brealm="([^"]*)"`)

// sameChallenge compares two WWW-Authenticate values by scheme and realm:
// a bearer 401 to a request adds an error and a scope to the challenge the
// ping got, which changes nothing about how to authenticate. A kept 200 has
// none, which no 401 matches.
func sameChallenge(kept, got string) bool {
	if kept == "" {
		return false
	}
	scheme := func(c string) string { s, _, _ := strings.Cut(strings.TrimSpace(c), " "); return strings.ToLower(s) }
	realm := func(c string) string {
		if m := realmParameter.FindStringSubmatch(c); m != nil {
			return m[1]
		}
		return ""
	}
	return scheme(kept) == scheme(got) && realm(kept) == realm(got)
}

// isPing tells ggcr's ping (an anonymous GET of /v2/) from other requests.
func isPing(req *http.Request) bool {
	return req.Method == http.MethodGet && req.URL.Path == "/v2/" && req.URL.RawQuery == "" &&
		req.Header.Get("Authorization") == ""
}

func (a pingAnswer) response(req *http.Request) *http.Response {
	header := http.Header{}
	for _, c := range a.challenges {
		header.Add("WWW-Authenticate", c)
	}
	return &http.Response{
		Status:     fmt.Sprintf("%d %s", a.status, http.StatusText(a.status)),
		StatusCode: a.status,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     header,
		Body:       http.NoBody,
		Request:    req,
	}
}
