// Command demo runs buildsmith end to end on this machine, from nothing:
// a local etcd and kube-apiserver, the distribution registry seeded with a
// demo stack, buildpacks and the real CNB lifecycle, the CRDs and samples
// applied with kubectl, and the controller — and prints the Ready objects
// and the labels of the builder image it pushed; then it pushes a patched
// build image, whose notification reaches the Receiver sample, and shows
// every builder rebuilt on it within seconds. Everything it starts is
// stopped, and everything it writes removed, when it ends or on Ctrl-C.
//
//	go run ./hack/demo          (make demo)
//	go run ./hack/demo --keep   (make dev: keeps running, prints KUBECONFIG)
//
// The tools come from bin/ (hack/tools.sh builds them; make does that first).
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/buildsmith/buildsmith/pkg/receiver"
	"github.com/buildsmith/buildsmith/test/cosigntest"
	"github.com/buildsmith/buildsmith/test/distribution"
	"github.com/buildsmith/buildsmith/test/envtest"
	"github.com/buildsmith/buildsmith/test/localhost"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

const (
	systemNamespace = "buildsmith"
	// samplesRegistry is the registry the samples name; the demo's
	// registry listens on a free port instead, substituted when applying.
	samplesRegistry = "localhost:5000"
	stackID         = "dev.buildsmith.stacks.demo"
)

func main() {
	keep := flag.Bool("keep", false, "keep everything running after the builders are Ready, until Ctrl-C")
	timeout := flag.Duration("timeout", 5*time.Minute, "how long to wait for every object to be Ready")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d := &demo{keep: *keep, timeout: *timeout}
	err := d.run(ctx)
	d.teardown()
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: FAILED: %v\n", err)
		os.Exit(1)
	}
}

type demo struct {
	keep    bool
	timeout time.Duration

	root       string
	dir        string // scratch: registry storage, logs, config
	env        *envtest.Env
	registry   *distribution.Registry
	processes  []*exec.Cmd
	controller string // log path
	// receiverPort is the controller's --receiver-port, and token the
	// token of the Receiver the registry notifies (config/samples/receiver.yaml).
	receiverPort int
	token        string
}

func step(format string, args ...any) { fmt.Printf("demo: "+format+"\n", args...) }

func (d *demo) run(ctx context.Context) error {
	var err error
	if d.root, err = envtest.RepoRoot(); err != nil {
		return err
	}
	if d.dir, err = os.MkdirTemp("", "buildsmith-demo-"); err != nil {
		return err
	}

	step("starting etcd and kube-apiserver (bin/), installing the CRDs")
	if d.env, err = envtest.Start(); err != nil {
		return err
	}
	step("starting the registry (bin/registry, distribution) on a free port, notifying the controller's Receiver of its pushes")
	notify, err := d.notify()
	if err != nil {
		return err
	}
	if d.registry, err = distribution.Start(ctx, filepath.Join(d.root, "bin", "registry"), d.dir,
		distribution.Options{LogLevel: "warn", Notify: notify}); err != nil {
		return err
	}
	step("registry at %s; seeding it with a stack, two buildpackages and the lifecycle", d.registry.Addr)
	if err := d.seed(); err != nil {
		return err
	}
	step("applying the namespace, the lifecycle-image ConfigMap and config/samples with kubectl")
	if err := d.apply(ctx); err != nil {
		return err
	}
	step("building and starting the controller (log: %s)", filepath.Join(d.dir, "controller.log"))
	if err := d.startController(ctx); err != nil {
		return err
	}
	step("waiting for every object to be Ready (up to %s)", d.timeout)
	if err := d.waitReady(ctx); err != nil {
		return err
	}
	if err := d.printBuilder(ctx); err != nil {
		return err
	}
	if err := d.patchBase(ctx); err != nil {
		return err
	}
	if d.keep {
		step("running; use it with:\n\n  export KUBECONFIG=%s\n  %s/bin/kubectl get buildsmith -A\n\n  registry: %s\n\nCtrl-C stops everything.",
			d.env.Kubeconfig, d.root, d.registry.Addr)
		<-ctx.Done()
	}
	step("done")
	return nil
}

// seed pushes the demo's images, each an index for linux/amd64 and
// linux/arm64 as real stacks, buildpackages and lifecycle images are: the
// real lifecycle v0.21.0 built for both, a stack and two buildpackages.
func (d *demo) seed() error {
	platforms := []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}
	lifecycle, err := sampleimages.LifecycleIndex(map[string]string{
		"linux/amd64": filepath.Join(d.root, "bin", "lifecycle"),
		"linux/arm64": filepath.Join(d.root, "bin", "lifecycle-linux-arm64"),
	}, "0.21.0")
	if err != nil {
		return fmt.Errorf("the lifecycle image (are bin/lifecycle and bin/lifecycle-linux-arm64 built?): %w", err)
	}
	hello, err := sampleimages.BuildpackageIndex(platforms, sampleimages.Buildpack{ID: "buildsmith-demo/hello", Version: "1.0.0",
		Detect: "exit 0\n", Build: "echo 'hello from buildsmith-demo/hello'\n"})
	if err != nil {
		return err
	}
	greeting, err := sampleimages.BuildpackageIndex(platforms, sampleimages.Buildpack{ID: "buildsmith-demo/greeting", Version: "1.0.0",
		Detect: "exit 0\n", Build: "echo 'greetings from buildsmith-demo/greeting'\n"})
	if err != nil {
		return err
	}
	build, err := sampleimages.StackIndex(stackID, 1000, platforms...)
	if err != nil {
		return err
	}
	run, err := sampleimages.StackIndex(stackID, 0, platforms...)
	if err != nil {
		return err
	}
	// An extension package (linux/amd64): the extensions sample's builder.
	curl, err := sampleimages.ExtensionPackage(sampleimages.Extension{ID: "buildsmith-demo/curl", Version: "1.0.0",
		Detect: "exit 0\n", Generate: "printf 'ARG base_image\\nFROM ${base_image}\\nRUN echo installing curl\\n' > \"$CNB_OUTPUT_DIR/build.Dockerfile\"\n"})
	if err != nil {
		return err
	}
	curlRef, err := name.ParseReference(d.registry.Addr + "/buildsmith-demo/extensions/curl:1.0.0")
	if err != nil {
		return err
	}
	if err := remote.Write(curlRef, curl); err != nil {
		return fmt.Errorf("pushing %s: %w", curlRef, err)
	}
	for repo, index := range map[string]v1.ImageIndex{
		"buildsmith-demo/lifecycle:0.21.0":          lifecycle,
		"buildsmith-demo/buildpacks/hello:1.0.0":    hello,
		"buildsmith-demo/buildpacks/greeting:1.0.0": greeting,
		"buildsmith-demo/stack/build:1.0.0":         build,
		"buildsmith-demo/stack/run:1.0.0":           run,
		// The second run image of the run images sample (the same image
		// under another name: the demo has one run image to give).
		"buildsmith-demo/stack/run-full:1.0.0": run,
	} {
		ref, err := name.ParseReference(d.registry.Addr + "/" + repo)
		if err != nil {
			return err
		}
		if err := remote.WriteIndex(ref, index); err != nil {
			return fmt.Errorf("pushing %s: %w", ref, err)
		}
	}
	return nil
}

func (d *demo) apply(ctx context.Context) error {
	manifests := []string{
		"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + systemNamespace,
		fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: lifecycle-image\n  namespace: %s\ndata:\n  image: %s/buildsmith-demo/lifecycle:0.21.0",
			systemNamespace, d.registry.Addr),
		// No controller-manager here: no default ServiceAccount either.
		"apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: default\n  namespace: default",
		// The token of the Receiver sample, which the registry sends.
		fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: registry-receiver\n  namespace: %s\nstringData:\n  token: %s",
			systemNamespace, d.token),
	}
	// The signing key of the signed builder sample (config/samples/builder-signed.yaml),
	// as cosign generate-key-pair k8s://default/cosign would make it.
	private, _, err := cosigntest.NewKeyPair("demo")
	if err != nil {
		return err
	}
	manifests = append(manifests, fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: cosign\n  namespace: default\ndata:\n  cosign.key: %s\n  cosign.password: %s",
		base64.StdEncoding.EncodeToString(private), base64.StdEncoding.EncodeToString([]byte("demo"))))
	samples, err := filepath.Glob(filepath.Join(d.root, "config", "samples", "*.yaml"))
	if err != nil {
		return err
	}
	for _, sample := range samples {
		raw, err := os.ReadFile(sample)
		if err != nil {
			return err
		}
		manifests = append(manifests, strings.ReplaceAll(string(raw), samplesRegistry, d.registry.Addr))
	}
	out, err := d.kubectl(ctx, strings.Join(manifests, "\n---\n"), "apply", "-f", "-")
	fmt.Print(indent(out))
	return err
}

func (d *demo) startController(ctx context.Context) error {
	binary := filepath.Join(d.root, "bin", "controller")
	build := exec.CommandContext(ctx, "go", "build", "-o", binary, "./cmd/controller")
	build.Dir = d.root
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/controller: %v\n%s", err, out)
	}
	metrics, err := localhost.FreePort()
	if err != nil {
		return err
	}
	d.controller = filepath.Join(d.dir, "controller.log")
	_, err = d.start("controller", d.controller, binary, "--kubeconfig", d.env.Kubeconfig, "--disable-ha",
		"--health-probes=false", "--profiling-port=0", fmt.Sprintf("--metrics-port=%d", metrics),
		fmt.Sprintf("--receiver-port=%d", d.receiverPort),
		"--allow-loopback-registries") // the demo registry listens on 127.0.0.1
	return err
}

// notify is the registry's notification endpoint: the Receiver of
// config/samples/receiver.yaml (named registry, in the controller's
// namespace) on the controller's receiver port, with a new token.
func (d *demo) notify() ([]distribution.Endpoint, error) {
	port, err := localhost.FreePort()
	if err != nil {
		return nil, err
	}
	d.receiverPort, d.token = port, rand.Text()
	path := receiver.WebhookPath([]byte(d.token), "registry", systemNamespace)
	return []distribution.Endpoint{{Name: "buildsmith", URL: fmt.Sprintf("http://127.0.0.1:%d%s", port, path),
		Headers: map[string]string{"Authorization": "Bearer " + d.token}}}, nil
}

// patchBase pushes a patched build image under the stacks' tag, as a CVE
// fix would be, and waits for every builder to be rebuilt on it: the
// registry's notification reaches the Receiver, which reconciles the
// stacks at once (their resync is ten minutes away).
func (d *demo) patchBase(ctx context.Context) error {
	images := func() (map[string]string, error) {
		out, err := d.kubectl(ctx, "", "get", "builder,clusterbuilder", "-A", "-o",
			`jsonpath={range .items[*]}{.kind}/{.metadata.namespace}/{.metadata.name}={.status.latestImage}{"\n"}{end}`)
		found := map[string]string{}
		for _, line := range strings.Fields(out) {
			if k, v, ok := strings.Cut(line, "="); ok {
				found[k] = v
			}
		}
		return found, err
	}
	before, err := images()
	if err != nil {
		return err
	}
	patched, err := sampleimages.PatchedStackIndex(stackID, 1000, "CVE-2026-0001 fixed",
		v1.Platform{OS: "linux", Architecture: "amd64"}, v1.Platform{OS: "linux", Architecture: "arm64"})
	if err != nil {
		return err
	}
	ref, err := name.ParseReference(d.registry.Addr + "/buildsmith-demo/stack/build:1.0.0")
	if err != nil {
		return err
	}
	step("pushing a patched build image to %s (the stacks resync every 10m; the registry notifies the Receiver)", ref)
	pushed := time.Now()
	if err := remote.WriteIndex(ref, patched); err != nil {
		return fmt.Errorf("pushing %s: %w", ref, err)
	}
	_, err = localhost.Poll(ctx, d.timeout, 250*time.Millisecond, "every builder rebuilt on the patched build image", func() (bool, string) {
		now, err := images()
		if err != nil {
			return false, err.Error()
		}
		left := 0
		for builder, image := range before {
			if now[builder] == image {
				left++
			}
		}
		return left == 0, fmt.Sprintf("%d of %d builders not rebuilt", left, len(before))
	})
	if err != nil {
		d.printLogTail()
		return err
	}
	step("every builder (%d) rebuilt on the patched build image %.1fs after the push", len(before), time.Since(pushed).Seconds())
	return nil
}

func (d *demo) waitReady(ctx context.Context) error {
	last := ""
	_, err := localhost.Poll(ctx, d.timeout, time.Second, "every object to be Ready", func() (bool, string) {
		out, err := d.kubectl(ctx, "", "get", "clusterstore,buildpack,clusterstack,clusterlifecycle,builder,clusterbuilder,receiver", "-A")
		if err != nil {
			return false, err.Error()
		}
		if out != last {
			fmt.Print(indent(out))
			last = out
		}
		objects, ready := 0, 0
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "buildsmith.dev/") {
				objects++
				if strings.Contains(line, " True ") {
					ready++
				}
			}
		}
		return objects >= 5 && ready == objects, fmt.Sprintf("%d of %d Ready", ready, objects)
	})
	if err != nil {
		d.printLogTail()
	}
	return err
}

// printLogTail prints the controller's last log lines.
func (d *demo) printLogTail() {
	log, _ := os.ReadFile(d.controller)
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	fmt.Fprintf(os.Stderr, "demo: the controller's last log lines:\n%s\n", indent(strings.Join(lines[max(0, len(lines)-20):], "\n")))
}

func (d *demo) printBuilder(ctx context.Context) error {
	out, err := d.kubectl(ctx, "", "get", "builder", "demo", "-n", "default", "-o", "jsonpath={.status.latestImage}")
	if err != nil {
		return err
	}
	ref, err := name.NewDigest(strings.TrimSpace(out))
	if err != nil {
		return fmt.Errorf("builder demo's latestImage %q: %w", out, err)
	}
	img, err := remote.Image(ref)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	step("builder image %s, labels:", ref)
	for _, key := range []string{"io.buildpacks.builder.metadata", "io.buildpacks.buildpack.order", "io.buildpacks.lifecycle.version"} {
		var pretty bytes.Buffer
		value := cf.Config.Labels[key]
		if json.Indent(&pretty, []byte(value), "    ", "  ") == nil {
			value = pretty.String()
		}
		fmt.Printf("  %s:\n    %s\n", key, value)
	}
	signatures, err := d.kubectl(ctx, "", "get", "builder", "demo-signed", "-n", "default", "-o", "jsonpath={.status.signatures[*].signature}")
	if err != nil {
		return err
	}
	step("builder demo-signed is signed with the cosign key of its ServiceAccount: %s", signatures)
	return nil
}

// start runs a long-lived process, its output in logPath; teardown stops it.
func (d *demo) start(what, logPath, binary string, args ...string) (*exec.Cmd, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), "SYSTEM_NAMESPACE="+systemNamespace)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // Ctrl-C reaches us, we stop them
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the %s (%s): %w", what, binary, err)
	}
	d.processes = append(d.processes, cmd)
	return cmd, nil
}

func (d *demo) kubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(d.root, "bin", "kubectl"), append([]string{"--kubeconfig", d.env.Kubeconfig}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// teardown stops what run started, newest first, and removes the scratch
// directory.
func (d *demo) teardown() {
	for i := len(d.processes) - 1; i >= 0; i-- {
		p := d.processes[i]
		_ = syscall.Kill(-p.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	if d.registry != nil {
		d.registry.Stop()
	}
	if d.env != nil {
		if err := d.env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "demo: stopping the control plane:", err)
		}
	}
	if d.dir != "" {
		_ = os.RemoveAll(d.dir)
	}
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}
