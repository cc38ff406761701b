package registry

import (
	"context"
	"encoding/pem"
	"errors"
	"flag"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestCleartextPolicy: plain HTTP goes to allowed loopback registries and
// to those named, never to private or .local ones (which ggcr alone would
// allow), nor to loopback ones unless allowed.
func TestCleartextPolicy(t *testing.T) {
	named := []string{"registry.internal:5000", "10.0.0.9"}
	for host, want := range map[string]bool{
		"127.0.0.1:5000":         true,
		"[::1]:5000":             true,
		"[::1]":                  true,
		"[0:0:0:0:0:0:0:1]:5000": true,
		"localhost:5000":         true,
		"LOCALHOST:9090":         true,
		"localhost.:9090":        true,
		"app.localhost":          true,
		"0.0.0.0:9090":           true, // connects to this machine
		"[::]:9090":              true,
		"registry.internal:5000": true,
		"10.0.0.9":               true,
		"10.0.0.9:5000":          false, // named without the port: another registry
		"10.0.0.5:5000":          false,
		"192.168.1.20":           false,
		"harbor.local":           false,
		"registry.internal":      false,
		"ghcr.io":                false,
	} {
		if got := (hostPolicy{insecure: named, loopback: true}).allowsCleartext(host); got != want {
			t.Errorf("allowsCleartext(%q) = %v, want %v", host, got, want)
		}
		if isLoopback(host) && (hostPolicy{insecure: named}).allowsCleartext(host) {
			t.Errorf("allowsCleartext(%q) with loopback registries not allowed", host)
		}
	}
}

// TestLoopbackRefused: unless the operator allows loopback registries, a
// tag naming one fails at once as RegistryNotAllowed (Permanent: the
// object must change) without a request and without a circuit; and no
// request goes to a loopback host a registry names (its token service),
// over HTTPS or HTTP.
func TestLoopbackRefused(t *testing.T) {
	f := registrytest.New(t)
	f.Push("team/app:1")
	f.ForgetRequests()
	c := New(t.Context(), Options{})
	for _, ref := range []string{f.Addr + "/team/app:1", "localhost:5000/team/app:1", "[::1]:5000/team/app:1",
		"[::1]/team/app:1", "LOCALHOST:9090/team/app:1", "0.0.0.0:9090/team/app:1", "app.localhost/team/app:1"} {
		_, err := c.As(nil).Resolve(context.Background(), mustParse(t, ref))
		if e := Classify(err); e.Class != failure.Permanent || e.Reason != ReasonRegistryNotAllowed ||
			!strings.Contains(err.Error(), "--allow-loopback-registries") {
			t.Errorf("Resolve(%s): %v %s %v, want a permanent %s naming the flag", ref, e.Class, e.Reason, err, ReasonRegistryNotAllowed)
		}
	}
	if got := f.Requests(); len(got) != 0 {
		t.Errorf("requests reached the loopback registry: %v", got)
	}
	if open := c.Circuits().Open(); len(open) != 0 {
		t.Errorf("circuits opened for refused hosts: %v", open)
	}
	sent := false
	rt := &hostPolicyTransport{policy: hostPolicy{}, next: roundTripFunc(func(*http.Request) (*http.Response, error) {
		sent = true
		return nil, errors.New("sent")
	})}
	for _, u := range []string{"https://127.0.0.1:9090/metrics", "http://localhost:8080/token?scope=x"} {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		if _, err := rt.RoundTrip(req); Classify(err).Reason != ReasonRegistryNotAllowed {
			t.Errorf("%s: %v, want %s", u, err, ReasonRegistryNotAllowed)
		}
	}
	if sent {
		t.Error("a request went to a loopback host")
	}
	if _, err := newTestClient(t, Options{}).As(nil).Resolve(context.Background(), f.Ref("team/app:1")); err != nil {
		t.Errorf("with loopback registries allowed: %v", err)
	}
}

// TestLoopbackRefusedAfterResolving: a name that resolves to a loopback
// address (a tenant's DNS pointing at 127.0.0.1) is refused when the
// connection is made, before anything is sent, unless loopback registries
// are allowed.
func TestLoopbackRefusedAfterResolving(t *testing.T) {
	f := registrytest.New(t)
	f.Push("team/app:1")
	f.ForgetRequests()
	// The dialer sees the resolved address; ask it for 127.0.0.1 directly.
	for _, allowed := range []bool{false, true} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+f.Addr+"/v2/", nil)
		resp, err := defaultTransport(nil, newHostPolicy(Options{LoopbackRegistries: allowed}), 64<<10).RoundTrip(req)
		if allowed {
			if err != nil {
				t.Fatalf("loopback allowed: %v", err)
			}
			_ = resp.Body.Close()
			continue
		}
		if e := Classify(err); e.Class != failure.Permanent || e.Reason != ReasonRegistryNotAllowed {
			t.Errorf("dialing %s: %v, want a permanent %s", f.Addr, err, ReasonRegistryNotAllowed)
		}
		if isOutage(context.Background(), nil, err) {
			t.Error("a refused loopback dial counts as an outage (it would open a circuit)")
		}
		if got := f.Requests(); len(got) != 0 {
			t.Errorf("requests reached the loopback registry: %v", got)
		}
	}
}

func mustParse(t *testing.T, ref string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestCleartextRefusedBeforeSending: a plain-HTTP request to a private
// address is refused before anything is sent. Refused alone it is
// InsecureRegistry (Waiting: the registry or the flags must change); joined with the HTTPS side's failure (ggcr
// pings both at once), the HTTPS side's failure decides.
func TestCleartextRefusedBeforeSending(t *testing.T) {
	sent := false
	rt := &hostPolicyTransport{policy: hostPolicy{}, next: roundTripFunc(func(*http.Request) (*http.Response, error) {
		sent = true
		return nil, errors.New("sent")
	})}
	req, _ := http.NewRequest(http.MethodGet, "http://10.1.2.3:5000/v2/", nil)
	req.Header.Set("Authorization", "Basic c2VjcmV0")
	_, err := rt.RoundTrip(req)
	if sent {
		t.Fatal("a plain-HTTP request went out to a private address")
	}
	if c := Classify(err); c.Class != failure.Waiting || c.Reason != ReasonInsecureRegistry {
		t.Errorf("refused alone: %v %s, want a waiting %s", c.Class, c.Reason, ReasonInsecureRegistry)
	}
	httpsDown := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	if c := Classify(errors.Join(httpsDown, err)); c.Class != failure.Transient || c.Reason != ReasonRegistryUnavailable {
		t.Errorf("HTTPS refused, HTTP refused by us: %v %s, want a transient %s", c.Class, c.Reason, ReasonRegistryUnavailable)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestInsecureRegistryNamed: a plain-HTTP registry on a non-loopback
// address is read only once it is named in InsecureRegistries; unnamed,
// no plain-HTTP request reaches it.
func TestInsecureRegistryNamed(t *testing.T) {
	ip := nonLoopbackIPv4(t)
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Skipf("cannot listen on %s: %v", ip, err)
	}
	var requests atomic.Int64
	inner := ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		inner.ServeHTTP(w, r)
	}), ErrorLog: log.New(io.Discard, "", 0)}}
	srv.Start()
	defer srv.Close()
	host := l.Addr().String()
	img, _ := random.Image(64, 1)
	insecureRef, _ := name.ParseReference(host+"/team/app:1", name.Insecure)
	if err := remote.Write(insecureRef, img); err != nil {
		t.Fatal(err)
	}
	requests.Store(0)
	ref, _ := name.ParseReference(host + "/team/app:1")

	c := newTestClient(t, Options{})
	_, err = c.As(nil).Resolve(context.Background(), ref)
	if Classify(err).Reason != ReasonInsecureRegistry || requests.Load() != 0 {
		t.Errorf("unnamed plain-HTTP registry: %s %v after %d plain-HTTP requests, want %s and none",
			Classify(err).Reason, err, requests.Load(), ReasonInsecureRegistry)
	}
	c = newTestClient(t, Options{InsecureRegistries: []string{host}})
	if _, err := c.As(nil).Resolve(context.Background(), ref); err != nil {
		t.Errorf("named plain-HTTP registry: %v", err)
	}
}

func nonLoopbackIPv4(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	t.Skip("this machine has no non-loopback IPv4 address")
	return ""
}

// TestPrivateCA: a registry whose certificate a private CA signed is
// CertificateInvalid until the CA is given (CACertificates), then read.
func TestPrivateCA(t *testing.T) {
	srv := httptest.NewTLSServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	host := strings.TrimPrefix(srv.URL, "https://")
	img, _ := random.Image(64, 1)
	ref, _ := name.ParseReference(host + "/team/app:1")
	if err := remote.Write(ref, img, remote.WithTransport(srv.Client().Transport)); err != nil {
		t.Fatal(err)
	}
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})

	if _, err := newTestClient(t, Options{}).As(nil).Resolve(context.Background(), ref); Classify(err).Reason != ReasonCertificateInvalid {
		t.Errorf("without the CA: %s %v, want %s", Classify(err).Reason, err, ReasonCertificateInvalid)
	}
	if err := CheckCACertificates(ca); err != nil {
		t.Fatal(err)
	}
	if _, err := newTestClient(t, Options{CACertificates: ca}).As(nil).Resolve(context.Background(), ref); err != nil {
		t.Errorf("with the CA: %v", err)
	}
	if err := CheckCACertificates([]byte("not a certificate")); err == nil {
		t.Error("CheckCACertificates accepted no certificate")
	}
}

// TestDeniedNetworksRefused: a host in a link-local network (where clouds
// serve instance credentials) or in a network the operator denies is
// refused before any request and without a circuit, as Permanent
// RegistryNotAllowed naming the flag; a name resolving into one is refused
// when it is dialed; other private addresses are not refused.
func TestDeniedNetworksRefused(t *testing.T) {
	c := New(t.Context(), Options{DeniedNetworks: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}})
	for _, ref := range []string{"169.254.169.254/latest/meta-data:1", "169.254.169.254:80/team/app:1",
		"[fe80::1]:5000/team/app:1", "[fd00:ec2::254]/team/app:1", "10.96.0.10:5000/team/app:1"} {
		_, err := c.As(nil).Resolve(context.Background(), mustParse(t, ref))
		if e := Classify(err); e.Class != failure.Permanent || e.Reason != ReasonRegistryNotAllowed ||
			!strings.Contains(err.Error(), "--registry-deny-network") {
			t.Errorf("Resolve(%s): %v %s %v, want a permanent %s naming the flag", ref, e.Class, e.Reason, err, ReasonRegistryNotAllowed)
		}
	}
	if open := c.Circuits().Open(); len(open) != 0 {
		t.Errorf("circuits opened for refused hosts: %v", open)
	}
	// What a redirect or a token realm may name: zones, mapped addresses.
	for _, host := range []string{"[fe80::1%eth0]:10250", "[::ffff:169.254.169.254]", "[::1%lo]:8443", "100.100.100.200"} {
		if err := c.hosts.refuse(host); Classify(err).Reason != ReasonRegistryNotAllowed {
			t.Errorf("refuse(%s) = %v, want %s", host, err, ReasonRegistryNotAllowed)
		}
	}
	if err := c.hosts.dialControl("tcp", "[fe80::1%eth0]:443", nil); Classify(err).Reason != ReasonRegistryNotAllowed {
		t.Errorf("dialing a link-local address with a zone: %v", err)
	}
	if err := c.hosts.refuse("10.1.2.3:5000"); err != nil {
		t.Errorf("a private address nobody denied: %v", err)
	}

	// What a name resolves to is checked when dialed: deny the loopback
	// network the test registry listens on, with loopback registries
	// allowed, and dial it.
	f := registrytest.New(t)
	f.ForgetRequests()
	policy := newHostPolicy(Options{LoopbackRegistries: true, DeniedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	req, _ := http.NewRequest(http.MethodGet, "http://"+f.Addr+"/v2/", nil)
	if _, err := defaultTransport(nil, policy, 64<<10).RoundTrip(req); Classify(err).Reason != ReasonRegistryNotAllowed {
		t.Errorf("dialing an address in a denied network: %v, want %s", err, ReasonRegistryNotAllowed)
	}
	if got := f.Requests(); len(got) != 0 {
		t.Errorf("requests reached a denied network: %v", got)
	}
}

// TestDenyNetworkFlag: --registry-deny-network takes CIDRs, an IPv4-mapped
// one as the IPv4 network it names (addresses are compared unmapped), and
// refuses what is not one.
func TestDenyNetworkFlag(t *testing.T) {
	var o Options
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--registry-deny-network=::ffff:10.96.0.0/108", "--registry-deny-network=fd00:10::1/64"}); err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("fd00:10::/64")}
	if !slices.Equal(o.DeniedNetworks, want) {
		t.Errorf("denied %v, want %v", o.DeniedNetworks, want)
	}
	if err := newHostPolicy(o).refuse("10.96.0.1:443"); Classify(err).Reason != ReasonRegistryNotAllowed {
		t.Errorf("an address of a network denied in its mapped form: %v", err)
	}
	fs.SetOutput(io.Discard)
	if err := fs.Parse([]string{"--registry-deny-network=10.96.0.0"}); err == nil {
		t.Error("an address without its prefix length was taken for a network")
	}
}
