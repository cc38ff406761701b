package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/test/cosigntest"
	"github.com/buildsmith/buildsmith/test/localhost"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestSigningCost is scenario 13: what signing builders with a cosign key
// costs in registry requests. BENCH_SIGN_N (default 100) builders without
// a key, then as many with one from the start; then the key is added to the
// first ones' ServiceAccount (signing builders already pushed); then every
// builder is resynced.
func TestSigningCost(t *testing.T) {
	if !full {
		t.Skip("BENCH=1")
	}
	n := envInt("BENCH_SIGN_N", 100)
	f := registrytest.New(t)
	seed(t, f.Addr)
	p, _ := startController(t, "--builder-attestations=none") // signing alone: § 19 adds attestations
	defer p.Kill()
	w := newWorld(t, f.Addr)
	w.waitStoreStackReady(t, 60*time.Second)
	private, _ := cosigntest.KeyPair(t, "bench")
	steps := &phases{f: f, w: w}
	measure := func(name string, run func() (time.Duration, bool)) { t.Helper(); steps.measure(t, name, run) }

	unsigned := w.inNamespace(t, w.name+"-unsigned", f.Addr)
	measure("push, no key", func() (time.Duration, bool) {
		unsigned.createBuilders(t, 0, n, w.order())
		return unsigned.waitBuildersReady(t, n, 3*time.Minute)
	})
	keyed := w.inNamespace(t, w.name+"-signed", f.Addr)
	addSigningKey(t, keyed.ns, private)
	measure("push and sign", func() (time.Duration, bool) {
		keyed.createBuilders(t, n, 2*n, w.order())
		return waitSigned(t, keyed.ns, n, 1)
	})
	measure("key added: sign builders already pushed", func() (time.Duration, bool) {
		addSigningKey(t, unsigned.ns, private)
		return waitSigned(t, unsigned.ns, n, 1)
	})
	measure("resync of signed builders", func() (time.Duration, bool) {
		begin := time.Now()
		if out, err := env.Kubectl("annotate", "builders", "--all", "-n", keyed.ns, "--overwrite",
			"bench.buildsmith.dev/resync="+begin.Format(time.RFC3339Nano)).CombinedOutput(); err != nil {
			t.Fatalf("kubectl annotate: %v\n%s", err, out)
		}
		return waitAsked(f, begin, 2*time.Minute, 500*time.Millisecond, n, builderRepoAsked)
	})

	s := &section{title: fmt.Sprintf("13. The cost of signing: %d builders with a cosign key, %d without", n, n),
		what: fmt.Sprintf("%d single-platform builders pushed without a key; %d more in a namespace whose ServiceAccount lists a "+
			"cosign key Secret from the start; then the key is added to the first namespace's ServiceAccount, which signs its "+
			"builders already pushed; then the signed builders are asked to reconcile (as at a resync). Requests are every "+
			"request the registry saw in the phase, divided by %d.", n, n, n),
		header: phaseHeader, rows: steps.rows(n)}
	per := func(v int) string { return perBuilder(v, n) }
	phases := steps.list
	if len(phases) == 4 {
		extra := float64(phases[1].cost.requests-phases[0].cost.requests) / float64(n)
		s.notes = append(s.notes, fmt.Sprintf("Signing adds %.1f requests per builder to a push (%s − %s).", extra,
			per(phases[1].cost.requests), per(phases[0].cost.requests)))
		s.targets = []target{
			{"resync of signed builders", "1 request per builder (nothing signed again)", per(phases[3].cost.requests),
				phases[3].ok && phases[3].cost.requests <= n},
			{"every phase done", "all builders Ready (and signed)", fmt.Sprint(phases[0].ok && phases[1].ok && phases[2].ok), phases[0].ok && phases[1].ok && phases[2].ok},
		}
	}
	addSection(s)
}

// addSigningKey gives ns a cosign key: the Secret "cosign" holding private
// (password "bench"), then listed by the default ServiceAccount.
func addSigningKey(t testing.TB, ns string, private []byte) {
	t.Helper()
	createSigningSecret(t, ns, private)
	useSigningSecret(t, ns)
}

// createSigningSecret creates addSigningKey's Secret, not yet listed by the
// ServiceAccount.
func createSigningSecret(t testing.TB, ns string, private []byte) {
	t.Helper()
	secret := cosigntest.Secret(ns, "cosign", private, "bench")
	secret.ResourceVersion = ""
	if _, err := kube.CoreV1().Secrets(ns).Create(context.Background(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// useSigningSecret lists addSigningKey's Secret in ns's default
// ServiceAccount.
func useSigningSecret(t testing.TB, ns string) {
	t.Helper()
	if _, err := kube.CoreV1().ServiceAccounts(ns).Update(context.Background(), &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns},
		Secrets:    []corev1.ObjectReference{{Name: "cosign"}}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitSigned waits until the n builders of ns are Ready with want
// signatures each.
func waitSigned(t testing.TB, ns string, n, want int) (time.Duration, bool) {
	t.Helper()
	ctx := context.Background()
	took, err := localhost.Poll(ctx, 3*time.Minute, 200*time.Millisecond, "builders signed", func() (bool, string) {
		list, err := client.BuildsmithV1alpha1().Builders(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		done := 0
		for _, b := range list.Items {
			if b.Status.IsReady() && b.Status.ObservedGeneration == b.Generation && len(b.Status.Signatures) == want {
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
