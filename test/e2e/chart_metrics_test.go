package e2e

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// TestChartMetrics: by default the chart turns Prometheus metrics on
// (config-observability) and gives them a Service selecting the
// controller's pods on their metrics port; a ServiceMonitor and a PodMonitor
// come when asked, with the labels and interval given, selecting the same
// pods; metrics.enabled=false renders none of it.
func TestChartMetrics(t *testing.T) {
	objects := func(args ...string) map[string]unstructured.Unstructured {
		t.Helper()
		out, err := helm(append([]string{"template", "buildsmith", "charts/buildsmith", "--namespace", "buildsmith"}, args...)...).Output()
		if err != nil {
			t.Fatalf("helm template %q: %v", args, err)
		}
		byKind := map[string]unstructured.Unstructured{}
		for _, doc := range strings.Split(strings.TrimPrefix(string(out), "---\n"), "\n---\n") {
			var u unstructured.Unstructured
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatalf("helm template %q: %v\n%s", args, err, doc)
			}
			if u.GetKind() != "" {
				byKind[u.GetKind()+"/"+u.GetName()] = u
			}
		}
		return byKind
	}
	as := func(u unstructured.Unstructured, into any) {
		t.Helper()
		raw, _ := yaml.Marshal(u.Object)
		if err := yaml.UnmarshalStrict(raw, into); err != nil {
			t.Fatalf("%s: %v", u.GetKind(), err)
		}
	}

	rendered := objects()
	var deployment appsv1.Deployment
	as(rendered["Deployment/buildsmith-controller"], &deployment)
	podLabels := deployment.Spec.Template.Labels
	var config corev1.ConfigMap
	as(rendered["ConfigMap/config-observability"], &config)
	if config.Data["metrics-protocol"] != "prometheus" {
		t.Errorf("config-observability %v, want metrics-protocol prometheus", config.Data)
	}
	var service corev1.Service
	as(rendered["Service/buildsmith-controller-metrics"], &service)
	if len(service.Spec.Ports) != 1 || service.Spec.Ports[0].Port != 9090 || service.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("metrics Service ports %+v, want 9090 to the pods' metrics port", service.Spec.Ports)
	}
	if len(service.Spec.Selector) == 0 || !selects(service.Spec.Selector, podLabels) {
		t.Errorf("metrics Service selects %v, not the controller's pods %v", service.Spec.Selector, podLabels)
	}
	if !hasPort(deployment, "metrics", 9090) {
		t.Error("the controller's container has no port metrics (9090)")
	}
	for key := range rendered {
		if strings.HasPrefix(key, "ServiceMonitor/") || strings.HasPrefix(key, "PodMonitor/") {
			t.Errorf("%s rendered by default", key)
		}
	}

	monitored := objects("--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.podMonitor.enabled=true",
		"--set", "metrics.serviceMonitor.labels.release=kube-prometheus-stack", "--set", "metrics.podMonitor.interval=15s")
	for key, wantInterval := range map[string]string{"ServiceMonitor/buildsmith-controller": "30s", "PodMonitor/buildsmith-controller": "15s"} {
		u, ok := monitored[key]
		if !ok {
			t.Errorf("%s not rendered", key)
			continue
		}
		selector, _, _ := unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
		if len(selector) == 0 || !selects(selector, podLabels) {
			t.Errorf("%s selects %v, not the controller's pods %v", key, selector, podLabels)
		}
		endpoints, _, _ := unstructured.NestedSlice(u.Object, "spec", map[bool]string{true: "endpoints", false: "podMetricsEndpoints"}[u.GetKind() == "ServiceMonitor"])
		if len(endpoints) != 1 || endpoints[0].(map[string]any)["port"] != "metrics" || endpoints[0].(map[string]any)["interval"] != wantInterval {
			t.Errorf("%s endpoints %v, want port metrics every %s", key, endpoints, wantInterval)
		}
		if u.GetKind() == "ServiceMonitor" && u.GetLabels()["release"] != "kube-prometheus-stack" {
			t.Errorf("%s labels %v, want release: kube-prometheus-stack", key, u.GetLabels())
		}
	}

	for key := range objects("--set", "metrics.enabled=false", "--set", "metrics.serviceMonitor.enabled=true") {
		if key == "ConfigMap/config-observability" || strings.HasSuffix(key, "-metrics") || strings.Contains(key, "Monitor/") {
			t.Errorf("%s rendered with metrics.enabled=false", key)
		}
	}
}

// selects reports whether selector matches labels.
func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func hasPort(d appsv1.Deployment, name string, port int32) bool {
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name && p.ContainerPort == port {
				return true
			}
		}
	}
	return false
}
