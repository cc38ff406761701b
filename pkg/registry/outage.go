package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// isOutage reports whether a request's outcome says its place is failing
// rather than answering: it could not be reached, reset the connection or
// did not answer in time, or it answered a status whose meaning is an
// outage (408, 429 and 5xx, see meaningOf). The caller's own
// cancellation or deadline is not an outage, nor is a certificate it does
// not trust (that needs a person), nor any other answer.
func isOutage(ctx context.Context, resp *http.Response, err error) bool {
	if err != nil {
		if ctx.Err() != nil || isCertificateError(err) || isRefusal(err) {
			return false
		}
		return isNetworkError(err)
	}
	return meaningOf(resp.StatusCode).outage
}

// isRefusal reports errors this client made without a request: an open
// circuit or a Retry-After hold.
func isRefusal(err error) bool {
	var open *circuitOpenError
	var e *failure.Error
	return errors.As(err, &open) || errors.As(err, &e)
}

// placeOf returns the place a request is about: its repository, or the
// registry when it is about none (/v2/, a token service) or when the
// connection itself failed (err, when given, is a dial or DNS failure).
func placeOf(req *http.Request, err error) Place {
	req = addressed(req)
	place := Place{Host: req.URL.Host, Repository: repositoryOf(req.URL.Path)}
	if err != nil {
		var opErr *net.OpError
		var dnsErr *net.DNSError
		if errors.As(err, &opErr) && opErr.Op == "dial" || errors.As(err, &dnsErr) {
			place.Repository = ""
		}
	}
	return place
}

// outageError describes a failed request as a classified error.
func outageError(req *http.Request, resp *http.Response, err error) *failure.Error {
	if err != nil {
		return newError(req.URL.Host, 0, err)
	}
	return newError(req.URL.Host, 0, &failure.Error{Class: failure.Transient, Reason: meaningOf(resp.StatusCode).reason,
		Err: fmt.Errorf("%s %s: %s", req.Method, redactURL(req.URL), resp.Status)})
}

func redactURL(u *url.URL) string {
	clean := *u
	if clean.RawQuery != "" {
		clean.RawQuery = "REDACTED"
	}
	return clean.String()
}

// addressed is the request ggcr addressed that req follows: req itself,
// or the first of the redirects that led to it. A registry may redirect a
// read anywhere (a storage service, a fresh path each time): what failed,
// and what to probe, is the place the request was about.
func addressed(req *http.Request) *http.Request {
	for req.Response != nil && req.Response.Request != nil {
		req = req.Response.Request
	}
	return req
}

// repositoryProbe is a read of repo's tag list with req's credentials.
func repositoryProbe(req *http.Request, repo string) *http.Request {
	u := url.URL{Scheme: req.URL.Scheme, Host: req.URL.Host, Path: "/v2/" + repo + "/tags/list"}
	return newProbe(req, http.MethodGet, &u)
}

// probeFor returns the read that tells whether place answers again after
// req failed there: req itself when it is a read (GET and HEAD, bodiless),
// the repository's tag list for a failed write, /v2/ for the registry.
func probeFor(req *http.Request, place Place) *http.Request {
	req = addressed(req)
	if place.Repository == "" {
		return registryProbe(req)
	}
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		return repositoryProbe(req, place.Repository)
	}
	u := *req.URL
	return newProbe(req, req.Method, &u)
}

// registryProbe is GET /v2/ on req's registry: does it answer at all.
func registryProbe(req *http.Request) *http.Request {
	u := url.URL{Scheme: req.URL.Scheme, Host: req.URL.Host, Path: "/v2/"}
	return newProbe(req, http.MethodGet, &u)
}

// newProbe is a bodiless request with req's credentials and manners.
func newProbe(req *http.Request, method string, u *url.URL) *http.Request {
	probe := (&http.Request{Method: method, URL: u, Header: http.Header{}, Host: u.Host}).WithContext(context.Background())
	for _, h := range []string{"Authorization", "Accept", "User-Agent"} {
		if v := req.Header.Values(h); len(v) > 0 {
			probe.Header[h] = v
		}
	}
	return probe
}

// gateTransport keeps requests from places whose circuit is open, and tells
// the circuits and the call what each request's outcome says about its
// place.
type gateTransport struct {
	next     http.RoundTripper
	circuits *Circuits
}

func (g *gateTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	place := placeOf(req, nil)
	if refused := g.circuits.refuse(req.Context(), place); refused != nil {
		return nil, refused
	}
	resp, err := g.next.RoundTrip(req)
	if isOutage(req.Context(), resp, err) {
		if call := callFrom(req.Context()); call != nil {
			failed := placeOf(req, err)
			call.noteOutage(failed, probeFor(req, failed))
		}
	} else if err == nil {
		g.circuits.answered(place)
		if call := callFrom(req.Context()); call != nil {
			call.answered(place) // a retry got through: not this call's outage
			resp.Body = &outageBody{ReadCloser: resp.Body, req: req, call: call}
		}
	}
	return resp, err
}

// outageBody notes on the call an answer whose body was cut short (a reset,
// a stall): the place failed after all.
type outageBody struct {
	io.ReadCloser
	req  *http.Request
	call *call
}

func (b *outageBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && isOutage(b.req.Context(), nil, err) {
		failed := placeOf(b.req, err)
		b.call.noteOutage(failed, probeFor(b.req, failed))
	}
	return n, err
}
