package attest

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// SPDXMediaType is the media type of an SPDX JSON document, as an OCI
// artifact's and an attestation's.
const SPDXMediaType = "application/spdx+json"

// noCreationTime is what an SBOM says it was made at when the builder image
// does not say (pack writes this time into builder images, for the same
// reason: a reproducible digest).
var noCreationTime = time.Date(1980, 1, 1, 0, 0, 1, 0, time.UTC)

type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	SPDXID                string            `json:"SPDXID"`
	Name                  string            `json:"name"`
	VersionInfo           string            `json:"versionInfo,omitempty"`
	DownloadLocation      string            `json:"downloadLocation"`
	FilesAnalyzed         bool              `json:"filesAnalyzed"`
	Homepage              string            `json:"homepage,omitempty"`
	SourceInfo            string            `json:"sourceInfo,omitempty"`
	LicenseConcluded      string            `json:"licenseConcluded"`
	LicenseDeclared       string            `json:"licenseDeclared"`
	CopyrightText         string            `json:"copyrightText"`
	PrimaryPackagePurpose string            `json:"primaryPackagePurpose,omitempty"`
	Checksums             []spdxChecksum    `json:"checksums,omitempty"`
	ExternalRefs          []spdxExternalRef `json:"externalRefs,omitempty"`
	Comment               string            `json:"comment,omitempty"`
}

type spdxChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxExternalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
	Comment string `json:"comment,omitempty"`
}

const noAssertion = "NOASSERTION"

// SPDX is the builder's SBOM, an SPDX 2.3 JSON document: the builder image
// (and each platform's), the build image it is made on, the run images it
// names, the lifecycle, and every buildpack and extension with the layer
// holding it, each by digest.
func SPDX(b Builder) ([]byte, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	repository, hex, _ := splitDigest(b.Image)
	created := b.Created
	if created.IsZero() {
		created = noCreationTime
	}
	doc := spdxDocument{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              b.Image,
		DocumentNamespace: fmt.Sprintf("https://buildsmith.dev/spdx/%s/sha256-%s", repository, hex),
		CreationInfo: spdxCreationInfo{Created: created.UTC().Format(time.RFC3339),
			Creators: []string{fmt.Sprintf("Tool: buildsmith-%s", b.Controller.Version)}},
	}
	doc.Packages = append(doc.Packages, imagePackage("SPDXRef-Builder", b.Image, "CONTAINER"))
	relate := func(element, kind, related, comment string) {
		doc.Relationships = append(doc.Relationships, spdxRelationship{Element: element, Type: kind, Related: related, Comment: comment})
	}
	relate("SPDXRef-DOCUMENT", "DESCRIBES", "SPDXRef-Builder", "")
	for i, p := range b.Platforms {
		if p.Image == b.Image {
			continue // one platform: the builder image itself
		}
		id := fmt.Sprintf("SPDXRef-Platform-%d", i)
		pkg := imagePackage(id, p.Image, "CONTAINER")
		pkg.Comment = "the builder image for " + p.Platform
		doc.Packages = append(doc.Packages, pkg)
		relate("SPDXRef-Builder", "CONTAINS", id, "")
	}
	doc.Packages = append(doc.Packages, b.stackPackage("SPDXRef-BuildImage", b.BuildImage))
	relate("SPDXRef-Builder", "DESCENDANT_OF", "SPDXRef-BuildImage", "the stack's build image, the builder's base")
	for i, run := range b.RunImages {
		id := fmt.Sprintf("SPDXRef-RunImage-%d", i)
		doc.Packages = append(doc.Packages, b.stackPackage(id, run))
		relate("SPDXRef-Builder", "DEPENDS_ON", id, "a run image of the stack: apps the builder builds run on it")
	}
	lifecycle := imagePackage("SPDXRef-Lifecycle", b.Lifecycle.Image, "APPLICATION")
	lifecycle.Name, lifecycle.VersionInfo = "lifecycle", b.Lifecycle.Version
	lifecycle.SourceInfo = "from " + b.Lifecycle.Image
	doc.Packages = append(doc.Packages, lifecycle)
	relate("SPDXRef-Builder", "CONTAINS", "SPDXRef-Lifecycle", "")
	for i, m := range b.modules() {
		id := fmt.Sprintf("SPDXRef-%s-%d", strings.ToUpper(m.kind[:1])+m.kind[1:], i)
		doc.Packages = append(doc.Packages, modulePackage(id, m))
		relate("SPDXRef-Builder", "CONTAINS", id, "")
	}
	return json.Marshal(doc)
}

// imagePackage is the package of an image, repository@digest.
func imagePackage(id, ref, purpose string) spdxPackage {
	repository, hex, _ := splitDigest(ref) // checked
	return spdxPackage{
		SPDXID: id, Name: repository, VersionInfo: "sha256:" + hex, DownloadLocation: noAssertion,
		LicenseConcluded: noAssertion, LicenseDeclared: noAssertion, CopyrightText: noAssertion,
		PrimaryPackagePurpose: purpose,
		Checksums:             []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: hex}},
		ExternalRefs:          []spdxExternalRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: ociPURL(repository, hex)}},
	}
}

// BaseSBOMReferenceType is the type of the external reference the package
// of a stack image has to each SBOM the image carries: its locator is the
// image holding it (a platform's, of an index), a '#', and the diffID of
// the layer holding it, where /cnb/sbom/bom.<ext>.json is.
const BaseSBOMReferenceType = "cnb-base-sbom"

// stackPackage is the package of a stack image, repository@digest, with a
// reference to each SBOM it carries.
func (b Builder) stackPackage(id, ref string) spdxPackage {
	pkg := imagePackage(id, ref, "CONTAINER")
	for _, s := range b.baseSBOMs(ref) {
		pkg.ExternalRefs = append(pkg.ExternalRefs, spdxExternalRef{ReferenceCategory: "OTHER", ReferenceType: BaseSBOMReferenceType,
			ReferenceLocator: s.Image + "#" + s.DiffID})
	}
	return pkg
}

// modulePackage is the package of a buildpack or extension: its layer's
// digest is its checksum.
func modulePackage(id string, m module) spdxPackage {
	license := declaredLicense(m.Licenses)
	pkg := spdxPackage{
		SPDXID: id, Name: m.ID, VersionInfo: m.Version, DownloadLocation: noAssertion, Homepage: homepage(m.Homepage),
		SourceInfo:       "from " + m.Source,
		LicenseConcluded: noAssertion, LicenseDeclared: license, CopyrightText: noAssertion,
		PrimaryPackagePurpose: "APPLICATION",
		Comment:               fmt.Sprintf("a %s; its layer's diffID is %s", m.kind, m.DiffID),
	}
	if m.System {
		pkg.Comment += "; a system buildpack"
	}
	if hex, ok := strings.CutPrefix(m.Layer, "sha256:"); ok {
		pkg.Checksums = []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: hex}}
	}
	return pkg
}

// homepage is a buildpack's homepage as SPDX takes one, a URL; "" (left
// out) for what a buildpackage's label says that is none.
func homepage(s string) string {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ""
	}
	return s
}

// ociPURL is the package URL of an image (the purl spec's oci type): its
// last path element, at its digest, in its repository.
func ociPURL(repository, hex string) string {
	name := repository[strings.LastIndex(repository, "/")+1:]
	return fmt.Sprintf("pkg:oci/%s@sha256%%3A%s?repository_url=%s", strings.ToLower(name), hex, strings.ToLower(repository))
}
