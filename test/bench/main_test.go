// Package bench measures buildsmith from the outside, as test/e2e tests it:
// the controller binary against a real kube-apiserver and etcd (bin/) and a
// real registry whose traffic is counted request by request.
//
// Without BENCH=1 only small smoke versions of the cold-scale scenario and
// of scenario 16 (registry requests per push) run (part of `make test`);
// they assert the structural targets. With
// BENCH=1 (`make bench`) every scenario runs and bench/results.md is
// written. Knobs: BENCH_N (builder counts of scenario 1, default "50,200";
// add 1000 for the large one), BENCH_RUNS (runs per timed figure, default
// 3), BENCH_OUTAGE (registry outage of scenario 3, default 2m),
// BENCH_OUTAGE_RUNS (default 3), BENCH_OUTAGE_N (default 200), BENCH_RL_N
// (builders of scenario 4, default 10), BENCH_RL_TIMEOUT (default 5m),
// BENCH_RL_TRACE (a directory for each rate-limit run's requests and log),
// BENCH_FAULT_N (builders of scenario 6, default 200), BENCH_FAULT_OUTAGE
// (default 90s), BENCH_FAULT_LONG_OUTAGE (scenarios 7 and 8, a longer outage,
// e.g. 10m; none by default), BENCH_FAULT_RUNS (default 3), BENCH_FAULT_LONG_RUNS
// (default 3),
// BENCH_BLIP_N, BENCH_BLIP_NAMESPACES, BENCH_BLIP_FAULT, BENCH_BLIP_RUNS
// (scenario 14: default 1000 builders in 100 namespaces, 60s faults, 1 run),
// BENCH_HOSTILE_HOSTS, BENCH_HOSTILE_MISSING, BENCH_HOSTILE_BIG,
// BENCH_HOSTILE_RUNS, BENCH_HOSTILE_DRAIN, BENCH_HOSTILE_PROFILE (scenario 15:
// default 5000 unreachable hosts, 10000 missing and 200 big Secrets, 1 run,
// a 5m drain; a directory for the controller's heap and goroutine profiles),
// BENCH_PUSH_K, BENCH_PUSH_NEW_LAYERS (scenario 16: default 20 builders per
// phase, 2 new layers in the stack patch),
// BENCH_CONTROLLER_ARGS (extra controller flags), BENCH_MICRO (a file of Go
// benchmark output to include in the report).
package bench

import (
	"context"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/buildsmith/buildsmith/pkg/client/clientset/versioned"
	"github.com/buildsmith/buildsmith/test/controllertest"
	"github.com/buildsmith/buildsmith/test/envtest"
)

const systemNamespace = "buildsmith-system"

var (
	env        *envtest.Env
	client     versioned.Interface
	kube       kubernetes.Interface
	controller string // path of the built controller binary
	full       = os.Getenv("BENCH") == "1"
)

func TestMain(m *testing.M) {
	os.Exit(envtest.Main(func(e *envtest.Env) (int, error) {
		env = e
		builtFrom = commit()
		// The benchmark creates objects fast: no client-side throttling of
		// its own (the controller keeps its defaults, as users run it).
		cfg := *env.Config
		cfg.QPS, cfg.Burst = 1000, 2000
		c, err := controllertest.Setup(env, &cfg, systemNamespace)
		if err != nil {
			return 0, err
		}
		client, kube, controller = c.Client, c.Kube, c.Binary
		// Metrics (the controller's own count of registry requests, refused
		// connections included) and profiling on.
		if _, err := kube.CoreV1().ConfigMaps(systemNamespace).Create(context.Background(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "config-observability"},
			Data:       map[string]string{"metrics-protocol": "prometheus", "runtime-profiling": "enabled"}}, metav1.CreateOptions{}); err != nil {
			return 0, err
		}
		code := m.Run()
		if full {
			if err := writeReport(); err != nil {
				return 0, err
			}
		}
		return code, nil
	}))
}
