package builder

import (
	"context"
	"slices"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/attest"
)

// signatureFormats are the formats a builder's signatures are made in
// (spec.signing.format).
type signatureFormats struct {
	sig    bool // the .sig tag, as kpack signs
	bundle bool // a Sigstore bundle referrer, as cosign v3 signs
}

func formatsOf(signing *v1alpha1.Signing) signatureFormats {
	format := v1alpha1.SignatureFormatSig
	if signing != nil && signing.Format != "" {
		format = signing.Format
	}
	return signatureFormats{sig: format != v1alpha1.SignatureFormatBundle, bundle: format != v1alpha1.SignatureFormatSig}
}

// signatures makes sure each image of the builder carries a signature by
// each key in each format its spec asks for, and returns them as
// status.signatures records them: the .sig tag's, then the bundles.
func signatures(ctx context.Context, in *inputs, next *v1alpha1.BuilderStatus, recorded []v1alpha1.ImageSignature) ([]v1alpha1.ImageSignature, error) {
	var out []v1alpha1.ImageSignature
	if in.signing.sig {
		var err error
		if out, err = sign(ctx, in.registry, in.keys, next, recorded); err != nil {
			return nil, err
		}
	}
	if in.signing.bundle {
		bundles, err := signBundles(ctx, in, next, recorded)
		if err != nil {
			return nil, err
		}
		out = append(out, bundles...)
	}
	return out, nil
}

// signBundles attaches to each image of the builder a Sigstore bundle
// signed by each key, as `cosign sign` v3 does: a referrer in the image's
// repository, pushed by digest, so there is no tag to read, merge and
// check again as with .sig (another signer's bundle is a referrer of its
// own). Signing is deterministic, so signing again makes the same
// referrer. One recorded for the same image and key is trusted without a
// request, unless this reconcile pushed the image (a repository recreated
// may have lost it); the others cost, per image, a referrer per key and
// one listing of them all (registry.WriteReferrers).
func signBundles(ctx context.Context, in *inputs, next *v1alpha1.BuilderStatus, recorded []v1alpha1.ImageSignature) ([]v1alpha1.ImageSignature, error) {
	if len(in.keys) == 0 {
		return nil, nil
	}
	if len(in.pushed) > 0 {
		recorded = nil
	}
	images, err := signedImages(next)
	if err != nil {
		return nil, err
	}
	var out []v1alpha1.ImageSignature
	for _, image := range images {
		signatures := make([]v1alpha1.ImageSignature, len(in.keys))
		var missing []int // the keys', by index
		for i, k := range in.keys {
			j := slices.IndexFunc(recorded, func(s v1alpha1.ImageSignature) bool {
				return s.Format == v1alpha1.SignatureFormatBundle && s.Image == image.String() && s.SigningSecret == k.secret && s.KeyID == k.key.ID
			})
			if j >= 0 {
				signatures[i] = recorded[j]
				continue
			}
			missing = append(missing, i)
		}
		if len(missing) > 0 {
			if err := attachBundles(ctx, in, image, missing, signatures); err != nil {
				return nil, err
			}
		}
		out = append(out, signatures...)
	}
	return out, nil
}

// attachBundles signs image with the keys of in.keys at missing, and
// records each into signatures at its key's index. A key in two Secrets
// makes one bundle.
func attachBundles(ctx context.Context, in *inputs, digest name.Digest, missing []int, signatures []v1alpha1.ImageSignature) error {
	image := digest.String()
	statement, err := attest.SignStatement(image)
	if err != nil {
		return err
	}
	subject, err := subjectOf(ctx, in, digest)
	if err != nil {
		return err
	}
	var referrers []v1.Image
	byKey := map[string]int{} // key ID → its referrer's index
	for _, i := range missing {
		k := in.keys[i]
		if _, ok := byKey[k.key.ID]; ok {
			continue
		}
		referrer, err := bundleReferrer(subject, k.key, attest.SignPredicateType, statement)
		if err != nil {
			return err
		}
		byKey[k.key.ID] = len(referrers)
		referrers = append(referrers, referrer)
	}
	refs, listed, err := in.registry.WriteReferrers(ctx, digest, referrers...)
	if err != nil {
		return err
	}
	for _, i := range missing {
		k := in.keys[i]
		signatures[i] = v1alpha1.ImageSignature{Image: image, SigningSecret: k.secret, KeyID: k.key.ID,
			Signature: refs[byKey[k.key.ID]].String(), Format: v1alpha1.SignatureFormatBundle, ListedBy: listed}
	}
	return nil
}
