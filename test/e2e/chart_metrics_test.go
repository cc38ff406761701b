package e2e

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestChartMetrics: by default the chart turns Prometheus metrics on
// (config-observability) and gives them a Service selecting the
// controller's pods on their metrics port; a ServiceMonitor or a PodMonitor
// comes when asked, with the labels, annotations, namespace, interval,
// scrape timeout and honorLabels given, selecting the same pods in the
// release's namespace; both at once are refused (every sum would count
// twice); metrics.enabled=false renders none of it.
func TestChartMetrics(t *testing.T) {
	rendered := renderObjects(t)
	var deployment appsv1.Deployment
	decodeAs(t, rendered["Deployment/buildsmith-controller"], &deployment)
	podLabels := deployment.Spec.Template.Labels
	var config corev1.ConfigMap
	decodeAs(t, rendered["ConfigMap/config-observability"], &config)
	if config.Data["metrics-protocol"] != "prometheus" {
		t.Errorf("config-observability %v, want metrics-protocol prometheus", config.Data)
	}
	var service corev1.Service
	decodeAs(t, rendered["Service/buildsmith-controller-metrics"], &service)
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

	// One monitor at a time (both would count every series twice), each
	// with the settings a Prometheus Operator setup asks of it.
	for _, m := range []struct{ key, value, interval string }{
		{"ServiceMonitor/buildsmith-controller", "serviceMonitor", "30s"},
		{"PodMonitor/buildsmith-controller", "podMonitor", "15s"},
	} {
		set := func(kv string) []string { return []string{"--set", "metrics." + m.value + "." + kv} }
		args := slices.Concat(set("enabled=true"), set("labels.release=kube-prometheus-stack"), set("interval="+m.interval),
			set("namespace=monitoring"), set("scrapeTimeout=10s"), set("honorLabels=true"), set("annotations.team=platform"))
		u, ok := renderObjects(t, args...)[m.key]
		if !ok {
			t.Errorf("%s not rendered", m.key)
			continue
		}
		selector, _, _ := unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
		if len(selector) == 0 || !selects(selector, podLabels) {
			t.Errorf("%s selects %v, not the controller's pods %v", m.key, selector, podLabels)
		}
		namespaces, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "namespaceSelector", "matchNames")
		if u.GetNamespace() != "monitoring" || !slices.Equal(namespaces, []string{"buildsmith"}) {
			t.Errorf("%s in namespace %q looking in %v, want in monitoring looking in the release's (buildsmith)", m.key, u.GetNamespace(), namespaces)
		}
		endpoints, _, _ := unstructured.NestedSlice(u.Object, "spec", map[bool]string{true: "endpoints", false: "podMetricsEndpoints"}[u.GetKind() == "ServiceMonitor"])
		if len(endpoints) != 1 {
			t.Errorf("%s endpoints %v, want one", m.key, endpoints)
			continue
		}
		e := endpoints[0].(map[string]any)
		if e["port"] != "metrics" || e["interval"] != m.interval || e["scrapeTimeout"] != "10s" || e["honorLabels"] != true {
			t.Errorf("%s endpoint %v, want port metrics every %s, scrapeTimeout 10s, honorLabels", m.key, e, m.interval)
		}
		if u.GetLabels()["release"] != "kube-prometheus-stack" || u.GetAnnotations()["team"] != "platform" {
			t.Errorf("%s labels %v, annotations %v: want release: kube-prometheus-stack, team: platform", m.key, u.GetLabels(), u.GetAnnotations())
		}
	}
	out, err := helm("template", "buildsmith", "charts/buildsmith", "--set", "metrics.serviceMonitor.enabled=true",
		"--set", "metrics.podMonitor.enabled=true").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "count twice") {
		t.Errorf("both monitors enabled: %v, want the chart to refuse, saying why:\n%s", err, out)
	}

	for key := range renderObjects(t, "--set", "metrics.enabled=false", "--set", "metrics.serviceMonitor.enabled=true") {
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
