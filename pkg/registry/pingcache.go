package registry

import (
	"fmt"
	"net/http"
	"sync"
	"time"
)

// pingTTL is how long a registry's answer to the /v2/ ping is reused.
// The answer says only which authentication the registry wants, which
// changes when it is reconfigured, not between requests.
const pingTTL = 5 * time.Minute

// pingCache answers ggcr's /v2/ pings from the registry's last answer.
// ggcr pings before the first request of every authenticated transport: once
// per repository of a read session and once per push. Those pings are a
// tenth of a cold start's requests (make bench, scenario 1), and under a
// rate limit each one that is answered 429 holds the whole registry, as a
// ping is about no repository (scenario 4: the registry was held most of the
// time and no builder got Ready).
//
// Only answers that describe the registry are kept: 200 (no authentication)
// and 401 (its challenge). A 401 to any other request forgets the host's
// answer, so a registry that starts asking for credentials is pinged again
// on the next call rather than after pingTTL. The health prober does not go
// through this cache: it must see the registry itself.
type pingCache struct {
	next http.RoundTripper
	now  func() time.Time

	mu      sync.Mutex
	answers map[pingKey]pingAnswer
}

type pingKey struct{ scheme, host string }

type pingAnswer struct {
	status int
	header http.Header
	at     time.Time
}

func newPingCache(next http.RoundTripper, now func() time.Time) *pingCache {
	return &pingCache{next: next, now: now, answers: map[pingKey]pingAnswer{}}
}

func (p *pingCache) RoundTrip(req *http.Request) (*http.Response, error) {
	if !isPing(req) {
		resp, err := p.next.RoundTrip(req)
		if err == nil && resp.StatusCode == http.StatusUnauthorized {
			p.forget(req.URL.Host)
		}
		return resp, err
	}
	key := pingKey{req.URL.Scheme, req.URL.Host}
	if answer, ok := p.lookup(key); ok {
		return answer.response(req), nil
	}
	resp, err := p.next.RoundTrip(req)
	if err == nil && (resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized) {
		p.mu.Lock()
		p.answers[key] = pingAnswer{status: resp.StatusCode, header: resp.Header.Clone(), at: p.now()}
		p.mu.Unlock()
	}
	return resp, err
}

// isPing tells ggcr's ping (an anonymous GET of /v2/) from other requests.
func isPing(req *http.Request) bool {
	return req.Method == http.MethodGet && req.URL.Path == "/v2/" && req.URL.RawQuery == "" &&
		req.Header.Get("Authorization") == ""
}

func (p *pingCache) lookup(key pingKey) (pingAnswer, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	answer, ok := p.answers[key]
	if ok && p.now().Sub(answer.at) >= pingTTL {
		delete(p.answers, key)
		return pingAnswer{}, false
	}
	return answer, ok
}

func (p *pingCache) forget(host string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key := range p.answers {
		if key.host == host {
			delete(p.answers, key)
		}
	}
}

func (a pingAnswer) response(req *http.Request) *http.Response {
	return &http.Response{
		Status:     fmt.Sprintf("%d %s", a.status, http.StatusText(a.status)),
		StatusCode: a.status,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     a.header.Clone(),
		Body:       http.NoBody,
		Request:    req,
	}
}
