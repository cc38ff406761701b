package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/yaml"
)

// pluginPlatforms are the platforms a release builds kubectl-buildsmith for.
var pluginPlatforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}

// madeRelease is what `make release` was given and what it said.
type madeRelease struct {
	imageRepo string // IMAGE_REPO
	version   string // VERSION
	image     string // the image by digest, as `make image` printed it
	dist      string // DIST
	output    string // its stdout and stderr
	registry  string // host:port of the registry pushed to, asking for registryUser
	// dockerConfig is the directory of a Docker config logged in to it;
	// keys holds the key pair the release was signed with (releaseKeys).
	dockerConfig, keys string
}

// checkRelease checks a release as its users meet it: the chart pulled from
// the registry is the chart in dist, and `helm install oci://…` — the line the
// release printed, after `helm registry login` — installs the same objects as
// the chart directory renders with the release's image; the plugin archives
// hold a binary for each platform, match checksums.txt and the krew
// manifest, which krew accepts; the host's binary runs, through kubectl, and
// says the release's version.
func checkRelease(t *testing.T, r madeRelease) {
	t.Helper()
	chartVersion := strings.TrimPrefix(r.version, "v")
	distChart := filepath.Join(r.dist, "buildsmith-"+chartVersion+".tgz")
	sums := readChecksums(t, filepath.Join(r.dist, "checksums.txt"))
	if got, want := sums[filepath.Base(distChart)], fileSHA256(t, distChart); got != want {
		t.Errorf("checksums.txt: %s for the chart, want %s", got, want)
	}

	// The chart: oci://IMAGE_REPO-charts/buildsmith, by tag and digest.
	raw, err := os.ReadFile(filepath.Join(r.dist, "chart.txt"))
	if err != nil {
		t.Fatal(err)
	}
	chartRef := strings.TrimSpace(string(raw))
	repoRef := "oci://" + r.imageRepo + "-charts/buildsmith"
	if !regexp.MustCompile(`^` + regexp.QuoteMeta(repoRef+":"+chartVersion) + `@sha256:[a-f0-9]{64}$`).MatchString(chartRef) {
		t.Fatalf("dist/chart.txt: %q, want %s:%s@sha256:…", chartRef, repoRef, chartVersion)
	}
	wantLine := "helm install buildsmith " + repoRef + " --version " + chartVersion +
		" --namespace buildsmith --create-namespace --plain-http"
	var installLine string
	for _, line := range strings.Split(r.output, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "helm install ") {
			installLine = strings.TrimSpace(line)
		}
	}
	if installLine != wantLine {
		t.Fatalf("make release printed the install line %q, want %q", installLine, wantLine)
	}

	// A user's helm: its own config, no Docker config, logged in.
	home := t.TempDir()
	userHelm := func(args ...string) *exec.Cmd {
		cmd := helm(args...)
		cmd.Env = append(cmd.Env, "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config",
			"HELM_DATA_HOME="+home+"/data", "DOCKER_CONFIG="+home+"/docker")
		return cmd
	}
	login := userHelm("registry", "login", r.registry, "--plain-http", "--username", registryUser, "--password-stdin")
	login.Stdin = strings.NewReader(registryPassword)
	if out, err := login.CombinedOutput(); err != nil {
		t.Fatalf("helm registry login: %v\n%s", err, out)
	}
	pulled := t.TempDir()
	if out, err := userHelm("pull", chartRef, "--plain-http", "-d", pulled).CombinedOutput(); err != nil {
		t.Fatalf("helm pull %s: %v\n%s", chartRef, err, out)
	}
	files, err := filepath.Glob(filepath.Join(pulled, "*.tgz"))
	if err != nil || len(files) != 1 {
		t.Fatalf("helm pull %s wrote %q, %v; want one chart", chartRef, files, err)
	}
	if got, want := fileSHA256(t, files[0]), fileSHA256(t, distChart); got != want {
		t.Errorf("the chart pulled from %s (sha256 %s) is not dist's (sha256 %s)", chartRef, got, want)
	}

	// The printed line, as this test's release in a namespace of its own
	// (a release named buildsmith owns cluster-wide objects of that name).
	const name, ns = "oci", "buildsmith-oci"
	// The CRDs are envtest's, not this release's: not installed again.
	args := append(strings.Fields(installLine)[1:], "--set", "crds.enabled=false")
	args[1] = name
	args[slices.Index(args, "--namespace")+1] = ns
	if out, err := userHelm(append(args, "--kubeconfig", env.Kubeconfig)...).CombinedOutput(); err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Cleanup(func() {
		_, _ = userHelm("uninstall", name, "--kubeconfig", env.Kubeconfig, "--namespace", ns).CombinedOutput()
	})
	installed, err := userHelm("get", "manifest", name, "--kubeconfig", env.Kubeconfig, "--namespace", ns).Output()
	if err != nil {
		t.Fatalf("helm get manifest: %v", err)
	}
	// The chart directory at the release's version (the labels name it),
	// with the release's image.
	packaged := t.TempDir()
	if out, err := helm("package", "charts/buildsmith", "--version", chartVersion, "--app-version", r.version,
		"-d", packaged).CombinedOutput(); err != nil {
		t.Fatalf("helm package: %v\n%s", err, out)
	}
	tagged, digest, _ := strings.Cut(r.image, "@")
	colon := strings.LastIndex(tagged, ":")
	repo, tag := tagged[:colon], tagged[colon+1:]
	directory, err := helm("template", name, filepath.Join(packaged, "buildsmith-"+chartVersion+".tgz"), "--namespace", ns,
		"--set-string", "image.repository="+repo, "--set-string", "image.tag="+tag, "--set-string", "image.digest="+digest,
		"--set", "crds.enabled=false").Output()
	if err != nil {
		t.Fatalf("helm template of the chart directory: %v", err)
	}
	got, want := manifestObjects(t, installed), manifestObjects(t, directory)
	if len(want) == 0 {
		t.Fatal("the chart directory renders no objects")
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("helm install %s installed other objects than the chart directory renders (-directory +installed):\n%s", repoRef, diff)
	} else {
		t.Logf("helm install %s: %d objects, as the chart directory renders them", repoRef, len(got))
	}

	// The plugin: an archive per platform holding its executable.
	archives := map[string]string{} // os/arch: sha256 of the archive
	for _, platform := range pluginPlatforms {
		goos, goarch, _ := strings.Cut(platform, "/")
		file := filepath.Join(r.dist, "kubectl-buildsmith_"+goos+"_"+goarch+".tar.gz")
		archives[platform] = fileSHA256(t, file)
		if got := sums[filepath.Base(file)]; got != archives[platform] {
			t.Errorf("checksums.txt: %q for %s, want %s", got, filepath.Base(file), archives[platform])
		}
		bin := pluginBinary(t, file)
		if err := checkExecutable(bin, goos, goarch); err != nil {
			t.Errorf("%s: kubectl-buildsmith: %v", filepath.Base(file), err)
		}
	}
	if got, want := sums["install.yaml"], fileSHA256(t, filepath.Join(r.dist, "install.yaml")); got != want {
		t.Errorf("checksums.txt: %q for install.yaml, want %s", got, want)
	}
	if len(sums) != len(pluginPlatforms)+2 {
		t.Errorf("checksums.txt names %d files, want the %d archives, the chart and install.yaml", len(sums), len(pluginPlatforms))
	}
	checkKrewManifest(t, filepath.Join(r.dist, "plugins", "buildsmith.yaml"), r.version,
		"https://github.com/buildsmith/buildsmith/releases/download/"+r.version, archives)

	// krew installs it from the manifest (checking the archive's sha256),
	// and kubectl runs it.
	if runtime.GOOS != "linux" {
		t.Skipf("the archives hold linux and darwin binaries; this is %s", runtime.GOOS)
	}
	if out, err := exec.Command(filepath.Join(env.Root, "hack", "tools.sh"), "krew").CombinedOutput(); err != nil {
		t.Fatalf("hack/tools.sh krew: %v\n%s", err, out)
	}
	krewRoot := t.TempDir()
	krew := exec.Command(filepath.Join(env.Root, "bin", "krew"), "install",
		"--manifest="+filepath.Join(r.dist, "plugins", "buildsmith.yaml"),
		"--archive="+filepath.Join(r.dist, "kubectl-buildsmith_linux_"+runtime.GOARCH+".tar.gz"))
	krew.Env = append(os.Environ(), "KREW_ROOT="+krewRoot)
	if out, err := krew.CombinedOutput(); err != nil {
		t.Fatalf("krew install --manifest: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"buildsmith", "version"}, "kubectl-buildsmith " + r.version + "\n"},
		{[]string{"buildsmith", "--help"}, "kubectl buildsmith [command]"},
	} {
		kubectl := exec.Command(filepath.Join(env.Root, "bin", "kubectl"), tc.args...)
		kubectl.Env = append(os.Environ(), "PATH="+filepath.Join(krewRoot, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := kubectl.Output()
		if err != nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("kubectl %s (installed by krew): %v\n%s\nwant %q in it", strings.Join(tc.args, " "), err, out, tc.want)
		} else if tc.args[1] == "version" {
			t.Logf("krew install --manifest, then kubectl buildsmith version: %s", strings.TrimSpace(string(out)))
		}
	}
}

// readChecksums reads sha256sum's output: file name to sha256.
func readChecksums(t *testing.T, path string) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		sum, file, ok := strings.Cut(line, "  ")
		if !ok || !regexp.MustCompile(`^[a-f0-9]{64}$`).MatchString(sum) {
			t.Fatalf("%s: %q is not a sha256sum line", path, line)
		}
		sums[file] = sum
	}
	return sums
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// pluginBinary reads an archive of the plugin: kubectl-buildsmith, a regular
// file executable by all, and the LICENSE (krew's index asks for it).
func pluginBinary(t *testing.T, archive string) []byte {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", archive, err)
	}
	want := []string{"LICENSE", "kubectl-buildsmith"}
	var names []string
	var bin []byte
	r := tar.NewReader(gz)
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", archive, err)
		}
		names = append(names, h.Name)
		if h.Name == "LICENSE" {
			got, _ := io.ReadAll(r)
			if want, err := os.ReadFile(filepath.Join(env.Root, "LICENSE")); err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s: its LICENSE (%d bytes) is not the repository's (%v)", archive, len(got), err)
			}
		}
		if h.Name == "kubectl-buildsmith" {
			if h.Typeflag != tar.TypeReg || h.Mode&0o111 != 0o111 {
				t.Errorf("%s: kubectl-buildsmith is of type %c, mode %o; want a regular file executable by all", archive, h.Typeflag, h.Mode)
			}
			if bin, err = io.ReadAll(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !slices.Equal(names, want) {
		t.Fatalf("%s holds %q, want %q", archive, names, want)
	}
	return bin
}

// checkExecutable says whether bin is an executable for goos/goarch: an ELF
// binary for linux, a Mach-O one for darwin, of the architecture's machine.
func checkExecutable(bin []byte, goos, goarch string) error {
	switch goos {
	case "linux":
		f, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil {
			return err
		}
		want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[goarch]
		if f.Type != elf.ET_EXEC || f.Machine != want {
			return fmt.Errorf("an ELF %s for %s, want an executable for %s", f.Type, f.Machine, want)
		}
	case "darwin":
		f, err := macho.NewFile(bytes.NewReader(bin))
		if err != nil {
			return err
		}
		want := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}[goarch]
		if f.Type != macho.TypeExec || f.Cpu != want {
			return fmt.Errorf("a Mach-O %s for %s, want an executable for %s", f.Type, f.Cpu, want)
		}
	default:
		return fmt.Errorf("no check for %s", goos)
	}
	return nil
}

// krewPlugin is a krew plugin manifest (krew.googlecontainertools.github.com/v1alpha2
// Plugin), as krew reads it. sigs.k8s.io/krew is not imported for its types or
// its validation: the validation is internal (internal/index/validation), and
// its module requires k8s.io/client-go v11.0.0+incompatible, which minimal
// version selection would pick over this module's v0.35. checkKrewManifest
// applies the same rules as krew's ValidatePlugin, and the test then has krew
// itself (bin/krew) install the plugin from the manifest.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		Homepage         string `json:"homepage"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Caveats          string `json:"caveats"`
		Platforms        []struct {
			Selector *metav1.LabelSelector `json:"selector"`
			URI      string                `json:"uri"`
			Sha256   string                `json:"sha256"`
			Files    []struct {
				From string `json:"from"`
				To   string `json:"to"`
			} `json:"files"`
			Bin string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

// checkKrewManifest checks the release's krew manifest: krew's rules (a
// supported apiVersion and kind, a safe name, a one-line short description,
// a v-prefixed semantic version, for each platform a uri, a sha256, a bin,
// files with from and to, and a selector on os and arch only), and this
// release's values: its version, and for each platform of archives (os/arch
// to sha256) one entry with the archive's URI under downloadURL and its
// sha256.
func checkKrewManifest(t *testing.T, path, releaseVersion, downloadURL string, archives map[string]string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var p krewPlugin
	if err := yaml.UnmarshalStrict(raw, &p); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	fail := func(format string, args ...any) { t.Errorf("%s: "+format, append([]any{path}, args...)...) }
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" {
		fail("apiVersion %q, kind %q; want krew.googlecontainertools.github.com/v1alpha2 Plugin", p.APIVersion, p.Kind)
	}
	if p.Metadata.Name != "buildsmith" {
		fail("metadata.name %q, want buildsmith (kubectl buildsmith)", p.Metadata.Name)
	}
	if p.Spec.ShortDescription == "" || strings.ContainsAny(p.Spec.ShortDescription, "\r\n") {
		fail("shortDescription %q: want one line", p.Spec.ShortDescription)
	}
	if _, err := version.ParseSemantic(p.Spec.Version); err != nil || !strings.HasPrefix(p.Spec.Version, "v") || p.Spec.Version != releaseVersion {
		fail("version %q (%v), want %s", p.Spec.Version, err, releaseVersion)
	}
	seen := map[string]bool{}
	for i, pl := range p.Spec.Platforms {
		at := fmt.Sprintf("platforms[%d]", i)
		if pl.Selector == nil || len(pl.Selector.MatchExpressions) > 0 || len(pl.Selector.MatchLabels) != 2 ||
			pl.Selector.MatchLabels["os"] == "" || pl.Selector.MatchLabels["arch"] == "" {
			fail("%s.selector %+v: want matchLabels os and arch, nothing else", at, pl.Selector)
			continue
		}
		platform := pl.Selector.MatchLabels["os"] + "/" + pl.Selector.MatchLabels["arch"]
		sum, ok := archives[platform]
		if !ok || seen[platform] {
			fail("%s is for %s: not one of the archives %v, or twice", at, platform, pluginPlatforms)
			continue
		}
		seen[platform] = true
		if want := downloadURL + "/kubectl-buildsmith_" + strings.ReplaceAll(platform, "/", "_") + ".tar.gz"; pl.URI != want {
			fail("%s.uri %q, want %q", at, pl.URI, want)
		}
		if pl.Sha256 != sum {
			fail("%s.sha256 %q, want the archive's %s", at, pl.Sha256, sum)
		}
		if pl.Bin != "kubectl-buildsmith" {
			fail("%s.bin %q, want kubectl-buildsmith", at, pl.Bin)
		}
		if pl.Files != nil && len(pl.Files) == 0 {
			fail("%s.files is empty: leave it out or name files", at)
		}
		for _, f := range pl.Files {
			if f.From == "" || f.To == "" {
				fail("%s.files: %+v lacks from or to", at, f)
			}
		}
	}
	if len(seen) != len(archives) {
		fail("platforms for %d of the %d archives", len(seen), len(archives))
	}
}

// manifestObjects reads a helm manifest (helm template, helm get manifest)
// into its objects by kind, namespace and name.
func manifestObjects(t *testing.T, manifest []byte) map[string]map[string]any {
	t.Helper()
	objects := map[string]map[string]any{}
	for _, doc := range strings.Split("\n"+string(manifest), "\n---") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if obj == nil {
			continue
		}
		meta, _ := obj["metadata"].(map[string]any)
		key := fmt.Sprintf("%v %v/%v", obj["kind"], meta["namespace"], meta["name"])
		if _, dup := objects[key]; dup {
			t.Fatalf("%s twice in a manifest", key)
		}
		objects[key] = obj
	}
	return objects
}

// TestReleaseWorkflowTestsFirst: the release workflow runs `make test` on
// the tag before `make release`: nothing is published that fails main's
// own checks.
func TestReleaseWorkflowTestsFirst(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(env.Root, ".github", "workflows", "release.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var workflow struct {
		Jobs map[string]struct {
			Steps []struct{ Run string } `json:"steps"`
		} `json:"jobs"`
	}
	if err := yaml.Unmarshal(raw, &workflow); err != nil {
		t.Fatal(err)
	}
	tested, released := -1, -1
	for i, step := range workflow.Jobs["release"].Steps {
		switch run := strings.TrimSpace(step.Run); {
		case run == "make test":
			tested = i
		case strings.HasPrefix(run, "make release "):
			released = i
		}
	}
	if tested < 0 || released < 0 || tested > released {
		t.Errorf("release workflow: `make test` is step %d, `make release` step %d; want the test first", tested, released)
	}
}
