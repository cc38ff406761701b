package v1alpha1

// Signature formats (Signing.Format).
const (
	// SignatureFormatSig: a signature image at the tag sha256-<hex>.sig,
	// which kpack, cosign v2 and cosign v3 read.
	SignatureFormatSig = "sig"
	// SignatureFormatBundle: a Sigstore bundle attached as an OCI
	// referrer, as cosign v3 signs.
	SignatureFormatBundle = "bundle"
	// SignatureFormatBoth: both.
	SignatureFormatBoth = "both"
)

// Signing is how a builder's images are signed.
type Signing struct {
	// Format is where each signature goes: sig (the default), a layer of
	// the signature image at the tag sha256-<hex>.sig in the image's
	// repository or the one the key's Secret names (kpack's
	// kpack.io/cosign.repository); bundle, a Sigstore bundle of a DSSE
	// envelope attached to the image as an OCI referrer in the image's
	// own repository (cosign v3's format: no tag read and written again,
	// no other signer's signature to keep); both.
	// +optional
	// +kubebuilder:validation:Enum=sig;bundle;both
	Format string `json:"format,omitempty"`
}
