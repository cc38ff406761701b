package bench

import (
	"context"
	"encoding/base64"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestUnrelatedSecrets is scenario 10: the controller's memory with many
// Secrets it has no use for in the cluster (Helm release Secrets, say),
// against none. Its builders use a pull Secret, so that credentials are read
// as in a real cluster. BENCH_SECRETS_N (default 10000) Secrets of
// BENCH_SECRETS_KIB (default 100) KiB each.
func TestUnrelatedSecrets(t *testing.T) {
	if !full {
		t.Skip("BENCH=1")
	}
	n, kib := envInt("BENCH_SECRETS_N", 10000), envInt("BENCH_SECRETS_KIB", 100)
	const builders = 20
	ctx := context.Background()
	f := registrytest.New(t)
	seed(t, f.Addr)
	w := newWorld(t, f.Addr)
	auth := base64.StdEncoding.EncodeToString([]byte("bench:unused"))
	if _, err := kube.CoreV1().Secrets(w.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "registry"},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: fmt.Appendf(nil, `{"auths":{%q:{"auth":%q}}}`, f.Addr, auth)}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().ServiceAccounts(w.ns).Update(ctx, &corev1.ServiceAccount{
		ObjectMeta:       metav1.ObjectMeta{Name: "default", Namespace: w.ns},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.createBuilders(t, 0, builders, w.order())

	// settled runs a controller until every builder is Ready and a while
	// after (its reconciles of the existing builders at start done), and
	// returns its peak RSS.
	settled := func() int64 {
		t.Helper()
		p, _ := startController(t)
		defer p.Kill()
		if _, ok := w.waitBuildersReady(t, builders, 2*time.Minute); !ok {
			t.Fatal("builders not Ready")
		}
		time.Sleep(20 * time.Second)
		return p.PeakRSS()
	}
	without := settled()

	const ns = "unrelated-secrets"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.CoreV1().Secrets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		_ = kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	})
	payload := make([]byte, kib<<10)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	next := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				_, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("release-%05d", i)},
					Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"release": payload}}, metav1.CreateOptions{})
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("creating the Secrets: %v", err)
	default:
	}
	created := time.Since(start)
	with := settled()

	ratio := float64(with) / float64(without)
	s := &section{title: fmt.Sprintf("10. Controller memory with %d unrelated Secrets of %d KiB", n, kib),
		what: fmt.Sprintf("%d builders Ready, their ServiceAccount naming a pull Secret; a controller runs until they are Ready and 20 s "+
			"more, and its peak RSS (VmHWM) is read; then %d Opaque Secrets of %d KiB are created in a namespace the controller has "+
			"no object in (%s), and a new controller does the same.", builders, n, kib, created.Round(time.Second)),
		header: []string{"Secrets in the cluster", "controller peak RSS"},
		rows: [][]string{{"only the pull Secret", mib(without)},
			{fmt.Sprintf("and %d unrelated (%s)", n, mib(int64(n)*int64(kib)<<10)), mib(with)}}}
	s.targets = []target{{"peak RSS with the unrelated Secrets vs without", "within 10 %", fmt.Sprintf("×%.2f", ratio), ratio <= 1.10}}
	addSection(s)
}
