package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/test/cosigntest"
	"github.com/buildsmith/buildsmith/test/localhost"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestAttestationCost is scenario 19: what signing a builder and attaching
// its signed SBOM and provenance cost. BENCH_ATTEST_N (default 200)
// builders pushed cold by a controller with --builder-attestations=none,
// unsigned; as many signed with a cosign key
// (the .sig tag); as many signed as bundles (spec.signing.format: bundle);
// then as many by a controller with --builder-attestations=signed, on a
// registry without the referrers API (the distribution registry's case: the
// fallback tag); then the attested builders are resynced.
func TestAttestationCost(t *testing.T) {
	if !full {
		t.Skip("BENCH=1")
	}
	n := envInt("BENCH_ATTEST_N", 200)
	f := registrytest.New(t)
	seed(t, f.Addr)
	w := newWorld(t, f.Addr)
	private, _ := cosigntest.KeyPair(t, "bench")
	steps := &phases{f: f, w: w}
	measure := func(name string, run func() (time.Duration, bool)) { t.Helper(); steps.measure(t, name, run) }
	push := func(ns string, from int, signing *v1alpha1.Signing, signatures, attestations int) (time.Duration, bool) {
		keyed := w.inNamespace(t, ns, f.Addr)
		if signatures > 0 {
			addSigningKey(t, keyed.ns, private)
		}
		keyed.signing = signing
		keyed.createBuilders(t, from, from+n, w.order())
		return waitAttested(t, keyed.ns, n, signatures, attestations)
	}

	p, _ := startController(t, "--builder-attestations=none")
	w.waitStoreStackReady(t, 60*time.Second)
	namespaces := []string{w.name + "-plain", w.name + "-signed", w.name + "-bundle"}
	measure("push, unsigned", func() (time.Duration, bool) { return push(namespaces[0], 0, nil, 0, 0) })
	measure("push and sign (.sig tag)", func() (time.Duration, bool) { return push(namespaces[1], n, nil, 1, 0) })
	measure("push and sign as a bundle", func() (time.Duration, bool) {
		return push(namespaces[2], 2*n, &v1alpha1.Signing{Format: v1alpha1.SignatureFormatBundle}, 1, 0)
	})
	p.Kill()
	// The next controller would attest these too, when it lists them.
	for _, ns := range namespaces {
		if out, err := env.Kubectl("delete", "builders", "--all", "-n", ns, "--wait=false").CombinedOutput(); err != nil {
			t.Fatalf("kubectl delete: %v\n%s", err, out)
		}
	}
	p, _ = startController(t, "--builder-attestations=signed")
	defer p.Kill()
	attested := w.name + "-attested"
	measure("push, sign (.sig tag) and attest (SBOM, provenance)", func() (time.Duration, bool) { return push(attested, 3*n, nil, 1, 2) })
	measure("resync of attested builders", func() (time.Duration, bool) {
		begin := time.Now()
		if out, err := env.Kubectl("annotate", "builders", "--all", "-n", attested, "--overwrite",
			"bench.buildsmith.dev/resync="+begin.Format(time.RFC3339Nano)).CombinedOutput(); err != nil {
			t.Fatalf("kubectl annotate: %v\n%s", err, out)
		}
		return waitAsked(f, begin, 2*time.Minute, 500*time.Millisecond, n, builderRepoAsked)
	})

	s := &section{title: fmt.Sprintf("19. The cost of signatures and attestations: %d builders each unsigned, signed, signed as bundles, and attested", n),
		what: fmt.Sprintf("One registry (ggcr in-memory behind registrytest.New: no referrers API, so each builder's referrers "+
			"are listed in the fallback tag's index, as on the distribution registry; nor blobs taken whole in the POST, as on "+
			"the distribution registry). A controller with --builder-attestations=none pushes %d single-platform "+
			"builders cold in each of three namespaces: unsigned; with a cosign key (the .sig tag); with the key and "+
			"spec.signing.format bundle. The controller restarted with --builder-attestations=signed pushes %d more, signed, "+
			"until each is Ready with its 2 attestations; then those are asked to reconcile (as at a resync). Requests are every "+
			"request the registry saw in the phase, divided by %d. The builders of the first three phases are deleted before the "+
			"restart (the second controller would attest them too).", n, n, n),
		header: phaseHeader, rows: steps.rows(n)}
	attestationTargets(s, steps.list, n)
	addSection(s)
}

// attestationTargets are scenario 19's targets, from its five phases.
func attestationTargets(s *section, phases []phase, n int) {
	if len(phases) != 5 {
		return
	}
	per := func(v int) string { return perBuilder(v, n) }
	unsigned, signed, bundled, attested, resync := phases[0], phases[1], phases[2], phases[3], phases[4]
	perSignature := float64(signed.cost.requests-unsigned.cost.requests) / float64(n)
	perBundle := float64(bundled.cost.requests-unsigned.cost.requests) / float64(n)
	perAttestation := float64(attested.cost.requests-signed.cost.requests) / float64(2*n)
	added := float64(attested.took) / float64(signed.took)
	s.targets = []target{
		{"registry requests per attestation", "≤ 5", fmt.Sprintf("%.2f", perAttestation), perAttestation <= 5},
		{"registry requests per signature, as a bundle", "≤ 5", fmt.Sprintf("%.2f", perBundle), perBundle <= 5},
		{"registry requests per signature, at the .sig tag", "≤ 5", fmt.Sprintf("%.2f", perSignature), perSignature <= 5},
		{"time added to a cold signed run by attesting", "(reported)", fmt.Sprintf("×%.2f (%v against %v)", added,
			attested.took.Round(100*time.Millisecond), signed.took.Round(100*time.Millisecond)), true},
		{"resync of attested builders", "1 request per builder (nothing attached again)", per(resync.cost.requests),
			resync.ok && resync.cost.requests <= n},
		{"every phase done", "all builders Ready, signed and attested", fmt.Sprint(unsigned.ok && signed.ok && bundled.ok && attested.ok),
			unsigned.ok && signed.ok && bundled.ok && attested.ok},
	}
	s.notes = append(s.notes, fmt.Sprintf("Attesting adds %.1f requests per builder to a signed push (%s − %s), for two attestations: "+
		"the empty config blob mounted once, each referrer's blob (POST, PUT) and manifest, and the fallback index read and "+
		"written once for both; the subject is described from the push, not asked about.",
		float64(attested.cost.requests-signed.cost.requests)/float64(n), per(attested.cost.requests), per(signed.cost.requests)),
		fmt.Sprintf("A bundle signature costs %.1f requests (%s − %s), missed against ≤ 5 by the empty config blob: its blob "+
			"(POST, PUT), its manifest PUT and the fallback index read and written make 5, and the first referrer of a "+
			"repository mounts the empty config blob (each builder here is alone in a new repository; the next bundle there, "+
			"of a rebuilt builder, costs 5). On a registry with the referrers API, 3 (the index is the registry's to keep). "+
			"With attestations, an image's bundle shares their listing: 3 more requests.", perBundle, per(bundled.cost.requests), per(unsigned.cost.requests)),
		fmt.Sprintf("A signature at the .sig tag costs %.1f requests (%s − %s), missed against ≤ 5: two small blobs (POST, PUT "+
			"each) and the manifest PUT, and a HEAD of the tag before (to keep the signatures already there) and after (that no "+
			"writer replaced it meanwhile). The tag is read, extended and written again by every signer, and the registry "+
			"offers no conditional PUT: the HEAD after is what keeps a concurrent signer's signature from being lost "+
			"unnoticed. spec.signing.format bundle is the way to ≤ 5.", perSignature, per(signed.cost.requests), per(unsigned.cost.requests)))
}

// waitAttested waits until the n builders of ns are Ready, with
// signatures signatures and attestations attestations each.
func waitAttested(t testing.TB, ns string, n, signatures, attestations int) (time.Duration, bool) {
	t.Helper()
	ctx := context.Background()
	took, err := localhost.Poll(ctx, 5*time.Minute, 200*time.Millisecond, "builders attested", func() (bool, string) {
		list, err := client.BuildsmithV1alpha1().Builders(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		done := 0
		for _, b := range list.Items {
			if b.Status.IsReady() && b.Status.ObservedGeneration == b.Generation && len(b.Status.Signatures) == signatures &&
				len(b.Status.Attestations) == attestations {
				done++
			}
		}
		return done == n, fmt.Sprintf("%d/%d", done, n)
	})
	if err != nil {
		t.Log(err)
	}
	return took, err == nil
}
