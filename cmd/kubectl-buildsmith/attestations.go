package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/attest"
	"github.com/buildsmith/buildsmith/pkg/cosign"
)

// maxAttestationBytes bounds what is read of an attestation's layer: the
// registry's answer.
const maxAttestationBytes = 16 << 20

// newAttestationCommand prints the attestation of predicateType of a
// builder (the sbom and provenance commands).
func newAttestationCommand(streams genericiooptions.IOStreams, use, what, predicateType string) *cobra.Command {
	connection := newConnectionFlags()
	cmd := &cobra.Command{
		Use:   use + " (builder|clusterbuilder)/NAME",
		Short: "Print a builder's " + what + ", as attached to its image",
		Long: `Prints the ` + what + ` the controller attached to the builder's image
(status.attestations; the controller's --builder-attestations must be signed
or all): read from the registry with your Docker credentials, as JSON. It is
not verified here: verify it with cosign verify-attestation --key.`,
		Example:           "  kubectl buildsmith " + use + " -n apps builder/go | jq .",
		ValidArgsFunction: completeObjects(connection),
		RunE: func(_ *cobra.Command, args []string) error {
			k, name, ok := objectArg(args)
			if !ok || (k.name != "builder" && k.name != "clusterbuilder") {
				return usageError("give one builder/NAME or clusterbuilder/NAME")
			}
			c, namespace, err := connection.client()
			if err != nil {
				return err
			}
			u, err := k.client(c, namespace).Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			var b struct {
				Status v1alpha1.BuilderStatus `json:"status"`
			}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &b); err != nil {
				return err
			}
			for _, a := range b.Status.Attestations {
				if a.PredicateType == predicateType && a.Image == b.Status.LatestImage {
					return printAttestation(streams.Out, a)
				}
			}
			return fmt.Errorf("%s/%s has no %s attached to %s (status.attestations)", k.name, name, what, orDash(b.Status.LatestImage))
		},
	}
	connection.AddFlags(cmd.Flags())
	registerNamespaceCompletion(cmd, connection)
	return cmd
}

func firstSize(layers []v1.Descriptor) int64 {
	if len(layers) == 0 {
		return 0
	}
	return layers[0].Size
}

// printAttestation writes the document of a's referrer: the statement a
// bundle signs, or an unsigned SBOM as it is.
func printAttestation(w io.Writer, a v1alpha1.ImageAttestation) error {
	ref, err := name.NewDigest(a.Referrer)
	if err != nil {
		return fmt.Errorf("referrer %q: %w", a.Referrer, err)
	}
	image, err := name.NewDigest(a.Image)
	if err != nil {
		return fmt.Errorf("image %q: %w", a.Image, err)
	}
	img, err := remote.Image(ref, remote.WithAuthFromKeychain(authn.DefaultKeychain))
	if err != nil {
		return err
	}
	// What status names is checked against what the registry holds: a
	// referrer of this image, of one layer of a bounded size.
	m, err := img.Manifest()
	if err != nil {
		return err
	}
	if ref.Context().Name() != image.Context().Name() || m.Subject == nil || m.Subject.Digest.String() != image.DigestStr() {
		return fmt.Errorf("%s is not a referrer of %s", a.Referrer, a.Image)
	}
	if len(m.Layers) != 1 || m.Layers[0].Size > maxAttestationBytes {
		return fmt.Errorf("%s has %d layers (of %d bytes first), not one of at most %d", a.Referrer, len(m.Layers), firstSize(m.Layers), maxAttestationBytes)
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	raw, err := io.ReadAll(io.LimitReader(rc, maxAttestationBytes+1))
	if err != nil {
		return err
	}
	if len(raw) > maxAttestationBytes {
		return fmt.Errorf("%s is larger than %d bytes", a.Referrer, maxAttestationBytes)
	}
	mediaType, err := layers[0].MediaType()
	if err != nil {
		return err
	}
	if string(mediaType) == attest.SPDXMediaType {
		_, err = fmt.Fprintf(w, "%s\n", raw)
		return err
	}
	var bundle struct {
		DSSEEnvelope struct {
			Payload     string `json:"payload"`
			PayloadType string `json:"payloadType"`
		} `json:"dsseEnvelope"`
	}
	if err := json.Unmarshal(raw, &bundle); err != nil || bundle.DSSEEnvelope.PayloadType != cosign.InTotoPayloadType {
		return fmt.Errorf("%s: not a Sigstore bundle of an in-toto statement", a.Referrer)
	}
	statement, err := base64.StdEncoding.DecodeString(bundle.DSSEEnvelope.Payload)
	if err != nil {
		return fmt.Errorf("%s: %w", a.Referrer, err)
	}
	_, err = fmt.Fprintf(w, "%s\n", statement)
	return err
}
