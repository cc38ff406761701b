package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/test/controllertest"
)

// TestPrometheusMetrics: with metrics-protocol prometheus in
// config-observability, the controller serves its reconcile and registry
// metrics on --metrics-port.
func TestPrometheusMetrics(t *testing.T) {
	w := newFaultWorld(t, "metrics")
	port := servePrometheus(t)
	startController(t, "--metrics-port", fmt.Sprint(port))
	w.apply(t)
	w.waitReady(t, 30*time.Second)
	// A builder only a person can mend: its order names a buildpack no
	// store has.
	stalled := w.name + "-stalled"
	w.objects.createBuilder(t, w.ns, stalled, v1alpha1.NamespacedBuilderSpec{BuilderSpec: v1alpha1.BuilderSpec{
		Order: []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/missing"}}}}}})
	var stalledReason string
	eventually(t, 30*time.Second, "the builder naming a missing buildpack to stall", func() (bool, string) {
		b, err := client.BuildsmithV1alpha1().Builders(w.ns).Get(context.Background(), stalled, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if c := b.Status.GetCondition(v1alpha1.ConditionStalled); c.IsTrue() {
			stalledReason = c.Reason
			return true, ""
		}
		return false, fmt.Sprintf("%+v", b.Status.Conditions)
	})

	var body string
	eventually(t, 20*time.Second, "the metrics", func() (bool, string) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		body = string(raw)
		return strings.Contains(body, "buildsmith_reconciles_total") && strings.Contains(body, "buildsmith_registry_requests_total") &&
				hasSample(body, "buildsmith_object_info", `name="`+stalled+`"`, `state="stalled"`),
			fmt.Sprintf("%d bytes, status %s", len(raw), resp.Status)
	})
	for _, want := range [][]string{
		{"buildsmith_reconciles_total", `kind="Builder"`, `outcome="ready"`},
		{"buildsmith_reconciles_total", `kind="ClusterStack"`, `outcome="ready"`},
		{"buildsmith_requeue_delay_seconds_bucket", `kind="ClusterStore"`, `outcome="ready"`},
		{"buildsmith_registry_requests_total", `host="` + w.f.Addr + `"`, `method="PUT"`, `status="2xx"`},
		{"buildsmith_registry_bytes_total", `direction="up"`, `host="` + w.f.Addr + `"`},
		{"buildsmith_turns_queued", `kind="Builder"`},
		{"buildsmith_turns_wait_seconds_bucket", `kind="Builder"`},
		// Each object's state, by namespace and name.
		{"buildsmith_object_info", `kind="Builder"`, `name="` + w.name + `"`, `object_namespace="` + w.ns + `"`,
			`ready="True"`, `reason=""`, `state="ready"`},
		{"buildsmith_object_info", `kind="Builder"`, `name="` + stalled + `"`, `object_namespace="` + w.ns + `"`,
			`ready="False"`, `reason="` + stalledReason + `"`, `state="stalled"`},
		{"buildsmith_object_info", `kind="ClusterStack"`, `name="` + w.name + `"`, `state="ready"`},
		{"buildsmith_objects", `kind="Builder"`, `state="stalled"`},
		{"buildsmith_objects", `kind="ClusterStore"`, `state="ready"`},
		{"buildsmith_last_reconcile_time_seconds", `kind="Builder"`},
		{"buildsmith_reconcile_gap_max_seconds", `kind="ClusterStack"`},
		// The Go runtime's, which the dashboard's pod panels read.
		{"go_memory_used_bytes"},
		{"go_goroutine_count"},
	} {
		if !hasSample(body, want[0], want[1:]...) {
			t.Errorf("metrics lack %s with %v", want[0], want[1:])
		}
	}
	if hasSample(body, "buildsmith_object_info", `kind="ClusterStack"`, `object_namespace=`) {
		t.Error("a cluster-scoped object's series has an object_namespace")
	}
	if t.Failed() {
		var ours []string
		for _, line := range strings.Split(body, "\n") {
			if strings.Contains(line, "buildsmith") {
				ours = append(ours, line)
			}
		}
		t.Logf("buildsmith metrics:\n%s", strings.Join(ours, "\n"))
	}
}

// servePrometheus has the controllers the test starts serve Prometheus
// metrics, and returns a free port for their --metrics-port.
func servePrometheus(t *testing.T) int {
	t.Helper()
	return observe(t, map[string]string{"metrics-protocol": "prometheus"})
}

// observe writes config-observability with data for the controllers the
// test starts (deleted when it ends), and returns a free port for the
// server it turns on.
func observe(t *testing.T, data map[string]string) int {
	t.Helper()
	ctx := context.Background()
	cms := kube.CoreV1().ConfigMaps(systemNamespace)
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "config-observability"},
		Data: data}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cms.Delete(ctx, "config-observability", metav1.DeleteOptions{}) })
	return controllertest.FreePort(t)
}

// hasSample reports whether the Prometheus text has a sample of metric with
// all the label pairs.
func hasSample(body, metric string, labels ...string) bool {
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, metric+"{") {
			continue
		}
		all := true
		for _, l := range labels {
			all = all && strings.Contains(line, l)
		}
		if all {
			return true
		}
	}
	return false
}
