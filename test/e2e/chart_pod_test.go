package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"knative.dev/pkg/logging"
)

// controllerComponent is the controller's name to knative (cmd/controller):
// config-logging's loglevel.<component> key is its level.
const controllerComponent = "buildsmith-controller"

// podValues sets every value of the pod a platform team running
// cert-manager or Flux expects to set.
const podValues = `
workers: 8
logging: {level: debug, format: console}
extraArgs: [--kube-api-qps=50]
extraEnv:
- {name: HTTPS_PROXY, value: "http://proxy.example:3128"}
- {name: NO_PROXY, value: "10.96.0.1,.svc"}
serviceAccount:
  annotations: {eks.amazonaws.com/role-arn: "arn:aws:iam::123456789012:role/buildsmith"}
podAnnotations: {team.example/owner: platform}
podLabels: {team.example/tier: build}
imagePullSecrets: [{name: mirror-pull}]
priorityClassName: system-cluster-critical
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]
topologySpreadConstraints:
- {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule,
   labelSelector: {matchLabels: {app.kubernetes.io/component: controller}}}
replicas: 2
probes:
  liveness: {initialDelaySeconds: 90, failureThreshold: 6}
global: {imageRegistry: mirror.example}
`

// TestChartPodValues: the chart passes the pod settings cert-manager's
// users expect (workers, log level and format, extra arguments and
// environment, pod metadata, pull Secrets, priority, affinity, spreading,
// probe timings, ServiceAccount annotations) without losing its own, and
// the config-logging it writes is one knative reads as written.
func TestChartPodValues(t *testing.T) {
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(podValues), 0o644); err != nil {
		t.Fatal(err)
	}
	rendered := renderObjects(t, "--values", values)
	var d appsv1.Deployment
	decodeAs(t, rendered["Deployment/buildsmith-controller"], &d)
	pod := d.Spec.Template
	c := pod.Spec.Containers[0]
	for _, want := range []string{"--workers=8", "--kube-api-qps=50", "--resync-interval=10m"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("controller arguments lack %s: %q", want, c.Args)
		}
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["HTTPS_PROXY"] != "http://proxy.example:3128" || env["NO_PROXY"] == "" || !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "SYSTEM_NAMESPACE" && e.ValueFrom != nil
	}) {
		t.Errorf("controller environment %+v: want the extra variables beside the chart's SYSTEM_NAMESPACE", c.Env)
	}
	if pod.Annotations["team.example/owner"] != "platform" || pod.Annotations["checksum/leader-election"] == "" {
		t.Errorf("pod annotations %v: want the extra one beside the chart's checksums", pod.Annotations)
	}
	if pod.Labels["team.example/tier"] != "build" || pod.Labels["app.kubernetes.io/component"] != "controller" {
		t.Errorf("pod labels %v: want the extra one beside the chart's", pod.Labels)
	}
	spec := pod.Spec
	if len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != "mirror-pull" || spec.PriorityClassName != "system-cluster-critical" {
		t.Errorf("pull Secrets %v, priority class %q", spec.ImagePullSecrets, spec.PriorityClassName)
	}
	if a := spec.Affinity; a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		t.Errorf("affinity %+v, want the node affinity given", a)
	}
	if len(spec.TopologySpreadConstraints) != 1 || spec.TopologySpreadConstraints[0].TopologyKey != "topology.kubernetes.io/zone" {
		t.Errorf("topology spread %+v, want the one given in place of the chart's spreading over nodes", spec.TopologySpreadConstraints)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" || p.InitialDelaySeconds != 90 || p.FailureThreshold != 6 {
		t.Errorf("liveness probe %+v, want /health after 90 s, 6 failures", p)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readiness" || p.PeriodSeconds != 10 {
		t.Errorf("readiness probe %+v, want /readiness every 10 s", p)
	}
	var sa corev1.ServiceAccount
	decodeAs(t, rendered["ServiceAccount/buildsmith-controller"], &sa)
	if sa.Annotations["eks.amazonaws.com/role-arn"] == "" {
		t.Errorf("ServiceAccount annotations %v", sa.Annotations)
	}
	checkConfigLogging(t, rendered, "debug", "console")

	// By default: the chart's own spreading of replicas over nodes, info
	// logs as JSON, no extra argument.
	defaults := renderObjects(t, "--set", "replicas=2")
	decodeAs(t, defaults["Deployment/buildsmith-controller"], &d)
	if s := d.Spec.Template.Spec.TopologySpreadConstraints; len(s) != 1 || s[0].TopologyKey != "kubernetes.io/hostname" {
		t.Errorf("default topology spread %+v, want replicas spread over nodes", s)
	}
	if args := d.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--workers=4") {
		t.Errorf("default arguments %q lack --workers=4", args)
	}
	checkConfigLogging(t, defaults, "info", "json")

	for _, bad := range []struct{ set, mentions string }{
		{"logging.level=verbose", "level"},
		{"logging.format=text", "format"},
		{"extraArgs={workers=8}", "extraArgs"},
		{"workers=0", "workers"},
		{"probes.liveness.periodSeconds=0", "periodSeconds"},
		{"podLabels.app\\.kubernetes\\.io/component=other", "podLabels: app.kubernetes.io/component is one of the chart's own"},
		{"podAnnotations.checksum/leader-election=x", "podAnnotations: checksum/leader-election is the chart's own"},
	} {
		out, err := helm("template", "buildsmith", "charts/buildsmith", "--set", bad.set).CombinedOutput()
		if err == nil || !strings.Contains(string(out), bad.mentions) {
			t.Errorf("--set %s: %v, want a schema error naming %s:\n%s", bad.set, err, bad.mentions, out)
		}
	}
}

// checkConfigLogging checks that the chart's config-logging is one knative
// reads as written: the controller's level, and a zap configuration that
// builds a logger in the format asked (knative falls back to its own,
// silently, on one that does not).
func checkConfigLogging(t *testing.T, rendered map[string]unstructured.Unstructured, level, format string) {
	t.Helper()
	var cm corev1.ConfigMap
	decodeAs(t, rendered["ConfigMap/config-logging"], &cm)
	cfg, err := logging.NewConfigFromConfigMap(&cm)
	if err != nil {
		t.Fatalf("config-logging: %v", err)
	}
	if got := cfg.LoggingLevel[controllerComponent].String(); got != level {
		t.Errorf("config-logging level of %s: %s, want %s", controllerComponent, got, level)
	}
	var zc zap.Config
	if err := json.Unmarshal([]byte(cfg.LoggingConfig), &zc); err != nil {
		t.Fatalf("zap-logger-config: %v", err)
	}
	if _, err := zc.Build(); err != nil || zc.Encoding != format {
		t.Errorf("zap-logger-config builds %v with encoding %q, want a logger in %s", err, zc.Encoding, format)
	}
}
