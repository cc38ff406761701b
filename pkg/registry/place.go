package registry

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Place is where requests fail: a registry host, or one repository of it.
type Place struct {
	Host string
	// Repository is "" when the failure is about the registry as a whole
	// (it cannot be reached, or its /v2/ endpoint fails too).
	Repository string
}

func (p Place) String() string {
	if p.Repository == "" {
		return p.Host
	}
	return p.Host + "/" + p.Repository
}

func (p Place) hostPlace() Place { return Place{Host: p.Host} }

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

// repositoryOf returns the repository a registry API path is about
// ("/v2/team/app/manifests/1" → "team/app"), "" for other paths.
func repositoryOf(path string) string {
	rest, ok := strings.CutPrefix(path, "/v2/")
	if !ok {
		return ""
	}
	for _, kind := range []string{"/manifests/", "/blobs/", "/tags/"} {
		if i := strings.LastIndex(rest, kind); i > 0 {
			return rest[:i]
		}
	}
	return ""
}

// redactURL is u for messages, its query (which may carry a token) left
// out.
func redactURL(u *url.URL) string {
	clean := *u
	if clean.RawQuery != "" {
		clean.RawQuery = "REDACTED"
	}
	return clean.String()
}
