package attest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	slsa "github.com/in-toto/attestation/go/predicates/provenance/v1"
	intoto "github.com/in-toto/attestation/go/v1"
	spdxjson "github.com/spdx/tools-golang/json"
	"github.com/spdx/tools-golang/spdxlib"
	"google.golang.org/protobuf/encoding/protojson"
)

func digestOf(n int) string { return fmt.Sprintf("sha256:%064x", n) }

// sample is a two-platform builder of two buildpacks (one a system one)
// and an extension.
func sample() Builder {
	return Builder{
		Object:     Object{Kind: "Builder", Namespace: "team", Name: "go", UID: "0b5e", Generation: 3},
		Image:      "registry.example.com/builders/go@" + digestOf(1),
		Platforms:  []PlatformImage{{Platform: "linux/amd64", Image: "registry.example.com/builders/go@" + digestOf(2)}, {Platform: "linux/arm64", Image: "registry.example.com/builders/go@" + digestOf(3)}},
		Created:    time.Date(1980, 1, 1, 0, 0, 1, 0, time.UTC),
		BuildImage: "registry.example.com/stacks/build@" + digestOf(4),
		RunImages:  []string{"registry.example.com/stacks/run@" + digestOf(5), "mirror.example.com/run@" + digestOf(6)},
		Lifecycle:  Lifecycle{Version: "0.21.0", Image: "docker.io/buildpacksio/lifecycle@" + digestOf(7)},
		Buildpacks: []Module{
			{ID: "paketo-buildpacks/go", Version: "4.3.1", Homepage: "https://paketo.io", Licenses: []string{"Apache-2.0"}, Layer: digestOf(8), DiffID: digestOf(9), Source: "docker.io/paketobuildpacks/go@" + digestOf(10)},
			{ID: "example/ca-certificates", Version: "1.0.0", Layer: digestOf(11), DiffID: digestOf(12), Source: "registry.example.com/bp/ca@" + digestOf(13), System: true},
		},
		Extensions: []Module{{ID: "example/curl", Version: "1.0.0", Layer: digestOf(14), DiffID: digestOf(15), Source: "registry.example.com/ext/curl@" + digestOf(16)}},
		BaseSBOMs: []BaseSBOM{
			{Of: "registry.example.com/stacks/run@" + digestOf(5), Image: "registry.example.com/stacks/run@" + digestOf(17), DiffID: digestOf(18)},
			{Of: "registry.example.com/stacks/build@" + digestOf(4), Image: "registry.example.com/stacks/build@" + digestOf(19), DiffID: digestOf(20)},
		},
		Controller: Controller{ID: "https://github.com/buildsmith/buildsmith", Version: "v0.9.0"},
	}
}

// TestDeterministic: the same inputs give the same bytes, whatever order
// the modules come in, and no time but the builder's own.
func TestDeterministic(t *testing.T) {
	for name, make := range map[string]func(Builder) ([]byte, error){"SPDX": SPDX, "Provenance": Provenance} {
		t.Run(name, func(t *testing.T) {
			first, err := make(sample())
			if err != nil {
				t.Fatal(err)
			}
			shuffled := sample()
			slices.Reverse(shuffled.Buildpacks)
			shuffled.Buildpacks = append(shuffled.Buildpacks, shuffled.Buildpacks[0]) // twice: listed once
			again, err := make(shuffled)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(first, again) {
				t.Errorf("two documents of the same inputs differ:\n%s\n%s", first, again)
			}
			times := regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d`).FindAllString(string(first), -1)
			if slices.ContainsFunc(times, func(s string) bool { return s != "1980-01-01T00:00:01" }) {
				t.Errorf("times other than the builder's: %v", times)
			}
		})
	}
}

// TestEveryInputNamed: each document names every image and layer by
// digest.
func TestEveryInputNamed(t *testing.T) {
	b := sample()
	spdx, err := SPDX(b)
	if err != nil {
		t.Fatal(err)
	}
	provenance, err := Provenance(b)
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 16; n++ {
		hex := strings.TrimPrefix(digestOf(n), "sha256:")
		if n == 9 || n == 12 || n == 15 { // diffIDs: named, not as checksums
			hex = digestOf(n)
		}
		for doc, raw := range map[string][]byte{"SPDX": spdx, "provenance": provenance} {
			if !bytes.Contains(raw, []byte(hex)) {
				t.Errorf("%s lacks %s", doc, digestOf(n))
			}
		}
	}
}

// TestBaseSBOMsReferred: the package of each stack image refers to each
// SBOM it carries (the image holding it, and its layer), and no other
// package does.
func TestBaseSBOMsReferred(t *testing.T) {
	raw, err := SPDX(sample())
	if err != nil {
		t.Fatal(err)
	}
	var doc spdxDocument
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"SPDXRef-BuildImage": {"registry.example.com/stacks/build@" + digestOf(19) + "#" + digestOf(20)},
		"SPDXRef-RunImage-0": {"registry.example.com/stacks/run@" + digestOf(17) + "#" + digestOf(18)},
	}
	for _, p := range doc.Packages {
		var got []string
		for _, r := range p.ExternalRefs {
			if r.ReferenceType == BaseSBOMReferenceType {
				got = append(got, r.ReferenceLocator)
				if r.ReferenceCategory != "OTHER" {
					t.Errorf("%s: reference %+v", p.SPDXID, r)
				}
			}
		}
		if !slices.Equal(got, want[p.SPDXID]) {
			t.Errorf("%s refers to the SBOMs %q, want %q", p.SPDXID, got, want[p.SPDXID])
		}
	}
	bad := sample()
	bad.BaseSBOMs[0].DiffID = "bom.cdx.json"
	if _, err := SPDX(bad); err == nil {
		t.Error("an SBOM's layer named by no digest was accepted")
	}
}

// TestSPDXShape: the fields SPDX 2.3 requires, IDs of its grammar, each
// once, and relationships between packages it lists.
func TestSPDXShape(t *testing.T) {
	raw, err := SPDX(sample())
	if err != nil {
		t.Fatal(err)
	}
	var doc spdxDocument
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.DataLicense != "CC0-1.0" || doc.CreationInfo.Created != "1980-01-01T00:00:01Z" ||
		!strings.HasPrefix(doc.DocumentNamespace, "https://buildsmith.dev/spdx/registry.example.com/builders/go/sha256-") {
		t.Errorf("document: %+v", doc)
	}
	ids := map[string]bool{"SPDXRef-DOCUMENT": true}
	grammar := regexp.MustCompile(`^SPDXRef-[A-Za-z0-9.-]+$`)
	var names []string
	for _, p := range doc.Packages {
		if !grammar.MatchString(p.SPDXID) || ids[p.SPDXID] || p.Name == "" || p.DownloadLocation == "" {
			t.Errorf("package %+v: an id of the grammar, once, with a name and a download location", p)
		}
		ids[p.SPDXID] = true
		names = append(names, p.Name+"@"+p.VersionInfo)
	}
	for _, want := range []string{"paketo-buildpacks/go@4.3.1", "example/ca-certificates@1.0.0", "example/curl@1.0.0", "lifecycle@0.21.0"} {
		if !slices.Contains(names, want) {
			t.Errorf("packages %q lack %s", names, want)
		}
	}
	for _, r := range doc.Relationships {
		if !ids[r.Element] || !ids[r.Related] {
			t.Errorf("relationship %+v names a package not listed", r)
		}
	}
	if len(doc.Packages) != 10 { // the builder, 2 platforms, the build image, 2 run images, the lifecycle, 3 modules
		t.Errorf("%d packages: %q", len(doc.Packages), names)
	}
}

// TestProvenanceShape: subjects are the builder and its platforms' images;
// the object, the controller and the dependencies are where SLSA v1 puts
// them.
func TestProvenanceShape(t *testing.T) {
	raw, err := Provenance(sample())
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Type          string    `json:"_type"`
		Subject       []subject `json:"subject"`
		PredicateType string    `json:"predicateType"`
		Predicate     provenance
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	if s.Type != StatementType || s.PredicateType != ProvenancePredicateType || len(s.Subject) != 3 ||
		s.Subject[0].Name != "registry.example.com/builders/go" || s.Subject[0].Digest["sha256"] != strings.TrimPrefix(digestOf(1), "sha256:") {
		t.Errorf("statement: %s", raw)
	}
	p := s.Predicate
	if p.BuildDefinition.BuildType != BuildType || p.BuildDefinition.ExternalParameters.Builder != (builderObject{Kind: "Builder", Namespace: "team", Name: "go", UID: "0b5e", Generation: 3}) ||
		p.RunDetails.Builder.ID != "https://github.com/buildsmith/buildsmith" || p.RunDetails.Builder.Version["buildsmith"] != "v0.9.0" {
		t.Errorf("predicate: %+v", p)
	}
	var deps []string
	for _, d := range p.BuildDefinition.ResolvedDependencies {
		deps = append(deps, d.Name+" "+d.Annotations["id"])
	}
	want := []string{"build image ", "run image ", "run image ", "lifecycle ", "buildpack example/ca-certificates", "buildpack paketo-buildpacks/go", "extension example/curl"}
	if !slices.Equal(deps, want) {
		t.Errorf("dependencies %q, want %q", deps, want)
	}
}

// TestRefusesWhatIsNotByDigest: an attestation names everything by digest,
// or is not made.
func TestRefusesWhatIsNotByDigest(t *testing.T) {
	for _, mutate := range []func(*Builder){
		func(b *Builder) { b.Image = "registry.example.com/builders/go:latest" },
		func(b *Builder) { b.RunImages[1] = "mirror.example.com/run:1" },
		func(b *Builder) { b.Buildpacks[0].Source = "docker.io/paketobuildpacks/go@sha256:abc" },
		func(b *Builder) { b.Lifecycle.Image = "@" + digestOf(1) },
	} {
		b := sample()
		mutate(&b)
		if _, err := SPDX(b); err == nil {
			t.Errorf("SPDX of %+v: no error", b)
		}
		if _, err := Provenance(b); err == nil {
			t.Errorf("Provenance of %+v: no error", b)
		}
	}
}

// TestSPDXReadsWithTheSPDXTools: the SBOM reads with the SPDX project's
// own Go library as an SPDX 2.3 document, which its validation accepts,
// describing the builder.
func TestSPDXReadsWithTheSPDXTools(t *testing.T) {
	raw, err := SPDX(sample())
	if err != nil {
		t.Fatal(err)
	}
	doc, err := spdxjson.Read(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if err := spdxlib.ValidateDocument(doc); err != nil {
		t.Error(err)
	}
	described, err := spdxlib.GetDescribedPackageIDs(doc)
	if err != nil || len(described) != 1 || described[0] != "Builder" {
		t.Errorf("described: %v, %v; want the builder", described, err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || len(doc.Packages) != 10 {
		t.Errorf("read %s with %d packages", doc.SPDXVersion, len(doc.Packages))
	}
}

// TestProvenanceReadsWithInToto: the statement and its predicate read with
// in-toto's own Go bindings of Statement v1 and SLSA provenance v1, whose
// validation accepts them.
func TestProvenanceReadsWithInToto(t *testing.T) {
	raw, err := Provenance(sample())
	if err != nil {
		t.Fatal(err)
	}
	statement := validStatement(t, raw)
	predicate, err := protojson.Marshal(statement.GetPredicate())
	if err != nil {
		t.Fatal(err)
	}
	var p slsa.Provenance
	if err := protojson.Unmarshal(predicate, &p); err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		t.Error(err)
	}
	if n := len(p.GetBuildDefinition().GetResolvedDependencies()); n != 7 {
		t.Errorf("%d resolved dependencies, want 7", n)
	}
}

// TestSBOMStatement: the SBOM as the predicate of an in-toto statement
// about the builder and its platforms, which in-toto's bindings accept.
func TestSBOMStatement(t *testing.T) {
	raw, err := SBOMStatement(sample())
	if err != nil {
		t.Fatal(err)
	}
	statement := validStatement(t, raw)
	sbom, _ := SPDX(sample())
	predicate, _ := protojson.Marshal(statement.GetPredicate())
	var want, got any
	_ = json.Unmarshal(sbom, &want)
	_ = json.Unmarshal(predicate, &got)
	if statement.GetPredicateType() != SPDXPredicateType || len(statement.GetSubject()) != 3 || fmt.Sprint(want) != fmt.Sprint(got) {
		t.Errorf("statement %s", raw)
	}
}

// TestModulesEdgeCases: one id@version listed twice with other contents
// gives one document whatever the order; license expressions keep their
// meaning side by side; a homepage that is no URL is left out.
func TestModulesEdgeCases(t *testing.T) {
	b := sample()
	twin := b.Buildpacks[0]
	twin.Layer, twin.DiffID = digestOf(98), digestOf(99)
	b.Buildpacks = append(b.Buildpacks, twin)
	b.Buildpacks[0].Licenses = []string{"MIT OR Apache-2.0", "BSD-3-Clause"}
	b.Buildpacks[1].Homepage = "not a url"
	first, err := SPDX(b)
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(b.Buildpacks)
	second, _ := SPDX(b)
	if !bytes.Equal(first, second) {
		t.Error("the order of the buildpacks changes the document")
	}
	if !bytes.Contains(first, []byte(`"licenseDeclared":"(MIT OR Apache-2.0) AND BSD-3-Clause"`)) || bytes.Contains(first, []byte("not a url")) {
		t.Errorf("licenses or homepage: %s", first)
	}
	doc, err := spdxjson.Read(bytes.NewReader(first))
	if err != nil {
		t.Fatal(err)
	}
	if err := spdxlib.ValidateDocument(doc); err != nil {
		t.Error(err)
	}
}

// validStatement reads raw with in-toto's bindings, whose validation must
// accept it.
func validStatement(t *testing.T, raw []byte) *intoto.Statement {
	t.Helper()
	var statement intoto.Statement
	if err := protojson.Unmarshal(raw, &statement); err != nil {
		t.Fatal(err)
	}
	if err := statement.Validate(); err != nil {
		t.Error(err)
	}
	return &statement
}

// TestSignStatement: what a bundle signature signs is cosign v3's
// statement about the image alone, which in-toto's bindings accept; a
// reference not by digest is refused.
func TestSignStatement(t *testing.T) {
	image := "registry.example.com/builders/go@" + digestOf(1)
	raw, err := SignStatement(image)
	if err != nil {
		t.Fatal(err)
	}
	statement := validStatement(t, raw)
	subjects := statement.GetSubject()
	if statement.GetPredicateType() != SignPredicateType || len(subjects) != 1 || subjects[0].GetDigest()["sha256"] != digestOf(1)[len("sha256:"):] ||
		len(statement.GetPredicate().GetFields()) != 0 {
		t.Errorf("statement %s", raw)
	}
	if again, _ := SignStatement(image); !bytes.Equal(again, raw) {
		t.Errorf("made twice: %s, then %s", raw, again)
	}
	if _, err := SignStatement("registry.example.com/builders/go:latest"); err == nil {
		t.Error("a tag was accepted")
	}
}
