package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/worker"
)

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
func (a Access) Resolve(ctx context.Context, ref name.Reference) (Descriptor, error) {
	return a.resolve(ctx, ref, false)
}

// resolve is Resolve; for a lookup, a HEAD that says 404 is the answer: no
// GET follows to tell a missing tag from a missing repository, as both
// mean "not there yet" (a builder's signature tag, before its first
// signature, is looked up so).
func (a Access) resolve(ctx context.Context, ref name.Reference, lookup bool) (Descriptor, error) {
	c, kc := a.client, a.keychain
	ref = c.hosts.reference(ref)
	var out Descriptor
	err := c.do(ctx, ref.Context(), c.opts.Timeout, func(ctx context.Context, s *session) error {
		desc, err := s.puller.Head(ctx, ref)
		if err != nil {
			if reason := Classify(err).Reason; reason == ReasonRegistryUnavailable || reason == ReasonRateLimited ||
				(lookup && reason == ReasonImageNotFound) {
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

// Lookup is Resolve for a reference that may name nothing yet: found is
// false, with no error, when the registry says there is no such image (a
// tag never pushed, or deleted).
func (a Access) Lookup(ctx context.Context, ref name.Reference) (desc Descriptor, found bool, err error) {
	desc, err = a.resolve(ctx, ref, true)
	if err != nil && Classify(err).Reason == ReasonImageNotFound {
		return Descriptor{}, false, nil
	}
	return desc, err == nil, err
}

// ReadLayer writes the blob at ref (a layer as stored, compressed), of
// size bytes as its manifest declares, to w, checked against its digest.
// At most size bytes are taken: a registry sending more (an endless body)
// fails the read at the first byte beyond, before it reaches w. The read
// is not cut while bytes move at MinReadRate or faster: its deadline is
// Timeout plus what size takes at that rate (and a body that stops for
// AnswerTimeout is cut sooner). An error of w's is returned as it is,
// never taken for the registry's.
func (a Access) ReadLayer(ctx context.Context, ref name.Digest, size int64, w io.Writer) error {
	c := a.client
	if insecure, ok := c.hosts.reference(ref).(name.Digest); ok {
		ref = insecure
	}
	dst := &recordingWriter{w: w}
	err := c.do(ctx, ref.Context(), c.readLayerTimeout(size), func(ctx context.Context, s *session) error {
		layer, err := s.puller.Layer(ctx, ref)
		if err != nil {
			return err
		}
		rc, err := layer.Compressed()
		if err != nil {
			return err
		}
		defer rc.Close()
		n, err := io.Copy(dst, io.LimitReader(rc, size))
		if err != nil {
			if dst.err == nil {
				return err
			}
			return nil
		}
		if n < size {
			return blobSizeError(ref, size, fmt.Sprintf("ended after %d", n))
		}
		// The digest is checked when the body ends: read on to its end,
		// which must come now.
		if extra, err := io.Copy(io.Discard, io.LimitReader(rc, 1)); extra > 0 {
			return blobSizeError(ref, size, "sent more than")
		} else if err != nil {
			return err
		}
		return nil
	}, a.keychain)
	if dst.err != nil {
		return dst.err
	}
	if e, ok := failure.As(err); ok && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		out := *e
		out.Err = fmt.Errorf("%w (a blob of %d bytes has %s: --registry-timeout plus its size at --registry-min-read-rate)",
			e.Err, size, c.readLayerTimeout(size).Round(time.Second))
		return &out
	}
	return err
}

// readLayerTimeout is the deadline of reading a blob of size bytes.
func (c *Client) readLayerTimeout(size int64) time.Duration {
	return c.opts.Timeout + time.Duration(float64(max(size, 0))/float64(c.opts.MinReadRate)*float64(time.Second))
}

// blobSizeError is a blob whose bytes are not the size its manifest
// declares: the registry's answer is wrong (as with other bytes under the
// digest), and the next read may be right.
func blobSizeError(ref name.Digest, size int64, what string) error {
	return &failure.Error{Class: failure.Transient, Reason: ReasonRegistryError,
		Err: fmt.Errorf("blob %s: the registry %s the %d bytes its manifest declares; not read further", ref.DigestStr(), what, size)}
}

// recordingWriter keeps the first error of w apart from those of what is
// copied into it.
type recordingWriter struct {
	w   io.Writer
	err error
}

func (r *recordingWriter) Write(p []byte) (int, error) {
	n, err := r.w.Write(p)
	if err != nil && r.err == nil {
		r.err = err
	}
	return n, err
}

// ReadImage reads the manifest and config of the image ref names. When ref
// names an index, the image for platform is chosen from it (when platform
// is nil: linux/amd64, or the first platform of an index without it). An
// image is read once and then served from memory: by digest without a
// request (a thousand builders on one stack read its build image once), by
// tag for the one request that says the tag still names it.
func (a Access) ReadImage(ctx context.Context, ref name.Reference, platform *v1.Platform) (*Image, error) {
	c, kc := a.client, a.keychain
	ref = c.hosts.reference(ref)
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
	// read serves them all (bench/results.md § 1 counts the reads). The
	// shared read outlives any one caller's cancellation (each call has
	// its own deadline in do); a caller whose context ends leaves without
	// waiting for it.
	// Its waits are no one caller's (each waits on the result below).
	shared := worker.With(context.WithoutCancel(ctx), nil)
	result := c.reads.DoChan(cache.key(ref, cache.askedFor()), func() (any, error) {
		return c.readImage(shared, ref, platform, kc, cache)
	})
	defer worker.Wait(ctx)()
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
	return cnb.PlatformOf(*c.platform).String()
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
	c.images.Add(c.key(img.Ref, cnb.PlatformOf(*img.Platform).String()), img, img.memory)
	plain := *img
	plain.Ref = img.Ref.Context().Digest(img.Digest.String())
	plain.Platform, plain.Platforms = nil, []v1.Platform{configPlatform(img.Config)}
	c.images.Add(c.key(plain.Ref, anyPlatform), &plain, plain.memory)
}

func configPlatform(config *v1.ConfigFile) v1.Platform {
	return v1.Platform{OS: config.OS, Architecture: config.Architecture, Variant: config.Variant}
}

// readImage reads ref, keeping it in cache when there is one.
func (c *Client) readImage(ctx context.Context, ref name.Reference, platform *v1.Platform, kc authn.Keychain, cache *imageCache) (*Image, error) {
	var out *Image
	err := c.do(ctx, ref.Context(), c.opts.Timeout, func(ctx context.Context, s *session) error {
		var err error
		out, err = c.readManifests(ctx, s, ref, platform, cache)
		return err
	}, kc)
	if err != nil {
		return nil, err
	}
	if cache != nil {
		cache.add(out)
	}
	// The repository holds what its manifest names: a push there need
	// not ask about it.
	digests := []v1.Hash{out.Manifest.Config.Digest}
	for _, l := range out.Manifest.Layers {
		digests = append(digests, l.Digest)
	}
	c.blobs.remember(out.Ref.Context().Name(), digests...)
	return out, nil
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
	if n := len(img.Manifest.Layers); n > maxImageLayers {
		return nil, permanentError(ReasonInvalidImage, host, fmt.Errorf("%s has %d layers, more than the %d an image read may have", img.Ref, n, maxImageLayers))
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
		return cnb.PlatformOf(p).Matches(cnb.PlatformOf(want))
	}) {
		want = platforms[0] // no linux/amd64: any platform will do
	}
	child, ok := choosePlatform(index.Manifests, want)
	if !ok {
		return nil, nil, permanentError(ReasonPlatformNotFound, host,
			fmt.Errorf("index %s has no image for %s", img.Ref, cnb.PlatformOf(want)))
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
