package registry

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// How a referrer was made findable (OCI distribution 1.1).
const (
	// ListedByAPI: the registry has the referrers API, which lists a
	// manifest by its subject when it is pushed.
	ListedByAPI = "api"
	// ListedByTag: the registry has none; the referrer was added to the
	// index at the tag sha256-<subject hex> (the spec's fallback), where
	// cosign and ORAS look then.
	ListedByTag = "tag"
)

// ReasonInvalidReferrersTag: the fallback tag of a subject holds what a
// referrer cannot be added to (not an index, or more referrers than
// maxReferrers).
const ReasonInvalidReferrersTag = "InvalidReferrersTag"

// Bounds on a fallback index, the registry's to fill: the referrers it may
// list for one to be added (each a descriptor held while the index is
// rewritten), and its size (1,024 descriptors with annotations are about
// 400 KiB), read before limitTransport's manifest bound would refuse it as
// an image.
const (
	maxReferrers          = 1024
	maxReferrersIndexSize = 1 << 20
)

// emptyConfig is the OCI empty descriptor's content, the config of an
// artifact that has none.
var emptyConfig = []byte("{}")

// ReferrerLayer is a blob of a referrer artifact.
type ReferrerLayer struct {
	MediaType   types.MediaType
	Data        []byte
	Annotations map[string]string
}

// NewReferrer is an OCI 1.1 artifact: a manifest of artifactType whose
// subject is subject, with the empty config and layers. Its bytes depend
// on its arguments alone.
func NewReferrer(subject v1.Descriptor, artifactType string, annotations map[string]string, layers ...ReferrerLayer) (v1.Image, error) {
	core := &referrerCore{layers: map[v1.Hash]v1.Layer{}}
	m := v1.Manifest{
		SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: artifactType,
		Config:      v1.Descriptor{MediaType: types.OCIEmptyJSON, Size: int64(len(emptyConfig)), Digest: sha256Of(emptyConfig), Data: emptyConfig},
		Subject:     &v1.Descriptor{MediaType: subject.MediaType, Size: subject.Size, Digest: subject.Digest},
		Annotations: annotations,
	}
	for _, l := range layers {
		digest := sha256Of(l.Data)
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: l.MediaType, Size: int64(len(l.Data)), Digest: digest, Annotations: l.Annotations})
		core.layers[digest] = static.NewLayer(l.Data, l.MediaType)
	}
	var err error
	if core.manifest, err = json.Marshal(m); err != nil {
		return nil, err
	}
	return partial.CompressedToImage(core)
}

func sha256Of(b []byte) v1.Hash {
	sum := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
}

// referrerCore is NewReferrer's artifact, for partial.CompressedToImage.
type referrerCore struct {
	manifest []byte
	layers   map[v1.Hash]v1.Layer
}

func (r *referrerCore) RawConfigFile() ([]byte, error)      { return emptyConfig, nil }
func (r *referrerCore) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (r *referrerCore) RawManifest() ([]byte, error)        { return r.manifest, nil }

func (r *referrerCore) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if h == sha256Of(emptyConfig) {
		return static.NewLayer(emptyConfig, types.OCIEmptyJSON), nil
	}
	if l, ok := r.layers[h]; ok {
		return l, nil
	}
	return nil, fmt.Errorf("referrer: no blob %s", h)
}

// WriteReferrers pushes referrers (made by NewReferrer) by digest into the
// repository of their subject, and makes them findable as the subject's
// referrers. A registry with the referrers API lists a manifest with a
// subject itself, and says so in the PUT's answer (OCI-Subject): nothing
// more to do. Else they are added to the index at the fallback tag, all
// at once (one GET of it and one PUT, none when it lists them already).
// It is decided by the push's own answers, for the repository pushed to:
// no verdict learned from one tenant's repository stands for another's.
// It returns the referrers' digests and how they were listed (ListedByAPI,
// ListedByTag).
func (a Access) WriteReferrers(ctx context.Context, subject name.Digest, referrers ...v1.Image) ([]name.Digest, string, error) {
	c := a.client
	if insecure, ok := c.hosts.reference(subject).(name.Digest); ok {
		subject = insecure
	}
	repo := subject.Context()
	refs := make([]name.Digest, len(referrers))
	for i, r := range referrers {
		digest, err := r.Digest()
		if err != nil {
			return nil, "", err
		}
		refs[i] = repo.Digest(digest.String())
	}
	listed := ListedByAPI
	err := c.do(ctx, repo, c.opts.WriteTimeout, func(ctx context.Context, _ *session) error {
		// One session of the repository for all (a referrer's blobs are
		// its own: nothing to mount).
		p, err := c.newPush(ctx, a.keychain, repo, nil)
		if err != nil {
			return err
		}
		for i, r := range referrers {
			if err := p.write(ctx, refs[i], r); err != nil {
				return err
			}
			if answered, _ := p.subjects.Load(refs[i].Identifier()); answered != subject.DigestStr() {
				listed = ListedByTag
			}
		}
		if listed == ListedByAPI {
			return nil
		}
		return p.addToReferrersTag(ctx, subject, referrers)
	}, a.keychain)
	if err != nil {
		return nil, "", err
	}
	return refs, listed, nil
}

// addToReferrersTag adds referrers to the index at subject's fallback tag
// (made when there is none). The index is read whole (a manifest: 4 MiB
// at most), and not rewritten when it lists the referrer already. Two
// writers at once may lose one's entry, as with every client of the
// fallback: the registry offers no conditional PUT.
func (p *push) addToReferrersTag(ctx context.Context, subject name.Digest, referrers []v1.Image) error {
	tag := p.repo.Tag(strings.Replace(subject.DigestStr(), ":", "-", 1))
	var index v1.IndexManifest
	err := p.retry(ctx, func() error {
		header := http.Header{"Accept": {string(types.OCIImageIndex)}}
		resp, err := p.ask(ctx, http.MethodGet, p.url("manifests/"+tag.TagStr()).String(), header, maxReferrersIndexSize,
			http.StatusOK, http.StatusNotFound)
		if err != nil || resp.status == http.StatusNotFound {
			index = v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
			return err
		}
		if resp.body == nil {
			return p.referrersTagError(tag, "is larger than the %s a referrers index may be", byteSize(maxReferrersIndexSize))
		}
		// An index may leave its mediaType out (image-spec before 1.1):
		// its Content-Type says then.
		index = v1.IndexManifest{}
		contentType := types.MediaType(strings.TrimSpace(strings.Split(resp.contentType, ";")[0]))
		if err := json.Unmarshal(resp.body, &index); err != nil || cmp.Or(index.MediaType, contentType) != types.OCIImageIndex {
			return p.referrersTagError(tag, "holds no OCI image index (%s)", resp.contentType)
		}
		index.MediaType = types.OCIImageIndex
		return nil
	})
	if err != nil {
		return err
	}
	listed := len(index.Manifests)
	for _, r := range referrers {
		desc, err := referrerDescriptor(r)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(index.Manifests, func(d v1.Descriptor) bool { return d.Digest == desc.Digest }) {
			continue
		}
		if len(index.Manifests) >= maxReferrers {
			return p.referrersTagError(tag, "lists %d referrers, as many as buildsmith adds to", len(index.Manifests))
		}
		index.Manifests = append(index.Manifests, desc)
	}
	if len(index.Manifests) == listed {
		return nil
	}
	raw, err := json.Marshal(index)
	if err != nil {
		return err
	}
	return p.putManifest(ctx, tag, rawIndex(raw))
}

func (p *push) referrersTagError(tag name.Tag, format string, args ...any) *failure.Error {
	return placed(Place{Host: p.repo.RegistryStr(), Repository: p.repo.RepositoryStr()}, failure.Waiting, ReasonInvalidReferrersTag, 0,
		fmt.Errorf("the referrers tag %s "+format, append([]any{tag}, args...)...))
}

// referrerDescriptor is how an index lists referrer: with its artifact
// type and annotations, as the spec's referrers list does.
func referrerDescriptor(referrer v1.Image) (v1.Descriptor, error) {
	m, err := referrer.Manifest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	desc, err := partial.Descriptor(referrer)
	if err != nil {
		return v1.Descriptor{}, err
	}
	desc.ArtifactType, desc.Annotations = cmp.Or(m.ArtifactType, string(m.Config.MediaType)), m.Annotations
	return *desc, nil
}

// rawIndex is an index's bytes, as putManifest takes them.
type rawIndex []byte

func (r rawIndex) RawManifest() ([]byte, error)        { return r, nil }
func (r rawIndex) MediaType() (types.MediaType, error) { return types.OCIImageIndex, nil }

// readAnswer is what ask read of a response.
type readAnswer struct {
	status      int
	contentType string
	body        []byte
}

// ask makes one request of the push's session and reads the answer's body
// when it is limit bytes or fewer; the rest is not read.
func (p *push) ask(ctx context.Context, method, u string, header http.Header, limit int64, want ...int) (readAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return readAnswer{}, err
	}
	req.Header = header
	resp, err := p.http.Do(req)
	if err != nil {
		return readAnswer{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	if err := transport.CheckError(resp, want...); err != nil {
		return readAnswer{}, err
	}
	out := readAnswer{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type")}
	// Over limit: no body (the caller says what that means).
	if limit > 0 && resp.StatusCode == http.StatusOK && resp.ContentLength <= limit {
		body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
		if err != nil {
			return readAnswer{}, err
		}
		if int64(len(body)) <= limit {
			out.body = body
		}
	}
	return out, nil
}
