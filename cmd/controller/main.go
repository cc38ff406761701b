// Command controller runs the buildsmith controllers: ClusterStore,
// Buildpack, ClusterStack, ClusterLifecycle, Builder, ClusterBuilder and
// Receiver (whose webhooks it serves on --receiver-port).
//
// In a cluster it needs nothing but its ServiceAccount; outside, pass
// --kubeconfig. It reads SYSTEM_NAMESPACE (default "buildsmith") for its
// ConfigMaps and leader-election Leases; the knative ConfigMaps
// (config-logging, config-observability, config-leader-election) are optional.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/injection"
	"knative.dev/pkg/injection/sharedmain"
	"knative.dev/pkg/signals"
	"knative.dev/pkg/system"

	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/cosign"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/pkg/reconciler/builder"
	"github.com/buildsmith/buildsmith/pkg/reconciler/buildpack"
	"github.com/buildsmith/buildsmith/pkg/reconciler/clusterlifecycle"
	"github.com/buildsmith/buildsmith/pkg/reconciler/clusterstack"
	"github.com/buildsmith/buildsmith/pkg/reconciler/clusterstore"
	"github.com/buildsmith/buildsmith/pkg/reconciler/receiver"
	"github.com/buildsmith/buildsmith/pkg/registry"
	"github.com/buildsmith/buildsmith/pkg/replicas"
	"github.com/buildsmith/buildsmith/pkg/turns"
)

const component = "buildsmith-controller"

// version is set at release builds (-ldflags -X main.version=…); it is
// recorded in the builder images' metadata.
var version = "dev"

func main() {
	opts := reconciler.DefaultOptions()
	opts.AddFlags(flag.CommandLine)
	var regOpts registry.Options
	regOpts.AddFlags(flag.CommandLine)
	receivers := receiver.DefaultServerOptions()
	receivers.AddFlags(flag.CommandLine)
	var own flags
	own.add(flag.CommandLine)

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
	controller.DefaultThreadsPerController = own.workers
	own.setEnv()

	ctx := signals.NewContext()
	if !own.disableHA {
		var stop func()
		ctx, stop = withLeaderElection(ctx, cfg)
		defer stop() // deletes this replica's Lease once sharedmain has returned
	}
	ctx = sharedmain.WithHADisabled(ctx)
	if !own.healthProbes {
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
		Lifecycle: builder.NewLifecycleSource(opts.ResyncInterval), Signing: own.signing, MaxLayers: own.maxLayers, Attestations: own.attestations,
		Flattening: own.flatteningSetUp()}
	// One set of Secret watches for the controllers, and their queues for
	// the Receivers' notifications.
	ctx = reconciler.WithSecretWatches(ctx)
	ctx = reconciler.WithEnqueuers(ctx)
	ctx, drain := turns.WithDrain(ctx)
	sharedmain.MainWithConfig(ctx, component, cfg,
		clusterstore.NewController(client, opts),
		buildpack.NewController(client, opts),
		clusterstack.NewController(client, opts),
		clusterlifecycle.NewController(client, opts),
		builder.NewBuilderController(builders),
		builder.NewClusterBuilderController(builders),
		receiver.NewController(client, opts, receivers),
	)
	// The reconciles in flight (a push under way) end before the process
	// does; the pod's termination grace period bounds the wait.
	drain.Wait()
}

// flatteningSetUp is how builders flatten, with the scratch directory
// cleared of what a crash left.
func (f *flags) flatteningSetUp() builder.Flattening {
	if err := f.flattening.RemoveStale(); err != nil {
		log.Printf("removing stale flattened layers from --scratch-dir: %v", err)
	}
	if f.rememberedFlattened > 0 {
		f.flattening.Memory = builder.NewFlattenMemory(f.rememberedFlattened)
	}
	f.flattening.Slots = builder.NewFlattenSlots(f.concurrentFlattens, f.maxFlattenDuration)
	return f.flattening
}

// withLeaderElection returns ctx with knative's bucket election, replicas
// taking their share of the buckets (pkg/replicas), and what stops it.
// sharedmain would set up its own elector builder: it is told HA is off,
// and finds ours in ctx.
func withLeaderElection(ctx context.Context, cfg *rest.Config) (context.Context, func()) {
	ctx, stop, err := replicas.WithSharedBuckets(ctx, kubernetes.NewForConfigOrDie(cfg), system.Namespace(), component)
	if err != nil {
		log.Fatalf("leader election: %v", err)
	}
	return ctx, stop
}

// flags are the controller's own flags: those of the reconcilers
// (reconciler.Options) and of the registry client (registry.Options) are
// theirs.
type flags struct {
	signing      builder.SigningLimits
	maxLayers    int
	attestations string
	flattening   builder.Flattening
	// rememberedFlattened is how many flattened layers are remembered.
	rememberedFlattened int
	concurrentFlattens  int
	maxFlattenDuration  time.Duration
	disableHA           bool
	healthProbes        bool
	profilingPort       int
	metricsPort         int
	workers             int
}

func (f *flags) add(fs *flag.FlagSet) {
	fs.Int64Var(&f.signing.MaxScryptMemory, "max-signing-key-memory", cosign.DefaultMaxScryptMemory,
		"most memory (bytes) scrypt may take to decrypt one cosign key (128·N·r); a key needing more is refused (SigningKeyTooCostly)")
	fs.IntVar(&f.signing.MaxKeys, "max-signing-keys", builder.DefaultMaxSigningKeys, "most decrypted signing keys kept, the least recently used dropped first")
	fs.DurationVar(&f.signing.KeyIdle, "signing-key-idle", builder.DefaultSigningKeyIdle,
		"how long a decrypted signing key nobody uses is kept; keep it above --resync-interval")
	fs.IntVar(&f.signing.MaxSignatureLayers, "max-signature-layers", builder.DefaultMaxSignatureLayers,
		"most layers (one per signature) of a signature image (.sig tag) checked and extended; a bigger one holds the builder back with SignatureImageTooLarge")
	f.attestations = builder.AttestSigned
	fs.Func("builder-attestations", "which builders carry their SBOM (SPDX) and SLSA provenance as OCI referrers: none; signed (builders with signing keys, each signed by each key, as cosign v3 attest --key does); all (signed, and the SBOM alone, unsigned, of builders without keys) (default signed)",
		func(v string) error {
			if !slices.Contains([]string{builder.AttestNone, builder.AttestSigned, builder.AttestAll}, v) {
				return errors.New("must be none, signed or all")
			}
			f.attestations = v
			return nil
		})
	fs.IntVar(&f.maxLayers, "max-builder-layers", cnb.DefaultMaxLayers,
		"most layers a builder image may have, its build image's included; more stalls the builder with TooManyLayers (container runtimes refuse much deeper images)")
	fs.StringVar(&f.flattening.ScratchDir, "scratch-dir", os.TempDir(),
		"directory of the flattened layers of builders being pushed (spec.flatten); at most 2 × --max-concurrent-flattens × --max-flattened-bytes in use")
	fs.IntVar(&f.concurrentFlattens, "max-concurrent-flattens", builder.DefaultConcurrentFlattens,
		"most builder pushes flattening at once (disk, CPU and downloads), one namespace taking at most half of them; others wait, Reconciling with FlattenQueued")
	fs.DurationVar(&f.maxFlattenDuration, "max-flatten-duration", builder.DefaultMaxFlattenDuration,
		"longest a push that flattens keeps its turn (reading the buildpack layers, writing the builder); longer, it gives the turn back (FlattenTimedOut) and tries again later")
	f.flattening.MaxZstdWindow = cnb.DefaultMaxZstdWindow
	fs.Func("max-zstd-window", fmt.Sprintf("largest window (bytes, at least 1024) a zstd buildpack layer may ask for when it is flattened; a bigger one stalls the builder with InvalidBuildpackLayer (default %d)", cnb.DefaultMaxZstdWindow),
		func(v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err == nil && n < 1024 {
				err = errors.New("must be at least 1024, zstd's smallest window")
			}
			f.flattening.MaxZstdWindow = n
			return err
		})
	fs.Int64Var(&f.flattening.MaxBytes, "max-flattened-bytes", builder.DefaultMaxFlattenedBytes,
		"most bytes (uncompressed) of the flattened layers of one builder, all its platforms; more stalls the builder with FlattenTooLarge")
	fs.IntVar(&f.rememberedFlattened, "remembered-flattened-layers", builder.DefaultRememberedFlattenedLayers,
		"most flattened layers remembered (about 100 bytes each), so that a rebuild whose repository holds them reads no buildpack layer; 0: none")
	fs.BoolVar(&f.disableHA, "disable-ha", false, "run without leader election (for local runs)")
	fs.BoolVar(&f.healthProbes, "health-probes", true, "serve readiness and liveness probes on :8080")
	fs.IntVar(&f.profilingPort, "profiling-port", 8008, "port of the profiling server when profiling is enabled in config-observability; 0 picks a free one")
	fs.IntVar(&f.metricsPort, "metrics-port", 9090, "port of the Prometheus endpoint when enabled in config-observability (1024-65535)")
	fs.IntVar(&f.workers, "workers", 4, "reconciles run at once per kind; they mostly wait on registries")
}

// setEnv sets what knative reads from the environment only, once the flags
// are parsed: the system namespace (default "buildsmith") and the ports. A
// port flag given explicitly wins over the environment, the environment
// over the flag's default.
func (f *flags) setEnv() {
	if os.Getenv("SYSTEM_NAMESPACE") == "" {
		mustSetenv("SYSTEM_NAMESPACE", "buildsmith")
	}
	set := map[string]bool{}
	flag.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	for env, port := range map[string]struct {
		name  string
		value int
	}{"PROFILING_PORT": {"profiling-port", f.profilingPort}, "METRICS_PROMETHEUS_PORT": {"metrics-port", f.metricsPort}} {
		if set[port.name] || os.Getenv(env) == "" {
			mustSetenv(env, strconv.Itoa(port.value))
		}
	}
}

func mustSetenv(key, value string) {
	if err := os.Setenv(key, value); err != nil {
		log.Fatalf("setting %s: %v", key, err)
	}
}
