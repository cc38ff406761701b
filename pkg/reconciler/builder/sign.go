package builder

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"

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
	// maxSignatureLayers bounds the signature images it signs into
	// (SigningLimits.MaxSignatureLayers, set by signingKeys.of); 0: the
	// default.
	maxSignatureLayers int
}

// parseSigningSecret reads the signing key of secret and where its
// signatures go.
func parseSigningSecret(ctx context.Context, secret *corev1.Secret, limits cosign.Limits) (signingKey, error) {
	source := "secret " + secret.Namespace + "/" + secret.Name
	key, err := cosign.ParseKey(ctx, source, secret.Data[cosign.SecretKey], secret.Data[cosign.SecretPassword], limits)
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
// them, by image and then in the keys' order. A signature recorded in
// status for the same image, key and signature tag is trusted without a
// request; the others are added with one read and one write of each
// signature tag, and a signature already there (the status write after a
// push failed, say) is kept rather than added again.
func sign(ctx context.Context, reg registry.Access, keys []signingKey, status *v1alpha1.BuilderStatus, recorded []v1alpha1.ImageSignature) ([]v1alpha1.ImageSignature, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	digests, err := signedImages(status)
	if err != nil {
		return nil, err
	}
	var out []v1alpha1.ImageSignature
	for _, digest := range digests {
		image := digest.String()
		signatures := make([]v1alpha1.ImageSignature, len(keys))
		missing := map[signatureTag][]int{} // by where they go: the keys' indexes
		var tags []signatureTag
		for i, k := range keys {
			where := k.tagFor(digest)
			if s, ok := findSignature(recorded, image, k, where.tag); ok {
				signatures[i] = s
				continue
			}
			if missing[where] == nil {
				tags = append(tags, where)
			}
			missing[where] = append(missing[where], i)
		}
		for _, where := range tags {
			var signers []signingKey
			for _, i := range missing[where] {
				signers = append(signers, keys[i])
			}
			signature, err := signImage(ctx, reg, digest, where, signers)
			if err != nil {
				return nil, err
			}
			for _, i := range missing[where] {
				signatures[i] = v1alpha1.ImageSignature{Image: image, SigningSecret: keys[i].secret, KeyID: keys[i].key.ID, Signature: signature}
			}
		}
		out = append(out, signatures...)
	}
	return out, nil
}

// signedImages are the images a builder's signatures are of: the tag's,
// and each platform's of an index; then the same in each other repository
// of its additional tags.
func signedImages(status *v1alpha1.BuilderStatus) ([]name.Digest, error) {
	images := []string{status.LatestImage}
	if len(status.Platforms) > 1 {
		for _, p := range status.Platforms {
			images = append(images, p.Image)
		}
	}
	digests := make([]name.Digest, len(images))
	for i, image := range images {
		var err error
		if digests[i], err = name.NewDigest(image); err != nil {
			return nil, fmt.Errorf("signing %q: %w", image, err)
		}
	}
	return copiesOf(digests, otherRepositories(digests[0].Context(), status.AdditionalTags)), nil
}

// status.signatures holds one entry per image, key and format: with a tenant
// choosing both the platforms (an index and each of its images) and the
// keys (up to --max-service-account-secrets), it is bounded, as a store's
// buildpacks are, so that the builder never becomes an object the API
// server refuses (about 1.5 MiB) forever.
const (
	// MaxSignatures is the most entries status.signatures holds: 16
	// platforms and 15 keys, or one image and 256 keys.
	MaxSignatures = 256
	// MaxSignaturesBytes bounds their encoded size, whatever their
	// number (an entry is about 400 bytes, up to about 1.2 KiB with the
	// longest names).
	MaxSignaturesBytes = 256 << 10
)

// maxSignatures is MaxSignatures; a variable so that a test reaches it
// with a few keys (each costs a decryption).
var maxSignatures = MaxSignatures

// ReasonTooManySignatures: the builder's images and signing keys would make
// more signatures than its status holds.
const ReasonTooManySignatures = "TooManySignatures"

// ReasonNoSigningKeys: spec.signing asks for signatures, and the builder's
// ServiceAccount holds no cosign key to make them with.
const ReasonNoSigningKeys = "NoSigningKeys"

// noSigningKeys is the error of a builder whose spec.signing asks for
// signatures it has no key for: refused before the push rather than pushed
// unsigned, which is what spec.signing says the team does not want. A
// Secret added to the ServiceAccount wakes the builder (both are tracked).
func noSigningKeys(account *v1alpha1.ServiceAccountRef) error {
	if account == nil {
		return failure.Permanentf(ReasonNoSigningKeys,
			"spec.signing asks for signed images, and the builder names no ServiceAccount (spec.serviceAccountRef) whose Secrets hold cosign keys: name one, or remove spec.signing to push unsigned")
	}
	return failure.Permanentf(ReasonNoSigningKeys,
		"spec.signing asks for signed images, and ServiceAccount %s/%s lists no Secret holding a cosign key (%s): add one (cosign generate-key-pair k8s://%s/NAME), or remove spec.signing to push unsigned",
		account.Namespace, account.Name, cosign.SecretKey, account.Namespace)
}

// checkSigning sets the formats in's signatures are made in and refuses,
// before any push, a builder that asks for signatures without a key, or
// whose signatures its status could not hold (checkSignatures, over its
// images in every repository it is published to): refused whole, not
// pushed unsigned.
func (in *inputs) checkSigning(spec *v1alpha1.BuilderSpec, account *v1alpha1.ServiceAccountRef) error {
	in.signing = formatsOf(spec.Signing)
	if spec.Signing != nil && len(in.keys) == 0 {
		return noSigningKeys(account)
	}
	planned := copiesOf(plannedImages(in.tag, len(in.builds)), otherRepositories(in.tag.Context(), spec.AdditionalTags))
	return checkSignatures(planned, in.keys, in.signing)
}

// plannedImages are the images a builder of builds platforms pushed to tag
// is signed as (see sign): the tag's, and each platform's of an index. Their
// digests are not known before the push, but their length is.
func plannedImages(tag name.Tag, builds int) []name.Digest {
	n := 1
	if builds > 1 {
		n += builds
	}
	image := tag.Context().Digest("sha256:" + strings.Repeat("0", 64))
	return slices.Repeat([]name.Digest{image}, n)
}

// checkSignatures refuses, before the builder is pushed, keys
// that would give the images more status.signatures entries than
// MaxSignatures, or more bytes than MaxSignaturesBytes (each entry measured
// as it would be written: the digest pushed is as long as any other), or
// more signatures in one signature image than it may have layers.
func checkSignatures(images []name.Digest, keys []signingKey, formats signatureFormats) error {
	for _, k := range keys {
		if formats.bundle && k.docker {
			return failure.Permanentf(cosign.ReasonInvalidSigningKey,
				"secret %s asks for Docker media types (annotation %s), and spec.signing.format %s asks for a Sigstore bundle, an OCI 1.1 artifact: sign with format sig, or remove the annotation",
				k.secret, AnnotationDockerMediaTypes, formatName(formats))
		}
	}
	if formats.sig {
		if err := checkSignatureTags(images, keys); err != nil {
			return err
		}
	}
	var entries []v1alpha1.ImageSignature
	for _, image := range images {
		for _, k := range keys {
			if formats.sig {
				entries = append(entries, v1alpha1.ImageSignature{Image: image.String(), SigningSecret: k.secret, KeyID: k.key.ID,
					Signature: k.tagFor(image).tag.String() + "@" + image.DigestStr()})
			}
			if formats.bundle {
				entries = append(entries, v1alpha1.ImageSignature{Image: image.String(), SigningSecret: k.secret, KeyID: k.key.ID,
					Signature: image.String(), Format: v1alpha1.SignatureFormatBundle, ListedBy: registry.ListedByAPI})
			}
		}
	}
	product := fmt.Sprintf("images × signing keys make %d × %d", len(images), len(keys))
	if formats.sig && formats.bundle {
		product = fmt.Sprintf("images × signing keys × formats make %d × %d × 2", len(images), len(keys))
	}
	if n := len(entries); n > maxSignatures {
		return failure.Permanentf(ReasonTooManySignatures,
			"the builder's %s = %d signatures, more than the %d status.signatures holds: sign with fewer keys (the ServiceAccount's secrets holding cosign.key) or build fewer platforms",
			product, n, maxSignatures)
	}
	size := 2 // the list's brackets
	for _, entry := range entries {
		raw, _ := json.Marshal(entry) // plain strings: cannot fail
		size += len(raw) + 1          // and a comma
	}
	if size > MaxSignaturesBytes {
		return failure.Permanentf(ReasonTooManySignatures,
			"the builder's %s = %d signatures taking %d KiB, more than the %d KiB status.signatures holds: sign with fewer keys (the ServiceAccount's secrets holding cosign.key) or build fewer platforms",
			product, len(entries), size>>10, MaxSignaturesBytes>>10)
	}
	return nil
}

// checkSignatureTags refuses, before the builder is pushed, more
// signatures in one signature tag than a signature image may have layers:
// they could never be written. A tag holds a layer per key and repository
// the image is in (each copy's payload names its repository): a key
// sending its signatures elsewhere (AnnotationSignatureRepository) signs
// every copy into one tag. images are as plannedImages gives them: the
// same digest for all, so the images of one repository share their tags,
// as an image and its own copies do.
func checkSignatureTags(images []name.Digest, keys []signingKey) error {
	byTag := map[name.Tag]map[string]bool{} // the keys and repositories signing there
	limit := signatureLayersBound(keys)
	for _, image := range images {
		for _, k := range keys {
			tag := k.tagFor(image).tag
			if byTag[tag] == nil {
				byTag[tag] = map[string]bool{}
			}
			if byTag[tag][k.key.ID+" "+repositoryKey(image.Context())] = true; len(byTag[tag]) > limit {
				return failure.Permanentf(ReasonTooManySignatures,
					"more than %d signatures (one per signing key and repository the builder is published to) go into the signature tags of %s, the most layers a signature image may have (--max-signature-layers): sign with fewer keys, publish to fewer repositories, or send some keys' signatures elsewhere (annotation %s)",
					limit, tag.Context(), AnnotationSignatureRepository)
			}
		}
	}
	return nil
}

// signatureTag is where a key's signatures of an image go, and in what
// manifest type a new signature image is made.
type signatureTag struct {
	tag    name.Tag
	docker bool
}

func (k signingKey) tagFor(image name.Digest) signatureTag {
	repo := image.Context()
	if k.repository != nil {
		repo = *k.repository
	}
	return signatureTag{tag: cosign.SignatureTag(repo, image), docker: k.docker}
}

// findSignature finds the signature of image by k at tag among those
// recorded: a key moved to another Secret, replaced, or sending its
// signatures elsewhere now signs again.
func findSignature(recorded []v1alpha1.ImageSignature, image string, k signingKey, tag name.Tag) (v1alpha1.ImageSignature, bool) {
	for _, s := range recorded {
		if s.Format == "" && s.Image == image && s.SigningSecret == k.secret && s.KeyID == k.key.ID && strings.HasPrefix(s.Signature, tag.String()+"@") {
			return s, true
		}
	}
	return v1alpha1.ImageSignature{}, false
}

// writeAttempts bounds how often a signature tag that another writer
// replaced meanwhile is read and written again within one reconcile.
const writeAttempts = 3

// signImage adds the signers' signatures of image to the signature image
// at where (those not there already) and returns it as tag@digest. The
// tag is read, extended and written, then checked: another writer (a
// builder of the same image, a shared signature repository) may have
// replaced it in between, and its signatures and ours must both stay.
//
// The signature image is the registry's, so possibly a tenant's: one of
// more layers than the bound is refused before any is verified or added
// to, and each of its signatures is verified at most once per key over
// all attempts (cosign.Verifier).
func signImage(ctx context.Context, reg registry.Access, image name.Digest, where signatureTag, signers []signingKey) (string, error) {
	payload := cosign.Payload(image)
	keys := make([]*cosign.Key, len(signers))
	for i, k := range signers {
		keys[i] = k.key
	}
	verifier := cosign.NewVerifier(payload, keys)
	limit := signatureLayersBound(signers)
	for range writeAttempts {
		desc, existing, manifest, err := readSignatures(ctx, reg, where.tag, limit)
		if err != nil {
			return "", err
		}
		signed, err := verifier.Signed(ctx, manifest)
		if err != nil {
			return "", fmt.Errorf("checking the signatures at %s: %w", where.tag, err)
		}
		add, err := newSignatures(signers, signed, payload)
		if err != nil {
			return "", err
		}
		if len(add) == 0 {
			return where.tag.String() + "@" + desc.Ref.DigestStr(), nil
		}
		if n := layersOf(manifest); n+len(add) > limit {
			return "", failure.Waitingf(ReasonSignatureImageTooLarge,
				"the signature image at %s has %d layers, and the builder's %d new signature(s) would take it past the %d a signature image may have (--max-signature-layers); delete the tag or send the signatures elsewhere (annotation %s)",
				where.tag, n, len(add), limit, AnnotationSignatureRepository)
		}
		img, err := cosign.SignatureImage(existing, add, where.docker)
		if err != nil {
			return "", err
		}
		pushed, err := reg.Write(ctx, where.tag, img)
		if err != nil {
			return "", err
		}
		now, found, err := reg.Lookup(ctx, where.tag)
		if err != nil {
			return "", err
		}
		if found && now.Ref.DigestStr() == pushed.DigestStr() {
			return where.tag.String() + "@" + pushed.DigestStr(), nil
		}
	}
	return "", failure.Transientf(ReasonSignatureConflict, "the signature tag %s changed %d times while it was written; trying again", where.tag, writeAttempts)
}

// readSignatures reads the signature image at tag, if there is one,
// refusing one of more than limit layers before anything looks at them.
// Its manifest and config are bounded by the registry client already.
func readSignatures(ctx context.Context, reg registry.Access, tag name.Tag, limit int) (
	desc registry.Descriptor, existing v1.Image, manifest *v1.Manifest, err error) {
	desc, found, err := reg.Lookup(ctx, tag)
	if err != nil || !found {
		return desc, nil, nil, err
	}
	read, err := reg.ReadImage(ctx, desc.Ref, nil)
	if err != nil {
		return desc, nil, nil, err
	}
	if n := len(read.Manifest.Layers); n > limit {
		return desc, nil, nil, failure.Waitingf(ReasonSignatureImageTooLarge,
			"the signature image at %s has %d layers, more than the %d a signature image may have (--max-signature-layers): it holds one layer per signature of one image; delete the tag or send the signatures elsewhere (annotation %s)",
			tag, n, limit, AnnotationSignatureRepository)
	}
	// Its layers are copied into the image written back: each must be a
	// signature's payload (a few hundred bytes), not bytes of any size.
	for _, l := range read.Manifest.Layers {
		if l.Size > maxSignatureLayerSize {
			return desc, nil, nil, failure.Waitingf(ReasonSignatureImageTooLarge,
				"the signature image at %s has a layer of %d bytes, more than the %d a signature's payload may take; delete the tag or send the signatures elsewhere (annotation %s)",
				tag, l.Size, maxSignatureLayerSize, AnnotationSignatureRepository)
		}
	}
	return desc, read.Image, read.Manifest, nil
}

// maxSignatureLayerSize bounds each layer of a signature image: a
// signature's payload (cosign's simple signing JSON) is a few hundred bytes.
const maxSignatureLayerSize = 64 << 10

// newSignatures signs payload with each signer not signed yet, once per
// key (a key in two Secrets signs once).
func newSignatures(signers []signingKey, signed []bool, payload []byte) ([]cosign.Signature, error) {
	var add []cosign.Signature
	done := map[string]bool{}
	for i, k := range signers {
		if signed[i] || done[k.key.ID] {
			continue
		}
		signature, err := k.key.Sign(payload)
		if err != nil {
			return nil, err
		}
		done[k.key.ID] = true
		add = append(add, cosign.Signature{Payload: payload, Signature: signature})
	}
	return add, nil
}

func layersOf(m *v1.Manifest) int {
	if m == nil {
		return 0
	}
	return len(m.Layers)
}

// signatureLayersBound is the bound of the signature images signers sign
// into: the same for all the keys of one controller.
func signatureLayersBound(signers []signingKey) int {
	bound := 0
	for _, k := range signers {
		if k.maxSignatureLayers > 0 && (bound == 0 || k.maxSignatureLayers < bound) {
			bound = k.maxSignatureLayers
		}
	}
	if bound == 0 {
		return DefaultMaxSignatureLayers
	}
	return bound
}

// ReasonSignatureImageTooLarge: the signature image at a .sig tag has, or
// would have with the builder's signatures, more layers than
// --max-signature-layers. Waiting: the registry's tag (or the flag) must
// change, not the builder; polled, each look costing a HEAD.
const ReasonSignatureImageTooLarge = "SignatureImageTooLarge"

// ReasonSignatureConflict: other writers kept replacing a signature tag.
const ReasonSignatureConflict = "SignatureConflict"

// signatureFormats are the formats a builder's signatures are made in
// (spec.signing.format).
type signatureFormats struct {
	sig    bool // the .sig tag, as kpack signs
	bundle bool // a Sigstore bundle referrer, as cosign v3 signs
}

// formatName is the spec.signing.format that asks for formats.
func formatName(formats signatureFormats) string {
	switch {
	case formats.sig && formats.bundle:
		return v1alpha1.SignatureFormatBoth
	case formats.bundle:
		return v1alpha1.SignatureFormatBundle
	}
	return v1alpha1.SignatureFormatSig
}

func formatsOf(signing *v1alpha1.Signing) signatureFormats {
	format := v1alpha1.SignatureFormatSig
	if signing != nil && signing.Format != "" {
		format = signing.Format
	}
	return signatureFormats{sig: format != v1alpha1.SignatureFormatBundle, bundle: format != v1alpha1.SignatureFormatSig}
}
