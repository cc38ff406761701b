package attest

import (
	"encoding/json"
	"strings"
)

// The in-toto and SLSA names of a provenance statement.
const (
	StatementType           = "https://in-toto.io/Statement/v1"
	ProvenancePredicateType = "https://slsa.dev/provenance/v1"
	// SPDXPredicateType is the predicate type of an SBOM attestation, as
	// cosign's --type spdxjson writes it.
	SPDXPredicateType = "https://spdx.dev/Document"
	// SignPredicateType is what a signature says as cosign v3 signs in a
	// bundle: a statement of an empty predicate about the image signed.
	SignPredicateType = "https://sigstore.dev/cosign/sign/v1"
	// BuildType says how to read buildDefinition: a builder image
	// assembled by buildsmith from its object's resolved inputs.
	BuildType = "https://buildsmith.dev/builder/v1"
)

type statement struct {
	Type          string      `json:"_type"`
	Subject       []subject   `json:"subject"`
	PredicateType string      `json:"predicateType"`
	Predicate     interface{} `json:"predicate"`
}

type subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

type provenance struct {
	BuildDefinition buildDefinition `json:"buildDefinition"`
	RunDetails      runDetails      `json:"runDetails"`
}

type buildDefinition struct {
	BuildType            string               `json:"buildType"`
	ExternalParameters   externalParameters   `json:"externalParameters"`
	ResolvedDependencies []resourceDescriptor `json:"resolvedDependencies"`
}

type externalParameters struct {
	Builder builderObject `json:"builder"`
}

type builderObject struct {
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
	Generation int64  `json:"generation"`
}

type resourceDescriptor struct {
	Name        string            `json:"name"`
	URI         string            `json:"uri"`
	Digest      map[string]string `json:"digest"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type runDetails struct {
	Builder runBuilder `json:"builder"`
}

type runBuilder struct {
	ID      string            `json:"id"`
	Version map[string]string `json:"version,omitempty"`
}

// Provenance is an in-toto statement of SLSA v1 provenance whose subjects
// are the builder image and each platform's: built by the controller
// (runDetails.builder), for the builder object (externalParameters), from
// the build image, the run images, the lifecycle and each buildpack and
// extension by digest (resolvedDependencies).
func Provenance(b Builder) ([]byte, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	subjects := b.subjects()
	deps := []resourceDescriptor{imageDependency("build image", b.BuildImage, nil)}
	for _, run := range b.RunImages {
		deps = append(deps, imageDependency("run image", run, nil))
	}
	deps = append(deps, imageDependency("lifecycle", b.Lifecycle.Image, map[string]string{"version": b.Lifecycle.Version}))
	for _, m := range b.modules() {
		annotations := map[string]string{"id": m.ID, "version": m.Version, "layer": m.Layer, "diffID": m.DiffID}
		if m.System {
			annotations["system"] = "true"
		}
		deps = append(deps, imageDependency(m.kind, m.Source, annotations))
	}
	o := b.Object
	return json.Marshal(statement{
		Type: StatementType, Subject: subjects, PredicateType: ProvenancePredicateType,
		Predicate: provenance{
			BuildDefinition: buildDefinition{
				BuildType: BuildType,
				ExternalParameters: externalParameters{Builder: builderObject{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name,
					UID: o.UID, Generation: o.Generation}},
				ResolvedDependencies: deps,
			},
			RunDetails: runDetails{Builder: runBuilder{ID: b.Controller.ID, Version: map[string]string{"buildsmith": b.Controller.Version}}},
		},
	})
}

// SBOMStatement is an in-toto statement whose predicate is the builder's
// SBOM (SPDX), about the builder image and each platform's: what cosign
// attest --type spdxjson makes of an SBOM.
func SBOMStatement(b Builder) ([]byte, error) {
	sbom, err := SPDX(b)
	if err != nil {
		return nil, err
	}
	return json.Marshal(statement{Type: StatementType, Subject: b.subjects(), PredicateType: SPDXPredicateType, Predicate: json.RawMessage(sbom)})
}

// SignStatement is the statement a signature of image (repository@digest)
// signs, as cosign v3 makes it: about image, saying nothing more.
func SignStatement(image string) ([]byte, error) {
	if _, _, err := splitDigest(image); err != nil {
		return nil, err
	}
	return json.Marshal(statement{Type: StatementType, Subject: []subject{digestSubject(image)}, PredicateType: SignPredicateType,
		Predicate: struct{}{}})
}

// subjects are the builder image and each platform's, as a statement's
// subject.
func (b Builder) subjects() []subject {
	out := []subject{digestSubject(b.Image)}
	for _, p := range b.Platforms {
		if p.Image != b.Image {
			out = append(out, digestSubject(p.Image))
		}
	}
	return out
}

// digestSubject is an image as a statement's subject: its repository,
// and its digest.
func digestSubject(ref string) subject {
	repository, hex, _ := splitDigest(ref) // checked
	return subject{Name: repository, Digest: map[string]string{"sha256": hex}}
}

// imageDependency is an image (repository@digest) a builder was made from.
func imageDependency(name, ref string, annotations map[string]string) resourceDescriptor {
	repository, hex, _ := splitDigest(ref) // checked
	for k, v := range annotations {
		if v == "" {
			delete(annotations, k)
		}
	}
	return resourceDescriptor{Name: name, URI: "oci://" + strings.TrimPrefix(repository, "oci://") + "@sha256:" + hex,
		Digest: map[string]string{"sha256": hex}, Annotations: annotations}
}
