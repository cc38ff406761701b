// Package envtest starts a real control plane for tests: etcd and
// kube-apiserver built by hack/tools.sh into bin/, with the CRDs of
// config/crd installed.
package envtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"k8s.io/client-go/rest"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Env is a running control plane.
type Env struct {
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file equivalent to Config, for
	// kubectl and the controller binary.
	Kubeconfig string
	// Root is the repository's root directory.
	Root string
	// Dir holds the control plane's files (the kubeconfig) and is removed
	// by Stop; a suite may keep its own files there (the controller
	// binary).
	Dir string

	env *crenvtest.Environment
}

// Start starts etcd and kube-apiserver and installs the CRDs. The binaries
// must have been built (make tools); a missing one is an error, never a skip.
func Start() (*Env, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(root, "bin")
	for _, tool := range []string{"etcd", "kube-apiserver", "kubectl"} {
		if _, err := os.Stat(filepath.Join(bin, tool)); err != nil {
			return nil, fmt.Errorf("%s is missing from %s: run `make tools` (or `hack/tools.sh`) first", tool, bin)
		}
	}
	env := &crenvtest.Environment{
		BinaryAssetsDirectory: bin,
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting etcd and kube-apiserver: %w", err)
	}
	e := &Env{Config: cfg, Root: root, env: env}
	if err := e.writeKubeconfig(); err != nil {
		_ = e.Stop()
		return nil, err
	}
	return e, nil
}

// Main is the body of a suite's TestMain: it starts a control plane, calls
// run with it (run sets the suite up and runs its tests), stops the control
// plane and returns run's exit code, for os.Exit. When the control plane
// does not start or run returns an error, it prints why and returns 1; it
// prints a failure to stop too.
func Main(run func(*Env) (code int, err error)) int {
	env, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}()
	code, err := run(env)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return code
}

func (e *Env) writeKubeconfig() error {
	user, err := e.env.AddUser(crenvtest.User{Name: "buildsmith-test-admin", Groups: []string{"system:masters"}}, e.Config)
	if err != nil {
		return fmt.Errorf("adding an admin user: %w", err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		return err
	}
	if e.Dir, err = os.MkdirTemp("", "buildsmith-envtest-"); err != nil {
		return err
	}
	e.Kubeconfig = filepath.Join(e.Dir, "kubeconfig")
	return os.WriteFile(e.Kubeconfig, data, 0o600)
}

// Stop stops the control plane and removes its files.
func (e *Env) Stop() error {
	err := e.env.Stop()
	if e.Dir != "" {
		_ = os.RemoveAll(e.Dir)
	}
	return err
}

// Kubectl returns a command running bin/kubectl against this control plane.
func (e *Env) Kubectl(args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(e.Root, "bin", "kubectl"), append([]string{"--kubeconfig", e.Kubeconfig}, args...)...)
	cmd.Dir = e.Root
	return cmd
}

// RepoRoot finds the repository root: the nearest directory above the
// working directory that holds go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}
