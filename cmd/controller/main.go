// Command controller runs the buildsmith controllers: ClusterStore,
// ClusterStack, ClusterLifecycle, Builder and ClusterBuilder.
//
// In a cluster it needs nothing but its ServiceAccount; outside, pass
// --kubeconfig. It reads SYSTEM_NAMESPACE (default "buildsmith") for its
// ConfigMaps and leader-election Leases; the knative ConfigMaps
// (config-logging, config-observability, config-leader-election) are optional.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"strconv"

	"k8s.io/client-go/kubernetes"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/injection"
	"knative.dev/pkg/injection/sharedmain"
	"knative.dev/pkg/signals"
	"knative.dev/pkg/system"

	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/cosign"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/pkg/reconciler/builder"
	"github.com/buildsmith/buildsmith/pkg/reconciler/clusterlifecycle"
	"github.com/buildsmith/buildsmith/pkg/reconciler/clusterstack"
	"github.com/buildsmith/buildsmith/pkg/reconciler/clusterstore"
	"github.com/buildsmith/buildsmith/pkg/registry"
	"github.com/buildsmith/buildsmith/pkg/replicas"
)

const component = "buildsmith-controller"

// version is set at release builds (-ldflags -X main.version=…); it is
// recorded in the builder images' metadata.
var version = "dev"

func main() {
	opts := reconciler.DefaultOptions()
	opts.AddFlags(flag.CommandLine)
	var regOpts registry.Options
	flag.DurationVar(&regOpts.Timeout, "registry-timeout", 0, "deadline of one registry read, retries included (default 30s)")
	flag.DurationVar(&regOpts.WriteTimeout, "registry-write-timeout", 0, "deadline of one image push (default none: a push that moves is never cut)")
	flag.DurationVar(&regOpts.AnswerTimeout, "registry-answer-timeout", 0, "how long a registry read waits for an answer before the registry counts as hanging (default 5s; writes wait 60s after their upload)")
	flag.DurationVar(&regOpts.StallTimeout, "registry-stall-timeout", 0, "an upload the registry takes no byte of for this long is cut (default 30s; a download is cut after the answer timeout without a byte)")
	flag.Func("insecure-registry", "a registry (HOST[:PORT], as in image references) that may be spoken to over plain HTTP; repeatable. Allowed loopback registries may too, no other may", func(v string) error {
		regOpts.InsecureRegistries = append(regOpts.InsecureRegistries, v)
		return nil
	})
	flag.BoolVar(&regOpts.LoopbackRegistries, "allow-loopback-registries", false,
		"allow registries and token services on loopback addresses (localhost, 127.0.0.0/8, ::1: the controller's own pod), over plain HTTP too; for development and tests. Off, an object naming one is refused (RegistryNotAllowed)")
	flag.Func("registry-ca-file", "a PEM file of CA certificates to trust beside the system's, for registries a private CA signed; repeatable", func(path string) error {
		pem, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := registry.CheckCACertificates(pem); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		regOpts.CACertificates = append(append(regOpts.CACertificates, pem...), '\n')
		return nil
	})
	var signing builder.SigningLimits
	flag.Int64Var(&signing.MaxScryptMemory, "max-signing-key-memory", cosign.DefaultMaxScryptMemory,
		"most memory (bytes) scrypt may take to decrypt one cosign key (128·N·r); a key needing more is refused (SigningKeyTooCostly)")
	flag.IntVar(&signing.MaxKeys, "max-signing-keys", builder.DefaultMaxSigningKeys, "most decrypted signing keys kept, the least recently used dropped first")
	flag.DurationVar(&signing.KeyIdle, "signing-key-idle", builder.DefaultSigningKeyIdle,
		"how long a decrypted signing key nobody uses is kept; keep it above --resync-interval")
	regOpts.Circuits.HostsPerTenant = 16
	flag.Func("max-failing-registries-per-namespace",
		"most failing registries the objects of one namespace (or the cluster kinds, together) wait on to answer again, each probed about every second; beyond, they retry on their own backoff (default 16)",
		func(v string) error {
			n, err := strconv.Atoi(v)
			if err == nil && n < 1 {
				err = errors.New("must be at least 1")
			}
			regOpts.Circuits.HostsPerTenant = n
			return err
		})
	flag.IntVar(&regOpts.NamedHosts, "registry-metric-hosts", 256,
		"most registries counted under their own name in the metrics (host label), given as they first answer; the others count as host=\"other\"")
	flag.Func("registry-remembered-blobs", "most (repository, blob) pairs remembered as held, so that pushes skip asking about them, each about 250 bytes; 0: none, every push asks (default 65536)",
		func(v string) error {
			n, err := strconv.Atoi(v)
			if err == nil && n < 0 {
				err = errors.New("must not be negative")
			}
			regOpts.RememberedBlobs = cmp.Or(n, -1) // the option's 0 is its default
			return err
		})
	maxLayers := flag.Int("max-builder-layers", cnb.DefaultMaxLayers,
		"most layers a builder image may have, its build image's included; more stalls the builder with TooManyLayers (container runtimes refuse much deeper images)")
	disableHA := flag.Bool("disable-ha", false, "run without leader election (for local runs)")
	healthProbes := flag.Bool("health-probes", true, "serve readiness and liveness probes on :8080")
	profilingPort := flag.Int("profiling-port", 8008, "port of the profiling server when profiling is enabled in config-observability; 0 picks a free one")
	metricsPort := flag.Int("metrics-port", 9090, "port of the Prometheus endpoint when enabled in config-observability (1024-65535)")
	workers := flag.Int("workers", 4, "reconciles run at once per kind; they mostly wait on registries")
	flag.DurationVar(&regOpts.MaxRetryAfterWait, "registry-max-retry-after-wait", 0,
		"longest Retry-After a registry call waits out before sending again, holding every call to that repository (or registry, for answers about none) meanwhile; longer ones requeue (default 10s, negative: never wait)")

	// Parses every flag, sharedmain's (--kubeconfig, --server,
	// --kube-api-qps, --kube-api-burst) included.
	cfg := injection.ParseAndGetRESTConfigOrDie()
	// No client-side rate limit by default: the API server's priority and
	// fairness (on since Kubernetes 1.20) is what protects it, and its 429s
	// are retried on the policy's terms (StatusWrites). A token bucket here
	// only queued status writes behind each other: builders failing at once
	// showed their reason seconds later (bench/results.md § 6 measures the
	// reporting). controller-runtime and Flux made the same
	// choice. --kube-api-qps/--kube-api-burst (or KUBE_API_QPS) still set one.
	if cfg.QPS == 0 {
		cfg.QPS = -1
	}
	controller.DefaultThreadsPerController = *workers

	if os.Getenv("SYSTEM_NAMESPACE") == "" {
		mustSetenv("SYSTEM_NAMESPACE", "buildsmith")
	}
	// knative reads these ports from the environment only; a flag given
	// explicitly wins over the environment, the environment over defaults.
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for env, f := range map[string]struct {
		name  string
		value int
	}{"PROFILING_PORT": {"profiling-port", *profilingPort}, "METRICS_PROMETHEUS_PORT": {"metrics-port", *metricsPort}} {
		if set[f.name] || os.Getenv(env) == "" {
			mustSetenv(env, strconv.Itoa(f.value))
		}
	}

	ctx := signals.NewContext()
	if !*disableHA {
		// knative's bucket election, with replicas taking their share of
		// the buckets (pkg/replicas). sharedmain would set up its own elector
		// builder: it is told HA is off, and finds ours in ctx.
		var (
			stop func()
			err  error
		)
		if ctx, stop, err = replicas.WithSharedBuckets(ctx, kubernetes.NewForConfigOrDie(cfg), system.Namespace(), component); err != nil {
			log.Fatalf("leader election: %v", err)
		}
		defer stop() // deletes this replica's Lease once sharedmain has returned
	}
	ctx = sharedmain.WithHADisabled(ctx)
	if !*healthProbes {
		ctx = sharedmain.WithHealthProbesDisabled(ctx)
	}
	// The registry client (its circuits' probers, lazily read layers) lives
	// until the reconciles in flight have drained, not just until the
	// signal: a push under way at SIGTERM needs it to finish.
	registryCtx, stopRegistry := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRegistry()
	// A waiter renews its wait at each safety-net requeue, at most
	// --retry-max-delay (+20 %) apart.
	regOpts.Circuits.WaitExpiry = 3 * opts.RetryMaxDelay
	client := registry.New(registryCtx, regOpts)
	if err := registerRegistryMetrics(client); err != nil {
		log.Fatalf("registering metrics: %v", err)
	}
	builders := builder.Config{Registry: client, Options: opts, Version: version,
		Lifecycle: builder.NewLifecycleSource(opts.ResyncInterval), Signing: signing, MaxLayers: *maxLayers}
	ctx, drain := reconciler.WithDrain(ctx)
	sharedmain.MainWithConfig(ctx, component, cfg,
		clusterstore.NewController(client, opts),
		clusterstack.NewController(client, opts),
		clusterlifecycle.NewController(client, opts),
		builder.NewBuilderController(builders),
		builder.NewClusterBuilderController(builders),
	)
	// The reconciles in flight (a push under way) end before the process
	// does; the pod's termination grace period bounds the wait.
	drain.Wait()
}

func mustSetenv(key, value string) {
	if err := os.Setenv(key, value); err != nil {
		log.Fatalf("setting %s: %v", key, err)
	}
}
