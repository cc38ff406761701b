package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sync/singleflight"
	"k8s.io/utils/lru"
)

// registryTraits remembers what pushes learned of each registry: whether it
// refuses an image manifest naming a blob the repository lacks (probed per
// registry and manifest family, probeChecks; only then does a push take the
// blob memory's word: docs/design.md § Pushes, "Why trusting it is safe"),
// and whether it ignores a small blob sent whole in the POST that opens its
// upload (the distribution registry answers 202 and wants the bytes again
// in a PUT: it is sent no more such bodies).
type registryTraits struct {
	mu          sync.Mutex
	checks      *lru.Cache // checkKey → checkVerdict
	postIgnored *lru.Cache // host → true: ignores a blob sent in the POST
	probing     singleflight.Group
}

// checkKey is a registry and a manifest family.
type checkKey struct {
	host   string
	docker bool
}

type checkVerdict struct {
	checks bool
	until  time.Time
}

// How long verdicts of the manifest probe stand.
const (
	checkVerdictFor  = 24 * time.Hour
	inconclusiveFor  = 10 * time.Minute
	probeWaitTimeout = 30 * time.Second
)

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

// trusted says whether p's registry refuses manifests of mediaType's family
// whose blobs it lacks, probing it through p when it is not known. A caller
// waiting on another's probe stops waiting when its context ends (and does
// not trust); the probe runs on after its starter's context ends, for the
// others, within probeWaitTimeout.
func (m *registryTraits) trusted(ctx context.Context, p *push, mediaType types.MediaType) bool {
	key := checkKey{host: p.repo.RegistryStr(), docker: !strings.Contains(string(mediaType), "oci")}
	m.mu.Lock()
	v, ok := m.checks.Get(key)
	m.mu.Unlock()
	if ok && time.Now().Before(v.(checkVerdict).until) {
		return v.(checkVerdict).checks
	}
	probeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeWaitTimeout)
	done := m.probing.DoChan(fmt.Sprint(key), func() (any, error) {
		defer cancel()
		checks, known := p.prober().probeChecks(probeCtx, key.docker)
		verdict := checkVerdict{checks: checks, until: time.Now().Add(checkVerdictFor)}
		if !known {
			verdict.until = time.Now().Add(inconclusiveFor)
		}
		m.mu.Lock()
		m.checks.Add(key, verdict)
		m.mu.Unlock()
		return checks, nil
	})
	select {
	case r := <-done:
		return r.Val.(bool)
	case <-ctx.Done():
		return false
	}
}

// prober is a push of the probe's own into p's repository: the probe's
// exchanges pace themselves, and their failure (the probe is inconclusive)
// does not end p.
func (p *push) prober() *push {
	return &push{c: p.c, repo: p.repo, key: p.key, http: p.http, pacing: newPushPacing()}
}

// probeBlob is uploaded for the probe; probeMissing is a blob no registry
// holds.
var (
	probeBlob    = []byte("{}")
	probeMissing = []byte("buildsmith: a blob no registry holds, named to see the registry refuse a manifest\n")
)

// probeChecks runs the probe (see registryTraits) for one manifest family
// and says whether the registry refused both manifests for their missing
// blob, and whether its answers said so either way.
func (p *push) probeChecks(ctx context.Context, docker bool) (checks, known bool) {
	manifestType, configType, layerType := types.OCIManifestSchema1, types.OCIConfigJSON, types.OCILayer
	if docker {
		manifestType, configType, layerType = types.DockerManifestSchema2, types.DockerConfigJSON, types.DockerLayer
	}
	present := static.NewLayer(probeBlob, layerType)
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
	for _, m := range []v1.Manifest{
		{Config: descriptorOf(probeBlob, configType), Layers: []v1.Descriptor{descriptorOf(probeMissing, layerType)}},
		{Config: descriptorOf(probeMissing, configType), Layers: []v1.Descriptor{descriptorOf(probeBlob, layerType)}},
	} {
		m.SchemaVersion, m.MediaType = 2, manifestType
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
	// Refused for the missing blob: it checks. Anything else (a failure,
	// a refusal for another reason) says nothing.
	return refusedForMissing(err), refusedForMissing(err)
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
