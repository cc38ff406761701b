package registry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sync/singleflight"
	"k8s.io/utils/lru"
)

// Options tunes a Client. The zero value of every field means its default.
type Options struct {
	// Timeout bounds each read (Resolve, ReadImage), in-call retries
	// included. ggcr's retry sleeps ignore cancellation, so the deadline is
	// what keeps a worker from being parked on a hung registry. Default 30s.
	Timeout time.Duration
	// MinReadRate is the slowest a blob read (ReadLayer) may move on
	// average, in bytes a second: its deadline is Timeout plus what its
	// size takes at this rate, so a registry trickling a byte every few
	// seconds cannot hold a read for ever. Default 256 KiB/s.
	MinReadRate int64
	// WriteTimeout bounds each Write; 0 means no bound: a push that moves
	// is never cut (AnswerTimeout and StallTimeout catch one that stopped).
	WriteTimeout time.Duration
	// AnswerTimeout is how long a read request waits for the registry's
	// answer before it counts as an outage (a hang). Default 5s.
	AnswerTimeout time.Duration
	// WriteAnswerTimeout is the same for writes, after their body was
	// sent: a registry may check a big upload before it answers.
	// Default 60s.
	WriteAnswerTimeout time.Duration
	// StallTimeout cuts an upload the registry took no byte of for this
	// long (an answer's body is cut after AnswerTimeout without a byte).
	// Default 30s.
	StallTimeout time.Duration
	// Retry is the in-call retry of one request. Keep it short: long
	// outages are the caller's requeue's job. Steps must be ≥ 1 (ggcr fails
	// every request with Steps 0). Default: 3 tries, sleeping ≈200ms and
	// ≈600ms in between.
	Retry remote.Backoff
	// MaxRetryAfterWait is the longest Retry-After waited out within a
	// call (when its deadline allows), by it and by every other call to
	// the same registry; a longer one fails the call, for the caller's
	// requeue. Default 10s; negative: never wait.
	MaxRetryAfterWait time.Duration
	// Transport carries the requests. Default: http.DefaultTransport's
	// settings with bounded dial, TLS handshake and response header waits,
	// and response headers of at most MaxHeaderBytes.
	Transport http.RoundTripper
	// MaxHeaderBytes bounds the headers of one answer (the default
	// Transport's): a registry's real headers are a few KiB, and net/http
	// alone allows 10 MiB. Default 64 KiB.
	MaxHeaderBytes int64
	// UserAgent is prepended to ggcr's user agent. Default "buildsmith".
	UserAgent string
	// Circuits tunes the circuits of failing places and their probes.
	Circuits CircuitOptions
	// Sessions bounds how many credential sets keep their authenticated
	// transports (tokens) cached. Default 512.
	Sessions int
	// CachedImageBytes bounds the memory of the images read and kept (their
	// manifests and configs, by digest and platform): usually a few KiB
	// each, but a registry decides. Default 64 MiB.
	CachedImageBytes int64
	// InsecureRegistries (host[:port]) may be spoken to over plain HTTP
	// (ggcr races it with HTTPS). Allowed loopback registries may too; no
	// other may.
	InsecureRegistries []string
	// LoopbackRegistries allows registries (and token services) on
	// loopback addresses, which are the controller's own pod: off, a
	// tenant cannot have the controller send requests to its metrics or
	// probes (see hostPolicy; the default Transport also refuses to
	// connect to such an address a name resolved to). For development
	// clusters and tests.
	LoopbackRegistries bool
	// DeniedNetworks are networks no request goes to, beside the
	// link-local ones always denied (cloud metadata): the cluster's pod
	// and service networks, say, so that a tenant cannot have the
	// controller send requests to the cluster's own services. A host that
	// is such an address is refused before any request; a name resolving
	// to one, when it is dialed (the default Transport).
	DeniedNetworks []netip.Prefix
	// CACertificates are PEM certificates trusted beside the system's, for
	// registries whose certificates a private CA signed. Used only by the
	// default Transport.
	CACertificates []byte
	// RememberedBlobs bounds how many (repository, blob) pairs the client
	// remembers a registry holding, to skip asking about them when it
	// pushes (see blobMemory): each about 200 bytes. Default 65,536;
	// negative: remember none.
	RememberedBlobs int
	// NamedHosts bounds the registries whose requests, bytes and probes are
	// counted under their own name (Stats, ProbeResults, HostLabel: the
	// metrics' host label); the rest are counted as OtherHosts. Hosts are tenants' choice (a builder's
	// tag): without a bound, 5,000 made-up names are 5,000 entries and
	// metric series. Default 256.
	NamedHosts int
	// MetricHosts, when given, are the registries counted under their own
	// name, and the only ones (NamedHosts then does not apply): an
	// operator's list, so that no tenant's registry takes a name.
	MetricHosts []string
	// MaxTags bounds the tags of a repository listed (ListTags), for a
	// policy to choose from: each a string held until the choice. Default
	// 10,000.
	MaxTags int
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.MinReadRate <= 0 {
		o.MinReadRate = 256 << 10
	}
	if o.AnswerTimeout <= 0 {
		o.AnswerTimeout = 5 * time.Second
	}
	if o.WriteAnswerTimeout <= 0 {
		o.WriteAnswerTimeout = time.Minute
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = 30 * time.Second
	}
	if o.Retry.Steps < 1 {
		o.Retry = remote.Backoff{Duration: 200 * time.Millisecond, Factor: 3, Jitter: 0.1, Steps: 3}
	}
	if o.MaxRetryAfterWait == 0 {
		o.MaxRetryAfterWait = 10 * time.Second
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = 64 << 10
	}
	if o.Transport == nil {
		o.Transport = defaultTransport(o.CACertificates, newHostPolicy(o), o.MaxHeaderBytes)
	}
	if o.UserAgent == "" {
		o.UserAgent = "buildsmith"
	}
	if o.Sessions <= 0 {
		o.Sessions = 512
	}
	if o.NamedHosts <= 0 {
		o.NamedHosts = 256
	}
	if o.RememberedBlobs == 0 {
		o.RememberedBlobs = 1 << 16
	}
	if o.MaxTags <= 0 {
		o.MaxTags = 10000
	}
	if o.CachedImageBytes <= 0 {
		o.CachedImageBytes = 64 << 20
	}
	if o.Circuits.ProbeTimeout <= 0 {
		// A little over the answer timeout, so that a hang is reported by
		// the stall watchdog, with its message.
		o.Circuits.ProbeTimeout = o.AnswerTimeout + time.Second
	}
	if o.Circuits.CheckTimeout <= 0 {
		o.Circuits.CheckTimeout = min(2*time.Second, o.AnswerTimeout)
	}
	o.Circuits = o.Circuits.withDefaults()
	return o
}

func defaultTransport(caCertificates []byte, policy hostPolicy, maxHeaderBytes int64) http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxResponseHeaderBytes = maxHeaderBytes
	// Names are checked before any request (hostPolicy); the dialer checks
	// where they resolved to: a name of a tenant's pointing at 127.0.0.1.
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second, Control: policy.dialControl}
	t.DialContext = dialer.DialContext
	t.TLSHandshakeTimeout = 10 * time.Second
	t.MaxIdleConnsPerHost = 16
	if len(caCertificates) > 0 {
		t.TLSClientConfig = &tls.Config{RootCAs: certPool(caCertificates), MinVersion: tls.VersionTLS12}
	}
	return t
}

// certPool is the system's pool with pem's certificates added (checked by
// CheckCACertificates first).
func certPool(pem []byte) *x509.CertPool {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	pool.AppendCertsFromPEM(pem)
	return pool
}

// CheckCACertificates says whether pem holds at least one certificate, for
// flags to fail at start rather than at the first TLS handshake.
func CheckCACertificates(pem []byte) error {
	if !x509.NewCertPool().AppendCertsFromPEM(pem) {
		return errors.New("no PEM certificate found")
	}
	return nil
}

// Client reads and writes images. It is safe for concurrent use; share one.
type Client struct {
	opts Options
	// lifetime is the context of lazy layers, which are read long after the
	// call that made them returned (when a builder image is written).
	lifetime context.Context
	// transport is what ggcr sends every request through (see layers).
	transport http.RoundTripper
	counts    *countingTransport
	hosts     hostPolicy
	circuits  *Circuits
	holds     *retryAfterHolds

	mu       sync.Mutex
	sessions *lru.Cache         // keychain cache key → *session
	images   *boundedCache      // see imageCache
	reads    singleflight.Group // one read per reference, credentials and platform at a time
	blobs    *blobMemory        // which blobs repositories hold, for pushes
	traits   *registryTraits    // what pushes learned of each registry
}

// New returns a Client. Lazy layers of images it returns stay readable, and
// health probes run, until lifetime is done.
func New(lifetime context.Context, opts Options) *Client {
	opts = opts.withDefaults()
	c := &Client{
		opts:     opts,
		lifetime: lifetime,
		hosts:    newHostPolicy(opts),
		holds:    newRetryAfterHolds(max(opts.MaxRetryAfterWait, 0)),
		sessions: lru.New(opts.Sessions),
		images:   newBoundedCache(opts.CachedImageBytes),
		blobs:    newBlobMemory(opts.RememberedBlobs),
		traits:   newRegistryTraits(),
	}
	c.transport = c.layers(newHostNames(opts.NamedHosts, opts.MetricHosts))
	return c
}

// layers builds the transport under ggcr's auth and retry, from the wire
// up: each layer wraps the one below it, and a request passes them from
// the last to the first. Every layer from the Retry-After waits down sees
// each attempt ggcr makes. It makes the counts and the circuits on the way,
// whose probes are sent from the middle of the stack.
func (c *Client) layers(names *hostNames) http.RoundTripper {
	o := c.opts
	rt := o.Transport
	// A registry that stops answering, or taking bytes, cut.
	rt = &stallTransport{next: rt, answer: o.AnswerTimeout, writeAnswer: o.WriteAnswerTimeout, idle: o.StallTimeout}
	// Manifests and configs over their size limit cut.
	rt = &limitTransport{next: rt, maxHeaderBytes: o.MaxHeaderBytes}
	// Every request on the wire counted, with its bytes.
	c.counts = newCountingTransport(rt, names)
	// Every answer's Retry-After noted. The circuits' probes go from here:
	// once, noted, but neither gated nor held.
	rt = &retryAfterNotes{next: c.counts, holds: c.holds}
	c.circuits = newCircuits(c.lifetime, o.Circuits, c.holds, rt.RoundTrip, names)
	// Nothing before a Retry-After; a short one waited out and the request
	// sent again.
	rt = &retryAfterWaits{next: rt, holds: c.holds, failing: c.circuits.isOpen}
	// Nothing into an open circuit; what answers say told to the circuits
	// and the call.
	rt = &gateTransport{next: rt, circuits: c.circuits}
	// /v2/ answered from memory for a while.
	rt = newPingCache(rt)
	// Nothing, credentials included, to a host the operator did not allow,
	// nor in clear text where that is not allowed.
	return &hostPolicyTransport{next: rt, policy: c.hosts}
}

// Circuits returns the circuits of failing places, to wait on after a
// transient error.
func (c *Client) Circuits() *Circuits { return c.circuits }

// Stats returns the requests and bytes exchanged so far.
func (c *Client) Stats() Stats { return c.counts.stats() }

// HostLabel is the name host is counted under (itself, or OtherHosts), for
// anything per host that outlives a call: metric series above all.
func (c *Client) HostLabel(host string) string { return c.counts.names.of(host, false) }

// Access is the client acting with one set of credentials: every read and
// write through it authenticates with them (and shares sessions and cached
// images with other Accesses of the same credentials only).
type Access struct {
	client   *Client
	keychain authn.Keychain
}

// As returns the client acting with kc; nil is anonymous.
func (c *Client) As(kc authn.Keychain) Access { return Access{client: c, keychain: kc} }
