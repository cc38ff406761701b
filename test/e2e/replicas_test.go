package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/test/controllertest"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestReplicas installs the chart with replicas=2 and runs its two
// controllers as its Deployment would (its arguments and environment, its
// ServiceAccount, its config-leader-election: 2 buckets, 15 s leases): each
// leads one bucket of every reconciler, and both reconcile ClusterStacks,
// none twice. One is SIGKILLed; the stacks changed and created meanwhile all
// become Ready, the other taking its buckets over. Its replacement (the
// Deployment starts one) gets its share back and reconciles again.
func TestReplicas(t *testing.T) {
	ctx := context.Background()
	const ns, release = "buildsmith-replicas", "replicas"
	if out, err := helm("install", release, "charts/buildsmith", "--kubeconfig", env.Kubeconfig,
		"--namespace", ns, "--create-namespace", "--set", "replicas=2", "--set", "crds.enabled=false").CombinedOutput(); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		_, _ = helm("uninstall", release, "--kubeconfig", env.Kubeconfig, "--namespace", ns).CombinedOutput()
	})
	// Metrics on by default: the chart writes config-observability.
	if cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, "config-observability", metav1.GetOptions{}); err != nil ||
		cm.Data["metrics-protocol"] != "prometheus" {
		t.Fatalf("config-observability: %v %v, want metrics-protocol prometheus from the chart", cm.Data, err)
	}

	le, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, "config-leader-election", metav1.GetOptions{})
	if err != nil || le.Data["buckets"] != "2" || le.Data["lease-duration"] != "15s" {
		t.Fatalf("config-leader-election: %v %v, want 2 buckets and 15s leases", le.Data, err)
	}

	// The pods' command line and environment, from the Deployment.
	deployment, err := kube.AppsV1().Deployments(ns).Get(ctx, release+"-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := deployment.Spec.Replicas; r == nil || *r != 2 {
		t.Fatalf("the Deployment has %v replicas", r)
	}
	container := deployment.Spec.Template.Spec.Containers[0]
	var env []string // what the downward API gives the pods
	for _, e := range container.Env {
		switch {
		case e.Name == "SYSTEM_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil &&
			e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			// controllertest sets it.
		case e.Name == "GOMEMLIMIT" && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil &&
			e.ValueFrom.ResourceFieldRef.Resource == "limits.memory" && !container.Resources.Limits.Memory().IsZero():
			env = append(env, fmt.Sprintf("GOMEMLIMIT=%d", container.Resources.Limits.Memory().Value()))
		default:
			t.Fatalf("the pods' environment has %+v: run the controllers with it", e)
		}
	}
	kubeconfig := kubeconfigAs(t, "system:serviceaccount:"+ns+":"+deployment.Spec.Template.Spec.ServiceAccountName)
	pod := func() *controllertest.Process {
		return controllertest.Start(t, controller, controllertest.Options{Kubeconfig: kubeconfig, Namespace: ns,
			Args: container.Args, Env: env})
	}

	f := registrytest.New(t)
	labels := map[string]string{"io.buildpacks.stack.id": "io.buildpacks.stacks.replicas"}
	f.PushImage("stack/build:1", labels, "CNB_USER_ID=1000", "CNB_GROUP_ID=1000")
	f.PushImage("stack/run:1", labels)
	f.PushImage("stack/run:2", labels)
	run2 := f.Addr + "/stack/run:2"
	stack := storeStack{Addr: f.Addr, StackID: "io.buildpacks.stacks.replicas"}
	stacks := client.BuildsmithV1alpha1().ClusterStacks()
	var names []string
	t.Cleanup(func() {
		for _, name := range names {
			_ = stacks.Delete(ctx, name, metav1.DeleteOptions{})
		}
	})
	create := func(n int) {
		t.Helper()
		for range n {
			name := fmt.Sprintf("replicas-%02d", len(names)+1)
			if _, err := stacks.Create(ctx, &v1alpha1.ClusterStack{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: stack.stackSpec("stack/run:1")}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			names = append(names, name)
		}
	}
	allReady := func(timeout time.Duration) time.Duration {
		t.Helper()
		return eventually(t, timeout, "every ClusterStack Ready at its generation", func() (bool, string) {
			var waiting []string
			for _, name := range names {
				s, err := stacks.Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				if !s.Status.IsReady() || s.Status.ObservedGeneration != s.Generation {
					waiting = append(waiting, name)
				}
			}
			return len(waiting) == 0, fmt.Sprintf("%d of %d not Ready: %v", len(waiting), len(names), waiting)
		})
	}

	// Two pods: each leads one bucket of each reconciler.
	a, b := pod(), pod()
	took := eventually(t, 60*time.Second, "each replica leading one bucket of every reconciler", func() (bool, string) {
		return leadEach(a, 1) && leadEach(b, 1), fmt.Sprintf("first %v, second %v", led(a), led(b))
	})
	t.Logf("both replicas lead their share %v after they started", took.Round(100*time.Millisecond))

	// Both reconcile, each its own keys: each stack's one reconcile to
	// Ready was done by one replica or the other.
	created := time.Now()
	create(20)
	allReady(30 * time.Second)
	t.Logf("20 ClusterStacks created and Ready in %v", time.Since(created).Round(100*time.Millisecond))
	readyA, readyB := readyReconciles(t, a), readyReconciles(t, b)
	t.Logf("ClusterStacks reconciled to Ready: first replica %d, second %d", readyA, readyB)
	if readyA == 0 || readyB == 0 || readyA+readyB != 20 {
		t.Errorf("ClusterStacks reconciled to Ready by the replicas: %d and %d, want both some and 20 in all", readyA, readyB)
	}
	// Each stack's state is reported by the replica leading it, once.
	eventually(t, 10*time.Second, "each ClusterStack reported ready by one replica", func() (bool, string) {
		byA, byB := reportedStacks(a), reportedStacks(b)
		return reportedOnce(names, byA, byB), fmt.Sprintf("first %v, second %v", byA, byB)
	})

	// SIGKILL the first, as when its node dies. Every stack changes (half
	// of them are the dead replica's) and ten are new: all become Ready.
	a.Kill()
	killed := time.Now()
	for _, name := range names {
		s, err := stacks.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Spec.RunImage.Image = run2
		if _, err := stacks.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(10)
	allReady(60 * time.Second)
	t.Logf("30 ClusterStacks (20 changed, 10 new) Ready %v after the first replica was killed",
		time.Since(killed).Round(100*time.Millisecond))
	eventually(t, 10*time.Second, "the second replica leading every bucket", func() (bool, string) {
		return leadEach(b, 2), fmt.Sprint(led(b))
	})
	eventually(t, 10*time.Second, "every ClusterStack reported ready by the second replica", func() (bool, string) {
		byB := reportedStacks(b)
		return reportedOnce(names, byB), fmt.Sprint(byB)
	})
	for _, name := range names[:20] {
		s, _ := stacks.Get(ctx, name, metav1.GetOptions{})
		if s.Status.RunImage.Image != run2 || s.Status.ObservedGeneration != 2 {
			t.Errorf("%s: run image %q at generation %d, want %s at 2", name, s.Status.RunImage.Image, s.Status.ObservedGeneration, run2)
		}
	}
	readyB2 := readyReconciles(t, b)
	t.Logf("the second replica reconciled %d ClusterStacks to Ready after the kill", readyB2-readyB)

	// The replacement pod gets its share back and reconciles.
	c := pod()
	took = eventually(t, 60*time.Second, "the replacement leading its share", func() (bool, string) {
		return leadEach(b, 1) && leadEach(c, 1), fmt.Sprintf("second %v, replacement %v", led(b), led(c))
	})
	t.Logf("the replacement leads its share %v after it started (%v after the kill)", took.Round(100*time.Millisecond),
		time.Since(killed).Round(100*time.Millisecond))
	// Taking its buckets, it reconciled their stacks once more; then the
	// next ten are each reconciled once, by one replica or the other.
	readyB3, readyC := settled(t, b), settled(t, c)
	create(10)
	allReady(30 * time.Second)
	readyB4, readyC2 := readyReconciles(t, b), readyReconciles(t, c)
	t.Logf("10 new ClusterStacks reconciled to Ready: second replica %d, replacement %d (%d on taking its buckets)",
		readyB4-readyB3, readyC2-readyC, readyC)
	if readyB4 == readyB3 || readyC2 == readyC || readyB4-readyB3+readyC2-readyC != 10 {
		t.Errorf("the 10 new ClusterStacks reconciled to Ready by the second replica %d times, by the replacement %d: want both some and 10 in all",
			readyB4-readyB3, readyC2-readyC)
	}
}

// kubeconfigAs writes a kubeconfig of the envtest API server that acts as
// user (impersonated).
func kubeconfigAs(t *testing.T, user string) string {
	t.Helper()
	config, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, auth := range config.AuthInfos {
		auth.Impersonate = user
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*config, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// scrape reads a controller's Prometheus metrics ("" until it serves them).
func scrape(p *controllertest.Process) string {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", p.MetricsPort))
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return string(raw)
}

// samples are the values of a metric's samples having all the label pairs,
// by their labels.
func samples(body, metric string, labels ...string) map[string]float64 {
	found := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, metric+"{")
		if !ok {
			continue
		}
		all := true
		for _, l := range labels {
			all = all && strings.Contains(rest, l)
		}
		i := strings.LastIndex(rest, "} ")
		if !all || i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(rest[i+2:]), 64); err == nil {
			found[rest[:i]] = v
		}
	}
	return found
}

// led is how many buckets a replica leads, by reconciler (its
// buildsmith_leader_buckets gauge).
func led(p *controllertest.Process) []string {
	var out []string
	for labels, v := range samples(scrape(p), "buildsmith_leader_buckets") {
		_, r, _ := strings.Cut(labels, `reconciler="`)
		r = strings.TrimSuffix(r[:strings.Index(r, `"`)], ".reconciler")
		out = append(out, fmt.Sprintf("%s:%v", r[strings.LastIndex(r, ".")+1:], v))
	}
	sort.Strings(out)
	return out
}

// reportedStacks are the states of this test's ClusterStacks a replica
// reports in buildsmith_object_info, by name.
func reportedStacks(p *controllertest.Process) map[string]string {
	found := map[string]string{}
	for labels := range samples(scrape(p), "buildsmith_object_info", `kind="ClusterStack"`, `name="replicas-`) {
		_, name, _ := strings.Cut(labels, `name="`)
		_, state, _ := strings.Cut(labels, `state="`)
		found[name[:strings.Index(name, `"`)]] = state[:strings.Index(state, `"`)]
	}
	return found
}

// reportedOnce: each of names is reported ready by exactly one of the
// replicas' reports, and nothing else is.
func reportedOnce(names []string, reports ...map[string]string) bool {
	seen := map[string]int{}
	for _, r := range reports {
		for name, state := range r {
			if state != "ready" {
				return false
			}
			seen[name]++
		}
	}
	for _, name := range names {
		if seen[name] != 1 {
			return false
		}
	}
	return len(seen) == len(names)
}

// reconcilers is how many reconcilers the controller runs: ClusterStore,
// Buildpack, ClusterStack, ClusterLifecycle, Builder, ClusterBuilder,
// Receiver.
const reconcilers = 7

// leadEach: the replica leads n buckets of each reconciler.
func leadEach(p *controllertest.Process, n float64) bool {
	got := samples(scrape(p), "buildsmith_leader_buckets")
	if len(got) != reconcilers {
		return false
	}
	for _, v := range got {
		if v != n {
			return false
		}
	}
	return true
}

// settled is readyReconciles once it has not changed for a second.
func settled(t *testing.T, p *controllertest.Process) int {
	t.Helper()
	last := -1
	eventually(t, 10*time.Second, "reconciles settled", func() (bool, string) {
		n := readyReconciles(t, p)
		if n == last {
			return true, ""
		}
		last = n
		time.Sleep(time.Second)
		return false, fmt.Sprint(n, " reconciles")
	})
	return last
}

// readyReconciles is how many ClusterStack reconciles a replica ended Ready.
func readyReconciles(t *testing.T, p *controllertest.Process) int {
	t.Helper()
	total := 0.0
	for _, v := range samples(scrape(p), "buildsmith_reconciles_total", `kind="ClusterStack"`, `outcome="ready"`) {
		total += v
	}
	return int(total)
}
