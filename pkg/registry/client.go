package registry

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"golang.org/x/sync/singleflight"
	"k8s.io/utils/lru"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// Options tunes a Client. The zero value of every field means its default.
type Options struct {
	// Timeout bounds each read (Resolve, ReadImage), in-call retries
	// included. ggcr's retry sleeps ignore cancellation, so the deadline is
	// what keeps a worker from being parked on a hung registry. Default 30s.
	Timeout time.Duration
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
	// RetryStatusCodes are retried in-call, unless the answer carries a
	// Retry-After (see MaxRetryAfterWait). Default 408, 429, 500, 502, 503,
	// 504.
	RetryStatusCodes []int
	// MaxRetryAfterWait is the longest Retry-After waited out within a
	// call (when its deadline allows), by it and by every other call to
	// the same registry; a longer one fails the call, for the caller's
	// requeue. Default 10s; negative: never wait.
	MaxRetryAfterWait time.Duration
	// Transport carries the requests. Default: http.DefaultTransport's
	// settings with bounded dial, TLS handshake and response header waits.
	Transport http.RoundTripper
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
	// (ggcr races it with HTTPS). Loopback registries always may; no other
	// may.
	InsecureRegistries []string
	// CACertificates are PEM certificates trusted beside the system's, for
	// registries whose certificates a private CA signed. Used only by the
	// default Transport.
	CACertificates []byte
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
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
	if o.RetryStatusCodes == nil {
		o.RetryStatusCodes = []int{
			http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
			http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout,
		}
	}
	if o.MaxRetryAfterWait == 0 {
		o.MaxRetryAfterWait = 10 * time.Second
	}
	if o.Transport == nil {
		o.Transport = defaultTransport(o.CACertificates)
	}
	if o.UserAgent == "" {
		o.UserAgent = "buildsmith"
	}
	if o.Sessions <= 0 {
		o.Sessions = 512
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

func defaultTransport(caCertificates []byte) http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
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
	lifetime  context.Context
	transport *accountingTransport
	pings     http.RoundTripper // the ping cache in front of the circuits' gate and transport, for everything but probes
	cleartext cleartext
	circuits  *Circuits
	waits     *retryAfterHolds

	mu       sync.Mutex
	sessions *lru.Cache         // keychain cache key → *session
	images   *boundedCache      // see imageCache
	reads    singleflight.Group // one read per reference, credentials and platform at a time
}

// session is a puller for one set of credentials; it keeps authenticated
// transports (and bearer tokens) per repository, so repeated reads skip the
// /v2/ ping and the token exchange.
type session struct {
	puller  *remote.Puller
	options []remote.Option
}

// New returns a Client. Lazy layers of images it returns stay readable, and
// health probes run, until lifetime is done.
func New(lifetime context.Context, opts Options) *Client {
	opts = opts.withDefaults()
	// From ggcr down: the ping cache, the circuits' gate, the accounting
	// (and Retry-After holds), the manifest size limit, the stall timeouts,
	// the wire.
	waits := newRetryAfterHolds(time.Now, max(opts.MaxRetryAfterWait, 0))
	stalls := &stallTransport{next: opts.Transport, answer: opts.AnswerTimeout,
		writeAnswer: opts.WriteAnswerTimeout, idle: opts.StallTimeout}
	accounting := newAccountingTransport(&limitTransport{next: stalls}, waits)
	circuits := newCircuits(lifetime, opts.Circuits, waits, accounting.sendOnce)
	accounting.failing = circuits.isOpen
	return &Client{
		opts:      opts,
		lifetime:  lifetime,
		transport: accounting,
		pings: &cleartextTransport{policy: cleartext{allowed: opts.InsecureRegistries},
			next: newPingCache(&gateTransport{next: accounting, circuits: circuits}, time.Now)},
		cleartext: cleartext{allowed: opts.InsecureRegistries},
		circuits:  circuits,
		sessions:  lru.New(opts.Sessions),
		images:    newBoundedCache(opts.CachedImageBytes),
		waits:     waits,
	}
}

// Circuits returns the circuits of failing places, to wait on after a
// transient error.
func (c *Client) Circuits() *Circuits { return c.circuits }

// Stats returns the requests and bytes exchanged so far.
func (c *Client) Stats() Stats { return c.transport.stats() }

// Descriptor is what a reference resolves to.
type Descriptor struct {
	// Ref is the reference's repository at the digest it points to.
	Ref       name.Digest
	MediaType string
	Size      int64
}

// Resolve returns the digest ref points to, with one HEAD request when the
// registry answers it. When HEAD fails for a reason other than a transient
// caused by an unavailable or rate-limiting registry, a GET follows: HEAD
// answers carry no diagnostics (a missing tag and a missing repository look
// the same), and some registries answer HEAD badly (no digest header).
func (c *Client) Resolve(ctx context.Context, ref name.Reference, kc authn.Keychain) (Descriptor, error) {
	ref = c.cleartext.reference(ref)
	var out Descriptor
	err := c.do(ctx, ref, c.opts.Timeout, func(ctx context.Context, s *session) error {
		desc, err := s.puller.Head(ctx, ref)
		if err != nil {
			if reason := Classify(err).Reason; reason == ReasonRegistryUnavailable || reason == ReasonRateLimited {
				return err
			}
			full, getErr := s.puller.Get(ctx, ref)
			if getErr != nil {
				return getErr
			}
			desc = &full.Descriptor
		}
		out = Descriptor{Ref: ref.Context().Digest(desc.Digest.String()), MediaType: string(desc.MediaType), Size: desc.Size}
		return nil
	}, kc)
	return out, err
}

var errBlobTooLarge = errors.New("blob larger than allowed")

// Image is an image read from a registry. Its manifest and config are in
// memory; its layers are not fetched until something reads them, and when an
// image built on them is written to the same registry they are mounted or
// skipped rather than uploaded again.
type Image struct {
	// Ref is what the reference resolved to: the index's digest when it
	// names an index, else the image's.
	Ref name.Digest
	// Digest is the image manifest's digest (different from Ref's when Ref
	// is an index).
	Digest   v1.Hash
	Manifest *v1.Manifest
	Config   *v1.ConfigFile
	// Platform is the platform chosen from an index; nil for a plain image.
	Platform *v1.Platform
	// Platforms are all the platforms Ref has images for: those of the
	// index (attestation manifests left out), or the plain image's own.
	Platforms []v1.Platform
	// Image is the lazy image itself, for building on.
	Image v1.Image

	memory int64 // about what it holds in memory, for the cache's bound
}

// ReadImage reads the manifest and config of the image ref names. When ref
// names an index, the image for platform is chosen from it (when platform
// is nil: linux/amd64, or the first platform of an index without it). An
// image is read once and then served from memory: by digest without a
// request (a thousand builders on one stack read its build image once), by
// tag for the one request that says the tag still names it.
func (c *Client) ReadImage(ctx context.Context, ref name.Reference, platform *v1.Platform, kc authn.Keychain) (*Image, error) {
	ref = c.cleartext.reference(ref)
	keyer, cacheable := orAnonymous(kc).(cacheKeyer)
	if !cacheable {
		return c.readImage(ctx, ref, platform, kc, nil)
	}
	cache := &imageCache{images: c.images, creds: keyer.CacheKey(), platform: platform}
	if digest, byDigest := ref.(name.Digest); byDigest {
		if img, ok := cache.get(digest); ok {
			return img, nil
		}
	}
	// Builders reconciled at once ask for the same images at once: one
	// read serves them all (make bench counted 94 reads of 64 images at
	// 200 builders and 4 workers without this). The shared read outlives
	// any one caller's cancellation (each call has its own deadline in
	// do); a caller whose context ends leaves without waiting for it.
	shared := context.WithoutCancel(ctx)
	result := c.reads.DoChan(cache.key(ref, cache.askedFor()), func() (any, error) {
		return c.readImage(shared, ref, platform, kc, cache)
	})
	select {
	case <-ctx.Done():
		return nil, newError(ref.Context().RegistryStr(), 0, ctx.Err())
	case r := <-result:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*Image), nil
	}
}

// imageCache keeps the images read with one set of credentials, by digest:
// content-addressed, so never stale. By credentials, since lazy layers read
// with the credentials they were made with. An image manifest's digest names
// the same image whatever platform was asked for; an index's digest is kept
// per platform asked for.
type imageCache struct {
	images   *boundedCache // key → *Image
	creds    string
	platform *v1.Platform // asked for
}

// anyPlatform keys an image manifest's digest.
const anyPlatform = "*"

func (c *imageCache) key(ref name.Reference, platform string) string {
	return c.creds + "|" + ref.Name() + "|" + platform
}

// askedFor is the platform asked for, as an index's chosen image is kept
// under.
func (c *imageCache) askedFor() string {
	if c.platform == nil {
		return "default"
	}
	return platformString(*c.platform)
}

func (c *imageCache) get(digest name.Digest) (*Image, bool) {
	for _, platform := range []string{anyPlatform, c.askedFor()} {
		if img, ok := c.images.Get(c.key(digest, platform)); ok {
			return img.(*Image), true
		}
	}
	return nil, false
}

// add keeps img: a plain image under its digest for any platform; an
// image chosen from an index under the index's digest for the platform
// asked for and the one chosen, and as the plain image it also is under
// its own digest.
func (c *imageCache) add(img *Image) {
	if img.Platform == nil {
		c.images.Add(c.key(img.Ref, anyPlatform), img, img.memory)
		return
	}
	c.images.Add(c.key(img.Ref, c.askedFor()), img, img.memory)
	// And for the platform chosen, which is what asking for it chooses
	// (the lifecycle image is read for any platform first, then for each).
	c.images.Add(c.key(img.Ref, platformString(*img.Platform)), img, img.memory)
	plain := *img
	plain.Ref = img.Ref.Context().Digest(img.Digest.String())
	plain.Platform, plain.Platforms = nil, []v1.Platform{configPlatform(img.Config)}
	c.images.Add(c.key(plain.Ref, anyPlatform), &plain, plain.memory)
}

func configPlatform(config *v1.ConfigFile) v1.Platform {
	return v1.Platform{OS: config.OS, Architecture: config.Architecture, Variant: config.Variant}
}

func orAnonymous(kc authn.Keychain) authn.Keychain {
	if kc == nil {
		return Anonymous
	}
	return kc
}

// readImage reads ref, keeping it in cache when there is one.
func (c *Client) readImage(ctx context.Context, ref name.Reference, platform *v1.Platform, kc authn.Keychain, cache *imageCache) (*Image, error) {
	var out *Image
	err := c.do(ctx, ref, c.opts.Timeout, func(ctx context.Context, s *session) error {
		var err error
		out, err = c.readManifests(ctx, s, ref, platform, cache)
		return err
	}, kc)
	if err == nil && cache != nil {
		cache.add(out)
	}
	return out, err
}

// readManifests reads ref's manifest, and the rest of the image unless
// cache has it by the digest the manifest turned out to have.
func (c *Client) readManifests(ctx context.Context, s *session, ref name.Reference, platform *v1.Platform, cache *imageCache) (*Image, error) {
	host := ref.Context().RegistryStr()
	desc, err := s.puller.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	// A tag read again (every buildpackage of a store, on every reconcile)
	// costs one request when it still names what it named before.
	if cache != nil {
		if img, ok := cache.get(ref.Context().Digest(desc.Digest.String())); ok {
			return img, nil
		}
	}
	img := &Image{Ref: ref.Context().Digest(desc.Digest.String()), Digest: desc.Digest}
	raw, mediaType := desc.Manifest, desc.MediaType
	if mediaType.IsIndex() {
		child, cached, err := c.indexChild(ctx, s, img, raw, platform, cache)
		if err != nil || cached != nil {
			return cached, err
		}
		raw, mediaType, img.Digest = child.Manifest, child.MediaType, child.Digest
	}
	if !mediaType.IsImage() {
		return nil, permanentError(ReasonInvalidImage, host, fmt.Errorf("%s is not an image: media type %q", img.Ref, mediaType))
	}
	if img.Manifest, err = v1.ParseManifest(bytes.NewReader(raw)); err != nil {
		return nil, permanentError(ReasonInvalidImage, host, fmt.Errorf("manifest of %s: %w", img.Ref, err))
	}
	rawConfig, err := readConfig(ctx, s, img)
	if err != nil {
		return nil, err
	}
	if img.Platforms == nil {
		img.Platforms = []v1.Platform{configPlatform(img.Config)}
	}
	layers, err := c.describeLayers(s, img)
	if err != nil {
		return nil, err
	}
	img.Image = &remoteImage{
		repo: ref.Context(), rawManifest: raw, mediaType: mediaType, manifest: img.Manifest,
		rawConfig: rawConfig, config: img.Config, layers: layers,
	}
	// Raw and parsed, about twice the raw bytes.
	img.memory = 2 * int64(len(raw)+len(rawConfig))
	return img, nil
}

// indexChild picks the image of platform (linux/amd64, or any when the
// index has none) from the index img names, whose manifest is raw, and
// records the platforms on img. It returns the child's descriptor, or, when
// the cache holds the child already, the image read from it.
func (c *Client) indexChild(ctx context.Context, s *session, img *Image, raw []byte, platform *v1.Platform,
	cache *imageCache) (*remote.Descriptor, *Image, error) {
	host := img.Ref.RegistryStr()
	index, err := v1.ParseIndexManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, nil, permanentError(ReasonInvalidImage, host, fmt.Errorf("index %s: %w", img.Ref, err))
	}
	want := v1.Platform{OS: "linux", Architecture: "amd64"}
	if platform != nil {
		want = *platform
	} else if platforms := indexPlatforms(index); len(platforms) > 0 && !slices.ContainsFunc(platforms, func(p v1.Platform) bool {
		return p.OS == want.OS && p.Architecture == want.Architecture
	}) {
		want = platforms[0] // no linux/amd64: any platform will do
	}
	child, ok := choosePlatform(index.Manifests, want)
	if !ok {
		return nil, nil, permanentError(ReasonPlatformNotFound, host,
			fmt.Errorf("index %s has no image for %s", img.Ref, platformString(want)))
	}
	img.Platform = child.Platform
	img.Platforms = indexPlatforms(index)
	childRef := img.Ref.Context().Digest(child.Digest.String())
	if cache != nil {
		// Read before, for this platform or as an image of its own (a
		// store reads each platform of an index in turn).
		if plain, ok := cache.get(childRef); ok {
			fromIndex := *plain
			fromIndex.Ref, fromIndex.Platform, fromIndex.Platforms = img.Ref, img.Platform, img.Platforms
			return nil, &fromIndex, nil
		}
	}
	desc, err := s.puller.Get(ctx, childRef)
	return desc, nil, err
}

// readConfig reads and parses img's config (within maxConfigSize) into
// img.Config, and returns its bytes.
func readConfig(ctx context.Context, s *session, img *Image) ([]byte, error) {
	host := img.Ref.RegistryStr()
	if size := img.Manifest.Config.Size; size > maxConfigSize {
		return nil, permanentError(ReasonInvalidImage, host, fmt.Errorf("the config of %s is %s, more than the %s allowed",
			img.Ref, byteSize(size), byteSize(maxConfigSize)))
	}
	configLayer, err := s.puller.Layer(ctx, img.Ref.Context().Digest(img.Manifest.Config.Digest.String()))
	if err != nil {
		return nil, err
	}
	raw, err := readAll(configLayer, maxConfigSize)
	if errors.Is(err, errBlobTooLarge) {
		return nil, permanentError(ReasonInvalidImage, host, fmt.Errorf("config of %s: %w", img.Ref, err))
	} else if err != nil {
		return nil, err
	}
	if img.Config, err = v1.ParseConfigFile(bytes.NewReader(raw)); err != nil {
		return nil, permanentError(ReasonInvalidImage, host, fmt.Errorf("config of %s: %w", img.Ref, err))
	}
	return raw, nil
}

// describeLayers returns img's layers, read only when used: each knows its
// descriptor and diffID without a request, and mounts from img's repository.
func (c *Client) describeLayers(s *session, img *Image) ([]v1.Layer, error) {
	if len(img.Config.RootFS.DiffIDs) != len(img.Manifest.Layers) {
		return nil, permanentError(ReasonInvalidImage, img.Ref.RegistryStr(), fmt.Errorf("%s lists %d layers and %d diffIDs",
			img.Ref, len(img.Manifest.Layers), len(img.Config.RootFS.DiffIDs)))
	}
	layers := make([]v1.Layer, len(img.Manifest.Layers))
	for i, desc := range img.Manifest.Layers {
		digestRef := img.Ref.Context().Digest(desc.Digest.String())
		// The lifetime context: the layer is read, if ever, long after
		// this call returned.
		inner, err := s.puller.Layer(c.lifetime, digestRef)
		if err != nil {
			return nil, err
		}
		layers[i] = &remote.MountableLayer{
			Layer:     &describedLayer{Layer: inner, desc: desc, diffID: img.Config.RootFS.DiffIDs[i]},
			Reference: digestRef,
		}
	}
	return layers, nil
}

// indexPlatforms lists the platforms of an index's images, leaving out the
// manifests that are not images to run (attestations, "unknown/unknown").
func indexPlatforms(index *v1.IndexManifest) []v1.Platform {
	var out []v1.Platform
	for _, m := range index.Manifests {
		if m.Platform == nil || m.Platform.OS == "unknown" || !m.MediaType.IsImage() {
			continue
		}
		out = append(out, *m.Platform)
	}
	return out
}

// Artifact is what Write pushes: an image, or an index with its images.
type Artifact interface {
	remote.Taggable
	Digest() (v1.Hash, error)
}

// Write pushes img (an image, or an index and its images) to tag. ggcr skips blobs the repository has and mounts
// layers from other repositories of the same registry; layers of images read
// through this Client are such layers, so nothing is downloaded. Each Write
// uses a fresh ggcr Pusher: a Pusher remembers every blob it ever uploaded
// and skips it without asking, which outlives a registry's garbage
// collection, and accumulates the scopes of every repository it mounted from.
func (c *Client) Write(ctx context.Context, tag name.Tag, img Artifact, kc authn.Keychain) (name.Digest, error) {
	tag = c.cleartext.tag(tag)
	var out name.Digest
	err := c.do(ctx, tag, c.opts.WriteTimeout, func(ctx context.Context, s *session) error {
		digest, err := img.Digest()
		if err != nil {
			return err
		}
		pusher, err := remote.NewPusher(s.options...)
		if err != nil {
			return err
		}
		if err := pusher.Push(ctx, tag, img); err != nil {
			return err
		}
		out = tag.Context().Digest(digest.String())
		return nil
	}, kc)
	return out, err
}

// do runs op with a deadline (none when timeout is 0) and a call state,
// classifies its error, and opens the circuit of the place where it met an
// outage.
func (c *Client) do(ctx context.Context, ref name.Reference, timeout time.Duration, op func(context.Context, *session) error, kc authn.Keychain) error {
	target := Place{Host: ref.Context().RegistryStr(), Repository: ref.Context().RepositoryStr()}
	// The circuit first: its error names the place to wait on (and carries
	// the hold's Retry-After, before which it is not probed).
	if refused := c.circuits.refuse(ctx, target); refused != nil {
		return refused
	}
	if wait := c.waits.check(target.Host, target.Repository); wait != nil {
		return wait
	}
	s, err := c.session(kc)
	if err != nil {
		return newError(target.Host, 0, err)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	ctx, state := withCall(ctx)
	if err := op(ctx, s); err != nil {
		e := newError(target.Host, state.RetryAfter(), err)
		if failed := state.outage(); failed != nil && e.Class == failure.Transient {
			e.Host, e.Repository = failed.place.Host, failed.place.Repository
			c.circuits.open(failed.place, e, failed.probe)
		}
		return e
	}
	return nil
}

// Keychains that implement CacheKey share cached sessions: equal keys must
// mean equal credentials.
type cacheKeyer interface{ CacheKey() string }

func (c *Client) session(kc authn.Keychain) (*session, error) {
	kc = orAnonymous(kc)
	keyer, cacheable := kc.(cacheKeyer)
	if cacheable {
		c.mu.Lock()
		defer c.mu.Unlock()
		if s, ok := c.sessions.Get(keyer.CacheKey()); ok {
			return s.(*session), nil
		}
	}
	opts := []remote.Option{
		remote.WithAuthFromKeychain(kc),
		remote.WithTransport(c.pings),
		remote.WithRetryBackoff(c.opts.Retry),
		remote.WithRetryStatusCodes(c.opts.RetryStatusCodes...),
		remote.WithRetryPredicate(c.retryInCall),
		remote.WithUserAgent(c.opts.UserAgent),
	}
	puller, err := remote.NewPuller(opts...)
	if err != nil {
		return nil, err
	}
	s := &session{puller: puller, options: opts}
	if cacheable {
		c.sessions.Add(keyer.CacheKey(), s)
	}
	return s, nil
}

// retryInCall decides ggcr's in-call retries. It replaces ggcr's default
// predicate: answers with a status of Options.RetryStatusCodes (ggcr's write
// path asks the predicate about those too), and connections cut short. An
// answer with Retry-After is not retried by ggcr, whose sleep would ignore
// it: the transport waits out short ones itself (see retryAfterHolds), and
// the caller requeues after long ones. Refused connections, DNS failures
// and timeouts are not retried in-call either, nor anything on a registry
// with open circuits: the circuits' probes retry for every caller at once.
func (c *Client) retryInCall(err error) bool {
	if host := requestHost(err); host != "" && c.circuits.failing(host) {
		return false
	}
	var te *transport.Error
	if errors.As(err, &te) {
		if te.Request != nil {
			if state := callFrom(te.Request.Context()); state != nil && state.RetryAfter() > 0 {
				return false
			}
		}
		return slices.Contains(c.opts.RetryStatusCodes, te.StatusCode)
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// requestHost returns the host of the request err is about, "" if unknown.
func requestHost(err error) string {
	var te *transport.Error
	if errors.As(err, &te) && te.Request != nil {
		return te.Request.URL.Host
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		if u, perr := url.Parse(urlErr.URL); perr == nil {
			return u.Host
		}
	}
	return ""
}

func readAll(l v1.Layer, limit int64) ([]byte, error) {
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w (%d bytes)", errBlobTooLarge, limit)
	}
	return b, nil
}
