package cosign

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Verifier tells which of some keys have signed one payload in the
// signature images it is shown. A signature image is the registry's, so
// possibly a tenant's: every layer holding the payload can carry a
// well-formed signature by some other key, each costing a full ECDSA
// verification (~2 ms on P-521) to refuse. So a Verifier verifies only
// layers holding the payload (no other can match), a given signature at
// most once per key however many images it is shown (the same tag read
// again after a lost write), a layer against no more keys once one
// matched, nothing more once every key matched, and checks ctx before
// each verification. Its cost is thus at most the distinct signatures of
// the payload it was shown × the keys: the caller bounds the first by
// bounding the layers it reads. Not for concurrent use.
type Verifier struct {
	payload []byte
	digest  v1.Hash // the payload's: only layers holding it can match
	keys    []*Key
	// verdicts are the signatures verified, by key: whether they match.
	verdicts map[verdict]bool
}

type verdict struct {
	signature string
	key       string // its ID: a key in two Secrets is one key
}

// MaxVerifications bounds the signatures a Verifier verifies, over all it
// is shown: with the layers bounded too, a signature image a registry
// fills with other keys' signatures costs at most this many ECDSA
// verifications (~0.5 s on P-521). A key whose signature is not found
// within it counts as not signed: signing again adds a duplicate, which
// is harmless.
const MaxVerifications = 256

// NewVerifier returns a Verifier of keys' signatures of payload.
func NewVerifier(payload []byte, keys []*Key) *Verifier {
	sum := sha256.Sum256(payload)
	return &Verifier{payload: payload, digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])},
		keys: keys, verdicts: map[verdict]bool{}}
}

// Signed returns, in the keys' order, whether the signature image
// manifest (nil: none yet) holds each key's signature of the payload:
// signing again would only add a duplicate. It fails only with ctx's
// error, once ctx has ended. The verifications run in one of the
// process's CPU turns (shared with key decryptions), waited for on ctx.
func (v *Verifier) Signed(ctx context.Context, manifest *v1.Manifest) ([]bool, error) {
	if manifest == nil {
		return make([]bool, len(v.keys)), nil
	}
	return inTurn(ctx, func() ([]bool, error) { return v.signed(ctx, manifest) })
}

// signed is Signed, in a CPU turn.
func (v *Verifier) signed(ctx context.Context, manifest *v1.Manifest) ([]bool, error) {
	signed := make([]bool, len(v.keys))
	left := len(v.keys)
	for _, l := range manifest.Layers {
		if left == 0 {
			break
		}
		if l.Digest != v.digest {
			continue
		}
		signature := l.Annotations[SignatureAnnotation]
		for i, k := range v.keys {
			if signed[i] {
				continue
			}
			match, known := v.verdicts[verdict{signature, k.ID}]
			if !known {
				if len(v.verdicts) >= MaxVerifications {
					return signed, nil
				}
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				match = k.Verifies(v.payload, signature)
				v.verdicts[verdict{signature, k.ID}] = match
			}
			if match { // a signature is one key's, in however many Secrets
				for j, other := range v.keys {
					if !signed[j] && other.ID == k.ID {
						signed[j] = true
						left--
					}
				}
				break
			}
		}
	}
	return signed, nil
}

// Signature is one signature to add to a signature image.
type Signature struct {
	Payload   []byte
	Signature string // base64
}

// SignatureImage returns the signature image: the layers of existing (the
// image at the signature tag, nil for none), then one layer per new
// signature, as cosign appends a second signer's. dockerMediaTypes makes
// a Docker v2 manifest for registries that refuse OCI ones (kpack's
// kpack.io/cosign.docker-media-types).
//
// The image is made in one pass, its manifest and config encoded once,
// byte for byte what mutate.Append makes. mutate.Append is not used on
// existing: its image encodes the whole config again for every layer it
// is asked for (Layers looks each up by digest, comparing with the
// config's digest), so pushing a signature image of n layers encodes its
// config n times — minutes of CPU for a tenant's image of 10,000 layers
// and a 740 KB config.
func SignatureImage(existing v1.Image, signatures []Signature, dockerMediaTypes bool) (v1.Image, error) {
	base := existing
	if base == nil {
		base = emptySignatureImage(dockerMediaTypes)
	}
	img, err := read(base)
	if err != nil {
		return nil, err
	}
	imageConfig := img.manifest.Config.MediaType == types.DockerConfigJSON || img.manifest.Config.MediaType == types.OCIConfigJSON
	for _, s := range signatures {
		l := static.NewLayer(s.Payload, PayloadMediaType)
		digest, err := l.Digest() // and its DiffID: it is not compressed
		if err != nil {
			return nil, err
		}
		if imageConfig {
			img.config.RootFS.DiffIDs = append(img.config.RootFS.DiffIDs, digest)
			img.config.History = append(img.config.History, v1.History{})
		}
		img.manifest.Layers = append(img.manifest.Layers, v1.Descriptor{MediaType: PayloadMediaType, Size: int64(len(s.Payload)),
			Digest: digest, Annotations: map[string]string{SignatureAnnotation: s.Signature}})
		img.layers = append(img.layers, l)
	}
	if imageConfig { // other configs (an artifact's) are kept as they are, as mutate does
		if img.rawConfig, err = json.Marshal(img.config); err != nil {
			return nil, err
		}
		img.manifest.Config.Digest, img.manifest.Config.Size, err = v1.SHA256(bytes.NewReader(img.rawConfig))
		if err != nil {
			return nil, err
		}
		if img.manifest.Config.Data != nil {
			img.manifest.Config.Data = img.rawConfig
		}
	}
	if img.rawManifest, err = json.Marshal(img.manifest); err != nil {
		return nil, err
	}
	return img, nil
}

// emptySignatureImage is the image a first signature is added to.
func emptySignatureImage(dockerMediaTypes bool) v1.Image {
	if dockerMediaTypes {
		return mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.DockerManifestSchema2), types.DockerConfigJSON)
	}
	return mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
}

// signatureImage is a signature image whose manifest and config are
// encoded already. Its layers are base's as base gave them (lazy remote
// layers a push mounts or skips), then the new ones.
type signatureImage struct {
	mediaType   types.MediaType
	manifest    *v1.Manifest
	rawManifest []byte
	config      *v1.ConfigFile
	rawConfig   []byte
	layers      []v1.Layer
}

var _ v1.Image = (*signatureImage)(nil)

// read takes from base, once each, what SignatureImage extends: ggcr's
// images return a manifest and a config of the caller's own.
func read(base v1.Image) (*signatureImage, error) {
	var img signatureImage
	var err error
	if img.mediaType, err = base.MediaType(); err != nil {
		return nil, err
	}
	if img.manifest, err = base.Manifest(); err != nil {
		return nil, err
	}
	if img.rawConfig, err = base.RawConfigFile(); err != nil {
		return nil, err
	}
	if img.config, err = base.ConfigFile(); err != nil {
		return nil, err
	}
	if img.layers, err = base.Layers(); err != nil {
		return nil, err
	}
	if len(img.layers) != len(img.manifest.Layers) {
		return nil, fmt.Errorf("signature image: %d layers for the %d of its manifest", len(img.layers), len(img.manifest.Layers))
	}
	return &img, nil
}

func (i *signatureImage) MediaType() (types.MediaType, error) { return i.mediaType, nil }
func (i *signatureImage) RawManifest() ([]byte, error)        { return i.rawManifest, nil }
func (i *signatureImage) Manifest() (*v1.Manifest, error)     { return i.manifest.DeepCopy(), nil }
func (i *signatureImage) RawConfigFile() ([]byte, error)      { return i.rawConfig, nil }
func (i *signatureImage) ConfigFile() (*v1.ConfigFile, error) { return i.config.DeepCopy(), nil }
func (i *signatureImage) ConfigName() (v1.Hash, error)        { return i.manifest.Config.Digest, nil }
func (i *signatureImage) Size() (int64, error)                { return int64(len(i.rawManifest)), nil }
func (i *signatureImage) Digest() (v1.Hash, error)            { return partial.Digest(i) }
func (i *signatureImage) Layers() ([]v1.Layer, error) {
	return append([]v1.Layer(nil), i.layers...), nil
}

func (i *signatureImage) LayerByDigest(h v1.Hash) (v1.Layer, error) {
	if h == i.manifest.Config.Digest {
		return partial.ConfigLayer(i)
	}
	for n, desc := range i.manifest.Layers {
		if desc.Digest == h {
			return i.layers[n], nil
		}
	}
	return nil, fmt.Errorf("signature image has no layer %s", h)
}

func (i *signatureImage) LayerByDiffID(h v1.Hash) (v1.Layer, error) {
	for n, diffID := range i.config.RootFS.DiffIDs {
		if diffID == h && n < len(i.layers) {
			return i.layers[n], nil
		}
	}
	return nil, fmt.Errorf("signature image has no layer with diffID %s", h)
}
