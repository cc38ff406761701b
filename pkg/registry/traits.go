package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sync/singleflight"
	"k8s.io/utils/lru"
)

// registryTraits remembers what pushes learned of each registry: whether it
// refuses an image manifest naming a blob the repository lacks, and whether
// it ignores a blob sent whole in the POST that opens an upload.
//
// Manifest checks. The distribution registry
// does, and so do the hosted registries by their documentation; go-
// containerregistry's test registry does not. Only where a registry was
// seen to refuse does a push take the blob memory's word and skip asking:
// elsewhere a wrong memory (a blob garbage-collected since) would give a
// builder with a missing layer, and nothing would say so.
//
// The probe is two manifest PUTs by digest into the repository pushed to,
// each naming a blob no registry holds: one as a layer, one as the config
// (beside a blob just uploaded in the other role). Refused both times with
// MANIFEST_BLOB_UNKNOWN or BLOB_UNKNOWN, the registry checks both roles. A
// registry that accepts one keeps an untagged manifest of a few hundred
// bytes, which the probe deletes where the registry allows. About four
// requests per registry and controller process.
//
// The single POST. The distribution spec lets a client send a blob whole in
// the POST that opens its upload (?digest=): one request instead of two.
// Registries that do not take it answer 202 and a location, as for any POST,
// and the bytes are sent again in the PUT; such a registry is remembered and
// sent no more bodies in a POST. Only small blobs are sent so (smallBlob).
type registryTraits struct {
	mu          sync.Mutex
	checks      *lru.Cache // host → bool: refuses manifests naming missing blobs
	postIgnored *lru.Cache // host → true: ignores a blob sent in the POST
	probing     singleflight.Group
}

// traitHosts bounds the hosts remembered: a tenant names hosts.
const traitHosts = 1024

func newRegistryTraits() *registryTraits {
	return &registryTraits{checks: lru.New(traitHosts), postIgnored: lru.New(traitHosts)}
}

// sendsInPost says whether to send a small blob whole in the POST to host.
func (m *registryTraits) sendsInPost(host string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ignored := m.postIgnored.Get(host)
	return !ignored
}

// ignoresPost records that host did not take a blob sent in the POST.
func (m *registryTraits) ignoresPost(host string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.postIgnored.Add(host, true)
}

// trusted says whether p's registry refuses manifests whose blobs it lacks,
// probing it through p the first time. An inconclusive probe (the registry
// failing, or refusing the probe's blob) is not remembered and says no.
func (m *registryTraits) trusted(ctx context.Context, p *push) bool {
	host := p.repo.RegistryStr()
	m.mu.Lock()
	verdict, ok := m.checks.Get(host)
	m.mu.Unlock()
	if ok {
		return verdict.(bool)
	}
	v, _, _ := m.probing.Do(host, func() (any, error) {
		checks, known := p.probeChecks(ctx)
		if known {
			m.mu.Lock()
			m.checks.Add(host, checks)
			m.mu.Unlock()
		}
		return checks, nil
	})
	return v.(bool)
}

// probeBlob is uploaded for the probe; probeMissing is a blob no registry
// holds.
var (
	probeBlob    = []byte("{}")
	probeMissing = []byte("buildsmith: a blob no registry holds, named to see the registry refuse a manifest\n")
)

// probeChecks runs the probe (see registryTraits) and says whether the
// registry refused both manifests for their missing blob, and whether the
// answers said so either way.
func (p *push) probeChecks(ctx context.Context) (checks, known bool) {
	present := static.NewLayer(probeBlob, types.OCILayer)
	digest, _ := present.Digest()
	if err := p.retry(ctx, func() error {
		location, err := p.startUpload(ctx, digest, nil, nil)
		if err != nil || location == nil {
			return err
		}
		return p.finishUpload(ctx, location, digest, present)
	}); err != nil {
		return false, false
	}
	missing := descriptorOf(probeMissing, types.OCILayer)
	held := descriptorOf(probeBlob, types.OCILayer)
	for _, m := range []v1.Manifest{
		{Config: descriptorOf(probeBlob, types.OCIConfigJSON), Layers: []v1.Descriptor{missing}},
		{Config: descriptorOf(probeMissing, types.OCIConfigJSON), Layers: []v1.Descriptor{held}},
	} {
		m.SchemaVersion, m.MediaType = 2, types.OCIManifestSchema1
		refused, known := p.probeManifest(ctx, m)
		if !refused || !known {
			return false, known
		}
	}
	return true, true
}

// probeManifest PUTs m by digest: refused for a missing blob, or accepted
// (and deleted again, where the registry allows), are known answers.
func (p *push) probeManifest(ctx context.Context, m v1.Manifest) (refused, known bool) {
	raw, err := json.Marshal(m)
	if err != nil {
		return false, false
	}
	digest, _, _ := v1.SHA256(bytes.NewReader(raw))
	at := p.repo.Digest(digest.String())
	err = p.putManifest(ctx, at, rawManifest{raw: raw, mediaType: m.MediaType})
	if err == nil {
		_, _ = p.send(ctx, http.MethodDelete, p.url("manifests/"+digest.String()), nil, 0, nil, http.StatusAccepted, http.StatusOK)
		return false, true
	}
	if refusedForMissing(err) {
		return true, true
	}
	var te *transport.Error
	// Another refusal of the probe will not change (credentials and rate
	// limits aside): the registry is not known to check.
	if !errors.As(err, &te) {
		return false, false
	}
	switch te.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusTooManyRequests:
		return false, false
	}
	return false, te.StatusCode >= 400 && te.StatusCode < 500
}

func descriptorOf(b []byte, mediaType types.MediaType) v1.Descriptor {
	digest, size, _ := v1.SHA256(bytes.NewReader(b))
	return v1.Descriptor{MediaType: mediaType, Digest: digest, Size: size}
}

// rawManifest is a manifest to PUT as it is.
type rawManifest struct {
	raw       []byte
	mediaType types.MediaType
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.raw, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return m.mediaType, nil }
