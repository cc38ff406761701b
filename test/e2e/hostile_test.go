package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cosign"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/pkg/registry"
	"github.com/buildsmith/buildsmith/test/cosigntest"
)

// TestHostileTenant: a tenant whose ServiceAccounts, keys and tags reach
// every bound at once — a ServiceAccount naming 40 Secrets that do not
// exist, a Secret of 100 KiB, a cosign key sealed with scrypt's strongest
// preset, builders tagged for more unreachable hosts than a namespace may
// wait on — gets a status naming each bound, while a calm tenant's builder
// turns Ready beside it, and no made-up host becomes a metric label.
func TestHostileTenant(t *testing.T) {
	const failingRegistries, unreachable = 3, 6
	w := newFaultWorld(t, "calm")
	ctx := context.Background()
	port := servePrometheus(t)
	startController(t, "--metrics-port", fmt.Sprint(port),
		"--max-failing-registries-per-namespace", fmt.Sprint(failingRegistries))

	const ns = "hostile"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pull := []corev1.LocalObjectReference{{Name: "registry"}}
	secrets := []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "registry"}, Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: dockerConfig(w.f.Addr, registryUser, registryPassword)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "big"}, Data: map[string][]byte{"filler": make([]byte, 100<<10)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "signing"}, Data: map[string][]byte{
			cosign.SecretKey: cosigntest.CostlyKey(t, "pw"), cosign.SecretPassword: []byte("pw")}},
	}
	for _, s := range secrets {
		if _, err := kube.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	named := func(names ...string) []corev1.ObjectReference {
		refs := make([]corev1.ObjectReference, len(names))
		for i, n := range names {
			refs[i] = corev1.ObjectReference{Name: n}
		}
		return refs
	}
	var madeUp []string
	for i := range 40 {
		madeUp = append(madeUp, fmt.Sprintf("missing-%02d", i))
	}
	for _, sa := range []*corev1.ServiceAccount{
		{ObjectMeta: metav1.ObjectMeta{Name: "default"}, ImagePullSecrets: pull},
		{ObjectMeta: metav1.ObjectMeta{Name: "many"}, ImagePullSecrets: pull, Secrets: named(madeUp...)},
		{ObjectMeta: metav1.ObjectMeta{Name: "big"}, ImagePullSecrets: pull, Secrets: named("big")},
		{ObjectMeta: metav1.ObjectMeta{Name: "costly"}, ImagePullSecrets: pull, Secrets: named("signing")},
	} {
		if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w.objects.create(t)
	hostile := map[string]string{ // builder → what its status must say
		"many": registry.ReasonTooManySecrets, "big": reconciler.ReasonSecretTooLarge, "costly": cosign.ReasonSigningKeyTooCostly}
	for account := range hostile {
		w.objects.createBuilder(t, ns, account, v1alpha1.NamespacedBuilderSpec{ServiceAccountName: account,
			BuilderSpec: v1alpha1.BuilderSpec{Order: helloOrder()}})
	}
	for i := range unreachable {
		b := &v1alpha1.Builder{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("unreachable-%d", i)},
			Spec: v1alpha1.NamespacedBuilderSpec{BuilderSpec: v1alpha1.BuilderSpec{
				Tag:   fmt.Sprintf("h%d.invalid:5000/builders/app:latest", i), // fails DNS
				Stack: v1alpha1.StackRef{Name: w.name}, Store: v1alpha1.StoreRef{Name: w.name}, Order: helloOrder()}}}
		if _, err := client.BuildsmithV1alpha1().Builders(ns).Create(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w.createBuilder(t, w.name) // the calm tenant's, created last
	w.waitReady(t, 60*time.Second)

	// Each hostile builder says which bound it reached; of the unreachable
	// ones, as many wait on their registries' circuits as the namespace
	// may, the others retry on their own, saying why.
	eventually(t, 30*time.Second, "the hostile builders' statuses", func() (bool, string) {
		list, err := client.BuildsmithV1alpha1().Builders(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var states []string
		ok, waiting, limited := true, 0, 0
		for _, b := range list.Items {
			ready, reconciling := b.Status.GetCondition(v1alpha1.ConditionReady), b.Status.GetCondition(v1alpha1.ConditionReconciling)
			if ready == nil {
				ok = false
				states = append(states, b.Name+": no status")
				continue
			}
			states = append(states, fmt.Sprintf("%s: %s %s", b.Name, ready.Reason, ready.Message))
			if want, isBound := hostile[b.Name]; isBound {
				stalled := b.Status.GetCondition(v1alpha1.ConditionStalled)
				ok = ok && ready.Reason == want && stalled != nil && stalled.IsTrue()
				continue
			}
			ok = ok && ready.Reason == registry.ReasonRegistryUnavailable && reconciling != nil
			switch {
			case reconciling == nil:
			case strings.Contains(reconciling.Message, "retrying when"):
				waiting++
			case strings.Contains(reconciling.Message, "--max-failing-registries-per-namespace"):
				limited++
			}
		}
		sort.Strings(states)
		return ok && waiting == failingRegistries && limited == unreachable-failingRegistries,
			fmt.Sprintf("%d waiting on circuits, %d over the limit:\n%s", waiting, limited, strings.Join(states, "\n"))
	})
	if _, notReady, _ := w.status(t); notReady != [3]string{} {
		t.Errorf("the calm tenant's store, stack and builder left Ready beside the hostile tenant: %q", notReady)
	}

	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if strings.Contains(string(body), ".invalid") {
		t.Errorf("a made-up host is a metric label:\n%s", grepLines(string(body), ".invalid"))
	}
	if !hasSample(string(body), "buildsmith_registry_circuits_open", `host="`+registry.OtherHosts+`"`) {
		t.Errorf("no open circuit counted under host=%q:\n%s", registry.OtherHosts, grepLines(string(body), "circuits"))
	}
}

func grepLines(body, part string) string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if strings.Contains(line, part) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
