package registry

import (
	"fmt"
	"net"
	"net/http"
	"slices"

	"github.com/google/go-containerregistry/pkg/name"
)

// cleartext decides which registries are spoken to over plain HTTP: those
// on a loopback address (nothing on a network path can read that traffic)
// and those the operator named (Options.InsecureRegistries). ggcr on its
// own also falls back to HTTP for RFC 1918 addresses and *.local names, so
// a TLS failure of an in-cluster registry would send credentials in clear
// text; here every other registry is HTTPS with verified certificates.
type cleartext struct {
	allowed []string // host[:port], as in image references
}

// reference returns ref marked insecure when its registry is one the
// operator named; ggcr would not try HTTP for an ordinary host name
// otherwise. (ggcr then sends HTTPS and, 300 ms later, HTTP, and takes
// whichever answers first.)
func (c cleartext) reference(ref name.Reference) name.Reference {
	if !slices.Contains(c.allowed, ref.Context().RegistryStr()) {
		return ref
	}
	if insecure, err := name.ParseReference(ref.String(), name.Insecure); err == nil {
		return insecure
	}
	return ref
}

func (c cleartext) tag(tag name.Tag) name.Tag {
	if t, ok := c.reference(tag).(name.Tag); ok {
		return t
	}
	return tag
}

// allows reports whether plain HTTP may go to host (host[:port]).
func (c cleartext) allows(host string) bool {
	if slices.Contains(c.allowed, host) {
		return true
	}
	hostname := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		hostname = h
	}
	if hostname == "localhost" {
		return true
	}
	ip := net.ParseIP(hostname)
	return ip != nil && ip.IsLoopback()
}

// cleartextTransport refuses plain-HTTP requests to registries not allowed
// them, before anything (credentials included) is sent.
type cleartextTransport struct {
	next   http.RoundTripper
	policy cleartext
}

func (t *cleartextTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" && !t.policy.allows(req.URL.Host) {
		return nil, &cleartextRefusedError{host: req.URL.Host}
	}
	return t.next.RoundTrip(req)
}

// cleartextRefusedError is a plain-HTTP request refused. It is not an
// *failure.Error: ggcr pings HTTPS and HTTP at once and joins their errors, and
// what the HTTPS side says (a refused connection is an outage, a bad
// certificate is CertificateInvalid) must decide the class; only when
// nothing else failed is the refusal the reason (see Classify).
type cleartextRefusedError struct{ host string }

func (e *cleartextRefusedError) Error() string {
	return fmt.Sprintf("refusing plain HTTP to %s: only loopback registries and those named with --insecure-registry are spoken to without TLS", e.host)
}
