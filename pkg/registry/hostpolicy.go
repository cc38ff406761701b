package registry

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"syscall"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// hostPolicy decides which hosts requests may go to, and which of them over
// plain HTTP. Hosts are tenants' choice (a builder's tag) or a registry's
// (the token service its challenge names), so the policy is checked on
// every request, not only on the references objects name.
//
// Loopback hosts (localhost, 127.0.0.0/8, ::1) are the controller's own pod:
// its metrics and probes, and whatever a sidecar serves. A tenant naming one
// would have the controller send requests there on its behalf, and copy the
// start of the answer into its status. They are refused unless the operator
// allows them (Options.LoopbackRegistries: a development cluster, the
// tests). Plain HTTP goes to allowed loopback hosts (nothing on a network
// path can read that traffic) and to the registries the operator named
// (Options.InsecureRegistries). ggcr on its own also falls back to HTTP for
// RFC 1918 addresses and *.local names, so a TLS failure of an in-cluster
// registry would send credentials in clear text; here every other registry
// is HTTPS with verified certificates.
//
// Networks the operator denies (Options.DeniedNetworks, and always the
// link-local ones, where clouds serve instance metadata and credentials)
// are refused the same way: a host that is such an address before any
// state is kept, a name resolving to one when it is dialed.
type hostPolicy struct {
	insecure []string // host[:port], as in image references
	loopback bool
	denied   []netip.Prefix
}

// alwaysDenied are the networks no registry request goes to, whatever the
// operator denies besides: link-local addresses, where cloud instances
// find their metadata service (169.254.169.254, fd00:ec2::254 on AWS) and
// the credentials it hands out.
//
// With an HTTP proxy (HTTPS_PROXY), the dialer sees the proxy only: what
// the proxy then reaches is the proxy's to deny.
var alwaysDenied = []netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("fd00:ec2::254/128"),  // AWS's metadata over IPv6
	netip.MustParsePrefix("fd20:ce::254/128"),   // Google Cloud's
	netip.MustParsePrefix("100.100.100.200/32"), // Alibaba Cloud's
	netip.MustParsePrefix("168.63.129.16/32"),   // Azure's wire server
}

func newHostPolicy(o Options) hostPolicy {
	return hostPolicy{insecure: o.InsecureRegistries, loopback: o.LoopbackRegistries,
		denied: append(slices.Clone(alwaysDenied), o.DeniedNetworks...)}
}

// reference returns ref marked insecure when its registry is one the
// operator named; ggcr would not try HTTP for an ordinary host name
// otherwise. (ggcr then sends HTTPS and, 300 ms later, HTTP, and takes
// whichever answers first.)
func (p hostPolicy) reference(ref name.Reference) name.Reference {
	if !slices.Contains(p.insecure, ref.Context().RegistryStr()) {
		return ref
	}
	if insecure, err := name.ParseReference(ref.String(), name.Insecure); err == nil {
		return insecure
	}
	return ref
}

func (p hostPolicy) tag(tag name.Tag) name.Tag {
	if t, ok := p.reference(tag).(name.Tag); ok {
		return t
	}
	return tag
}

// refuse returns why no request may go to host (host[:port]), nil when
// requests may.
func (p hostPolicy) refuse(host string) error {
	if isLoopback(host) && !p.loopback {
		return failure.Permanentf(ReasonRegistryNotAllowed,
			"%s is a loopback address: the controller's own pod, not a registry (an operator allows loopback registries with --allow-loopback-registries)", host)
	}
	if ip, err := netip.ParseAddr(strings.Trim(hostname(host), "[]")); err == nil {
		return p.refuseAddr(ip)
	}
	return nil
}

// refuseAddr returns why no connection may go to ip (a host named so, or
// what a name resolved to), nil when it may.
func (p hostPolicy) refuseAddr(ip netip.Addr) error {
	// A zone (fe80::1%eth0) would keep the address out of every prefix.
	ip = ip.WithZone("").Unmap()
	for _, network := range p.denied {
		if network.Contains(ip) {
			return failure.Permanentf(ReasonRegistryNotAllowed,
				"%s is in %s, a network registry requests may not go to (link-local addresses, where clouds serve instance credentials, and those an operator denies with --registry-deny-network)", ip, network)
		}
	}
	return nil
}

// dialControl is a net.Dialer's Control: it refuses to connect to an
// address the policy denies, whatever name resolved to it (a tenant's DNS
// pointing at 127.0.0.1 or at the metadata service).
func (p hostPolicy) dialControl(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil
	}
	host, _, _ = strings.Cut(host, "%") // a zone names an interface, not another address
	if !p.loopback && isLoopbackIP(net.ParseIP(host)) {
		return failure.Permanentf(ReasonRegistryNotAllowed,
			"%s is a loopback address: the controller's own pod, not a registry (an operator allows loopback registries with --allow-loopback-registries)", address)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return p.refuseAddr(ip)
	}
	return nil
}

// hostname is host (host[:port]) without its port.
func hostname(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return host
}

// allowsCleartext reports whether plain HTTP may go to host.
func (p hostPolicy) allowsCleartext(host string) bool {
	return slices.Contains(p.insecure, host) || (p.loopback && isLoopback(host))
}

// isLoopback reports whether host (host[:port], as in a reference or a
// URL) names this machine, however it is spelt: localhost in any case, with
// a trailing dot or a subdomain (RFC 6761), a loopback address, or the
// unspecified address, which connects to this machine.
func isLoopback(host string) bool {
	hostname := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		hostname = h
	}
	hostname = strings.TrimSuffix(strings.ToLower(strings.Trim(hostname, "[]")), ".")
	hostname, _, _ = strings.Cut(hostname, "%") // [::1%lo] is ::1
	if hostname == "localhost" || strings.HasSuffix(hostname, ".localhost") {
		return true
	}
	return isLoopbackIP(net.ParseIP(hostname))
}

func isLoopbackIP(ip net.IP) bool { return ip != nil && (ip.IsLoopback() || ip.IsUnspecified()) }

// hostPolicyTransport refuses requests the policy does not allow, before
// anything (credentials included) is sent.
type hostPolicyTransport struct {
	next   http.RoundTripper
	policy hostPolicy
}

func (t *hostPolicyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.policy.refuse(req.URL.Host); err != nil {
		return nil, err
	}
	if req.URL.Scheme == "http" && !t.policy.allowsCleartext(req.URL.Host) {
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
	return fmt.Sprintf("refusing plain HTTP to %s: only loopback registries an operator allowed and those named with --insecure-registry are spoken to without TLS", e.host)
}
