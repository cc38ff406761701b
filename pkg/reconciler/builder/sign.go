package builder

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cosign"
	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// The annotations of a signing Secret that kpack documents: signatures
// pushed to another repository, and Docker media types for registries that
// refuse OCI manifests.
const (
	AnnotationSignatureRepository = "kpack.io/cosign.repository"
	AnnotationDockerMediaTypes    = "kpack.io/cosign.docker-media-types"
)

// signingKey is a key of the builder's ServiceAccount and where its
// signatures go.
type signingKey struct {
	secret string // namespace/name
	key    *cosign.Key
	// repository overrides the image's own repository; nil: the image's.
	repository *name.Repository
	docker     bool
}

// signingKeys are the cosign keys of the Secrets: parsed once per Secret
// version (decrypting a cosign key costs scrypt's 32 MiB and ~0.1 s of CPU,
// too much for every resync of every builder). One entry per Secret in
// use, replaced when the Secret changes.
type signingKeys struct {
	mu     sync.Mutex
	parsed map[types.NamespacedName]parsedKey
}

type parsedKey struct {
	resourceVersion string
	key             signingKey
	err             error
}

// of returns the signing keys of secrets, in their order. A Secret that
// does not parse is a Permanent error naming it.
func (s *signingKeys) of(secrets []*corev1.Secret) ([]signingKey, error) {
	keys := make([]signingKey, 0, len(secrets))
	for _, secret := range secrets {
		id := types.NamespacedName{Namespace: secret.Namespace, Name: secret.Name}
		s.mu.Lock()
		p, ok := s.parsed[id]
		s.mu.Unlock()
		if !ok || p.resourceVersion != secret.ResourceVersion || secret.ResourceVersion == "" {
			p = parsedKey{resourceVersion: secret.ResourceVersion}
			p.key, p.err = parseSigningSecret(secret)
			s.mu.Lock()
			if s.parsed == nil {
				s.parsed = map[types.NamespacedName]parsedKey{}
			}
			s.parsed[id] = p
			s.mu.Unlock()
		}
		if p.err != nil {
			return nil, p.err
		}
		keys = append(keys, p.key)
	}
	return keys, nil
}

func parseSigningSecret(secret *corev1.Secret) (signingKey, error) {
	source := "secret " + secret.Namespace + "/" + secret.Name
	key, err := cosign.ParseKey(source, secret.Data[cosign.SecretKey], secret.Data[cosign.SecretPassword])
	if err != nil {
		return signingKey{}, err
	}
	out := signingKey{secret: secret.Namespace + "/" + secret.Name, key: key}
	if repo := secret.Annotations[AnnotationSignatureRepository]; repo != "" {
		r, err := name.NewRepository(repo)
		if err != nil {
			return signingKey{}, failure.Permanentf(cosign.ReasonInvalidSigningKey, "%s: annotation %s: %v", source, AnnotationSignatureRepository, err)
		}
		out.repository = &r
	}
	if v := secret.Annotations[AnnotationDockerMediaTypes]; v != "" {
		if out.docker, err = strconv.ParseBool(v); err != nil {
			return signingKey{}, failure.Permanentf(cosign.ReasonInvalidSigningKey, "%s: annotation %s: %q is not a boolean", source, AnnotationDockerMediaTypes, v)
		}
	}
	return out, nil
}

// sign makes sure each image of the builder (the tag's image and, for an
// index, each platform's) carries a signature by each key, and returns
// them. A signature recorded in status for the same image and key is
// trusted without a request; otherwise the image's signature tag is read
// first, and a signature already there (the status write after a push
// failed, say) is kept rather than added again.
func sign(ctx context.Context, reg registry.Access, keys []signingKey, status *v1alpha1.BuilderStatus, recorded []v1alpha1.ImageSignature) ([]v1alpha1.ImageSignature, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	images := []string{status.LatestImage}
	if len(status.Platforms) > 1 {
		for _, p := range status.Platforms {
			images = append(images, p.Image)
		}
	}
	var out []v1alpha1.ImageSignature
	for _, image := range images {
		digest, err := name.NewDigest(image)
		if err != nil {
			return nil, fmt.Errorf("signing %q: %w", image, err)
		}
		for _, k := range keys {
			if s, ok := findSignature(recorded, image, k); ok {
				out = append(out, s)
				continue
			}
			signature, err := signImage(ctx, reg, digest, k)
			if err != nil {
				return nil, err
			}
			out = append(out, v1alpha1.ImageSignature{Image: image, SigningSecret: k.secret, KeyID: k.key.ID, Signature: signature})
		}
	}
	return out, nil
}

func findSignature(recorded []v1alpha1.ImageSignature, image string, k signingKey) (v1alpha1.ImageSignature, bool) {
	for _, s := range recorded {
		if s.Image == image && s.SigningSecret == k.secret && s.KeyID == k.key.ID {
			return s, true
		}
	}
	return v1alpha1.ImageSignature{}, false
}

// signImage adds k's signature of image to its signature image, unless
// one is there already, and returns the signature image as tag@digest.
func signImage(ctx context.Context, reg registry.Access, image name.Digest, k signingKey) (string, error) {
	repo := image.Context()
	if k.repository != nil {
		repo = *k.repository
	}
	tag := cosign.SignatureTag(repo, image)
	payload := cosign.Payload(image)
	desc, found, err := reg.Lookup(ctx, tag)
	if err != nil {
		return "", err
	}
	var existing v1.Image // another signer's, or ours before a failed status write
	if found {
		read, err := reg.ReadImage(ctx, desc.Ref, nil)
		if err != nil {
			return "", err
		}
		if cosign.Signed(read.Manifest, payload, k.key) {
			return tag.String() + "@" + desc.Ref.DigestStr(), nil
		}
		existing = read.Image
	}
	signature, err := k.key.Sign(payload)
	if err != nil {
		return "", err
	}
	img, err := cosign.SignatureImage(existing, []cosign.Signature{{Payload: payload, Signature: signature}}, k.docker)
	if err != nil {
		return "", err
	}
	pushed, err := reg.Write(ctx, tag, img)
	if err != nil {
		return "", err
	}
	return tag.String() + "@" + pushed.DigestStr(), nil
}
