package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/test/controllertest"
	"github.com/buildsmith/buildsmith/test/cosigntest"
	"github.com/buildsmith/buildsmith/test/hostileregistry"
)

// The bounds the controller runs with here, and the chart's memory limit.
const (
	hostileFlattenBudget = 16 << 20 // --max-flattened-bytes
	hostileFlattens      = 2        // --max-concurrent-flattens
	chartMemoryLimit     = 512 << 20
	// floodHosts answer every request 401 with
	// hostileregistry.FloodHeaderBytes of headers.
	floodHosts = 24
	// hostileNamespace is the hostile tenant's.
	hostileNamespace = "hostile-registry"
)

// TestHostileRegistry (issue 37): a tenant whose own registry serves, at
// once, a zstd layer asking for a 512 MiB window, a layer GET whose body
// never ends, 24 hosts answering 401 with 8 MiB of headers, a signature
// image of 1,000 layers, and reads redirected to fresh 16 KiB paths
// answered 429 Retry-After: 86400. Each of its objects says which bound it
// met, within 90 s; beside it a calm tenant's five builders turn Ready; the
// controller stays up, below the chart's memory limit, keeping none of the
// headers, and its scratch directory within 2 × --max-concurrent-flattens ×
// --max-flattened-bytes.
func TestHostileRegistry(t *testing.T) {
	w := newFaultWorld(t, "tranquil")
	h := hostileregistry.New(t)
	floods := hostileregistry.StartFloods(t, floodHosts)
	scratch := flattenScratchDir(t)
	profiling := enableProfiling(t)
	p := controllertest.Start(t, controller, controllertest.Options{Kubeconfig: env.Kubeconfig, Namespace: systemNamespace,
		DisableHA: true, Args: []string{"--scratch-dir", scratch, "--profiling-port", strconv.Itoa(profiling),
			"--max-flattened-bytes", strconv.Itoa(hostileFlattenBudget), "--max-concurrent-flattens", strconv.Itoa(hostileFlattens)}})
	// Checked even when a status check below fails: the figures say why.
	defer checkStayedWithinBounds(t, p, scratch, hostileregistry.SampleScratch(t, scratch))

	w.objects.create(t)
	w.waitStoreStack(t)
	started := time.Now()
	createHostileTenant(t, w)
	hostile, err := h.Create(context.Background(), client, hostileregistry.Tenant{Namespace: hostileNamespace,
		Store: w.name, Stack: w.name, Order: helloOrder(), Signer: "signer"}, floods)
	if err != nil {
		t.Fatal(err)
	}
	calm := []string{w.name}
	for i := 1; i < 5; i++ {
		calm = append(calm, fmt.Sprintf("%s-%d", w.name, i))
	}
	for _, name := range calm {
		w.createBuilder(t, name)
	}
	calmTook := waitBuildersReady(t, w.ns, calm, 90*time.Second)
	t.Logf("the calm tenant's %d builders Ready %v after they were created (each: %v)", len(calm), maxDuration(calmTook), calmTook)

	eventually(t, max(90*time.Second-time.Since(started), 5*time.Second), "every hostile object to say which bound it met",
		func() (bool, string) { return hostile.Check(context.Background(), client, hostileNamespace) })
	t.Logf("every hostile object had its status %v after they were created", time.Since(started).Round(100*time.Millisecond))
	hostile.Log(t)
	checkKeptHeap(t, profiling)
	// Each fault was met: the endless body read, the .sig image read, a
	// redirect answered 429, every flood host asked.
	traffic, err := h.Traffic()
	t.Log(traffic)
	if err != nil {
		t.Error(err)
	}
	asked, err := hostileregistry.FloodTraffic(floods)
	t.Logf("requests to each flood host: %v", asked)
	if err != nil {
		t.Error(err)
	}
}

// checkStayedWithinBounds checks that the controller still runs (it was
// started once: alive means it never crashed nor restarted), that its peak
// RSS stayed under the chart's memory limit, and that its scratch directory
// was used and never held more than 2 × --max-concurrent-flattens ×
// --max-flattened-bytes.
func checkStayedWithinBounds(t *testing.T, p *controllertest.Process, scratch string, scratchPeak func() int64) {
	if err := p.Running(); err != nil {
		t.Errorf("the controller did not stay up: %v", err)
	}
	rss := p.PeakRSS()
	t.Logf("controller peak RSS (VmHWM): %.0f MiB", float64(rss)/(1<<20))
	if rss == 0 || rss > chartMemoryLimit {
		t.Errorf("the controller's peak RSS is %d bytes: want some, under the chart's limit of %d", rss, chartMemoryLimit)
	}
	peak, bound := scratchPeak(), int64(2*hostileFlattens*hostileFlattenBudget)
	t.Logf("scratch directory: peak %.1f MiB (bound %d MiB)", float64(peak)/(1<<20), bound>>20)
	if peak > bound {
		t.Errorf("the scratch directory reached %d bytes, more than 2 × %d flattens × %d bytes", peak, hostileFlattens, hostileFlattenBudget)
	}
	if info, err := os.Stat(scratch); err != nil || info.ModTime().Year() <= 2000 {
		t.Errorf("the controller never wrote in its --scratch-dir %s (%v): the flattens proved nothing", scratch, err)
	}
}

// waitStoreStack waits for the calm tenant's store and stack, which the
// hostile tenant's builders use too.
func (w *faultWorld) waitStoreStack(t *testing.T) {
	t.Helper()
	wait := env.Kubectl("wait", "--for=condition=Ready", "--timeout=60s", "clusterstore/"+w.name, "clusterstack/"+w.name)
	if out, err := wait.CombinedOutput(); err != nil {
		t.Fatalf("kubectl wait: %v\n%s", err, out)
	}
}

// waitBuildersReady waits until each builder of ns is Ready with an image,
// and returns how long each took from now (as first seen, polled every
// 100 ms).
func waitBuildersReady(t *testing.T, ns string, names []string, timeout time.Duration) []time.Duration {
	t.Helper()
	start := time.Now()
	took := make([]time.Duration, len(names))
	eventually(t, timeout, "the calm tenant's builders Ready", func() (bool, string) {
		var waiting []string
		for i, name := range names {
			if took[i] > 0 {
				continue
			}
			b, err := client.BuildsmithV1alpha1().Builders(ns).Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if b.Status.IsReady() && b.Status.LatestImage != "" {
				took[i] = time.Since(start).Round(100 * time.Millisecond)
				continue
			}
			waiting = append(waiting, fmt.Sprintf("%s: %s", name, hostileregistry.ReadyOf(&b.Status.ConditionedStatus)))
		}
		return len(waiting) == 0, strings.Join(waiting, "\n")
	})
	return took
}

func maxDuration(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// enableProfiling turns the controllers' profiling server on and returns
// a free port for --profiling-port.
func enableProfiling(t *testing.T) int {
	t.Helper()
	return observe(t, map[string]string{"runtime-profiling": "enabled"})
}

// keptHeapLimit bounds the controller's live heap (after a collection) once
// the flood hosts have answered: keeping their headers would take
// floodHosts × floodHeaderBytes (192 MiB) on top of the ~tens of MiB it
// needs for the objects of this test.
const keptHeapLimit = 128 << 20

// checkKeptHeap reads the controller's heap after a collection (pprof's
// gc=1): what it still holds, not what it allocated on the way.
func checkKeptHeap(t *testing.T, port int) {
	t.Helper()
	var live int64
	eventually(t, 20*time.Second, "the controller's heap profile", func() (bool, string) {
		var err error
		live, err = liveHeap(port)
		return err == nil, fmt.Sprint(err)
	})
	t.Logf("controller live heap after a collection: %.0f MiB", float64(live)/(1<<20))
	if live > keptHeapLimit {
		t.Errorf("the controller holds %d bytes of heap after the flood hosts answered, more than %d: it keeps their headers", live, keptHeapLimit)
	}
}

func liveHeap(port int) (int64, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap?gc=1&debug=1", port))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errors.Join(sc.Err(), fmt.Errorf("no HeapAlloc in the heap profile (status %s)", resp.Status))
}

// createHostileTenant creates the hostile namespace: its default
// ServiceAccount reads the shared images (the calm registry's pull Secret),
// and "signer" also signs with a cosign key.
func createHostileTenant(t *testing.T, w *faultWorld) {
	t.Helper()
	ctx := context.Background()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hostileNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	private, _ := cosigntest.KeyPair(t, "pw")
	signing := cosigntest.Secret(hostileNamespace, "signing", private, "pw")
	signing.ResourceVersion = ""
	for _, s := range []*corev1.Secret{signing, {ObjectMeta: metav1.ObjectMeta{Name: "registry", Namespace: hostileNamespace},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: dockerConfig(w.f.Addr, registryUser, registryPassword)}}} {
		if _, err := kube.CoreV1().Secrets(hostileNamespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pull := []corev1.LocalObjectReference{{Name: "registry"}}
	for _, sa := range []*corev1.ServiceAccount{
		{ObjectMeta: metav1.ObjectMeta{Name: "default"}, ImagePullSecrets: pull},
		{ObjectMeta: metav1.ObjectMeta{Name: "signer"}, ImagePullSecrets: pull, Secrets: []corev1.ObjectReference{{Name: "signing"}}},
	} {
		if _, err := kube.CoreV1().ServiceAccounts(hostileNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}
