// Command kubectl-buildsmith is a kubectl plugin for buildsmith. On the
// PATH, it runs as `kubectl buildsmith <command>`.
//
// Commands:
//
//	convert -f FILE|-             convert kpack builder manifests to buildsmith manifests
//	convert --builder-toml FILE|- --tag REF
//	                              convert a pack builder.toml to buildsmith manifests
//	reconcile KIND/NAME [--wait]  reconcile an object now, and wait until it is Ready
//	status [-A]                   every buildsmith object, one line each
//	version                       the version of this binary
//
// reconcile and status take kubectl's connection flags (--kubeconfig,
// --context, -n/--namespace, -s/--server, --token, --as, …).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/buildsmith/buildsmith/pkg/kpack"
	"github.com/buildsmith/buildsmith/pkg/packconfig"
)

// version is set by release builds (hack/release.sh: -ldflags -X
// main.version=vX.Y.Z); `go build` and `go install` leave it dev.
var version = "dev"

// command is a subcommand. run gets the arguments after the command's name
// and returns the exit status.
type command struct {
	name    string
	summary string
	run     func(args []string, stdin io.Reader, stdout, stderr io.Writer) int
}

// commands are the subcommands, in the order the usage text lists them.
var commands = []command{
	{name: "convert", summary: "convert kpack builder manifests (stores, stacks, builders, buildpacks), or a pack builder.toml, to buildsmith manifests", run: runConvert},
	{name: "reconcile", summary: "reconcile an object now (KIND/NAME), and with --wait wait until it is Ready", run: runReconcile},
	{name: "status", summary: "every buildsmith object, one line each: Ready, reason, since when, what it found last", run: runStatus},
	{name: "version", summary: "the version of this binary (dev unless built by a release)", run: runVersion},
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 1
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return 0
	}
	for _, cmd := range commands {
		if cmd.name == args[0] {
			return cmd.run(args[1:], stdin, stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "kubectl-buildsmith: unknown command %q\n\n", args[0])
	usage(stderr)
	return 1
}

func runVersion(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintln(stderr, "Usage: kubectl buildsmith version")
		return 1
	}
	fmt.Fprintf(stdout, "kubectl-buildsmith %s\n", version)
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: kubectl buildsmith <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, cmd := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", cmd.name, cmd.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, `Run "kubectl buildsmith <command> -h" for a command's flags.`)
}

const convertUsage = `Usage: kubectl buildsmith convert -f FILE|-
       kubectl buildsmith convert --builder-toml FILE|- --tag REF [--name NAME] [-n NAMESPACE]
                                  [--stack-id ID] [--service-account SA]

Reads kpack manifests (experimental.kpack.pivotal.io/v1alpha1 Store, Stack,
CustomBuilder, CustomClusterBuilder; kpack.io/v1alpha1 and v1alpha2
ClusterStore, ClusterStack, Builder, ClusterBuilder, Buildpack,
ClusterBuildpack) and writes the buildsmith manifests to stdout. Other
documents are copied unchanged. A Buildpack stays a Buildpack, a
ClusterBuildpack becomes a ClusterStore of its one image, and the builders
that name them draw from them in spec.sources; a builder without a store
takes the first ClusterBuildpack's. Include the objects' status (kubectl
get -o yaml) so that builder entries naming a Buildpack without an id can be
converted.

The input is YAML documents separated by ---, Lists (kubectl get -o yaml,
or -o json), or JSON objects one after another (jq '.items[]'); every
object is read, and text that is not one is an error. Larger inputs than
--max-input-bytes are refused.

With --builder-toml, reads a pack builder configuration (the builder.toml of
pack builder create) and writes a ClusterStore of its buildpackage images, a
ClusterStack of its build and run images, a ClusterLifecycle of
buildpacksio/lifecycle:X.Y.Z for [lifecycle] version = "X.Y.Z", and a
ClusterBuilder (a Builder with -n) with its description, order, order of
extensions, system buildpacks, build env and targets, pushed to --tag. They are
named --name (by default the last part of the tag's repository; a namespaced
Builder's cluster objects <namespace>-<name>). Buildpacks that are not images
(paths, https archives, urn:cnb:registry ids) are warnings, not errors.

Everything not carried over is a warning on stderr:
  warning: <kind>/<namespace>/<name>: <field>: <message>
  warning: <builder.toml>: <field>: <message>          (with --builder-toml)

Exit status: 0 when converted, 1 on an error, or when some object could not
be converted (the output then lacks it; the warnings say why).

Flags:
`

// convertOptions are convert's flags.
type convertOptions struct {
	file          string // -f: kpack manifests
	builderTOML   string // --builder-toml: a pack builder.toml instead
	maxInputBytes int64
	pack          packconfig.Options // what --tag, --name, -n, --stack-id and --service-account give
}

// input is the path of the input: a file, or - for stdin.
func (o *convertOptions) input() string {
	if o.builderTOML != "" {
		return o.builderTOML
	}
	return o.file
}

func runConvert(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	opts, status := parseConvertFlags(args, stdout, stderr)
	if opts == nil {
		return status
	}
	in, err := openConvertInput(opts.input(), stdin)
	if err != nil {
		fmt.Fprintf(stderr, "kubectl-buildsmith convert: %v\n", err)
		return 1
	}
	defer in.Close()
	limited := &limitedInput{r: in, left: opts.maxInputBytes, max: opts.maxInputBytes}
	var out []byte
	var lines []string // the warnings
	omitted := 0
	if opts.builderTOML == "" {
		out, lines, omitted, err = convertManifests(limited)
	} else {
		out, lines, omitted, err = convertBuilderTOML(limited, opts.builderTOML, opts.pack)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kubectl-buildsmith convert: %v\n", err)
		return 1
	}
	return writeConverted(out, lines, omitted, stdout, stderr)
}

// parseConvertFlags parses convert's arguments. With -h, flags it cannot
// parse, or flags that do not go together, it prints why (the usage: on
// stdout for -h, else on stderr) and returns nil and the exit status.
func parseConvertFlags(args []string, stdout, stderr io.Writer) (*convertOptions, int) {
	flags := flag.NewFlagSet("convert", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.Usage = func() {} // printed below: -h on stdout, mistakes on stderr
	opts := &convertOptions{}
	flags.StringVar(&opts.file, "f", "", "the manifests to convert: a file, or - for stdin")
	flags.StringVar(&opts.file, "filename", "", "same as -f")
	flags.Int64Var(&opts.maxInputBytes, "max-input-bytes", defaultMaxInputBytes, "the largest input to read, in bytes (32 MiB by default); a larger one is an error")
	pack := &opts.pack
	flags.StringVar(&opts.builderTOML, "builder-toml", "", "a pack builder.toml to convert instead: a file, or - for stdin")
	flags.StringVar(&pack.Tag, "tag", "", "with --builder-toml: where the builder image is pushed (required)")
	flags.StringVar(&pack.Name, "name", "", "with --builder-toml: the objects' name (default: the last part of the tag's repository)")
	flags.StringVar(&pack.Namespace, "n", "", "with --builder-toml: make a Builder in this namespace instead of a ClusterBuilder")
	flags.StringVar(&pack.Namespace, "namespace", "", "same as -n")
	flags.StringVar(&pack.StackID, "stack-id", "", "with --builder-toml: the ClusterStack's id when builder.toml has no stack id")
	flags.StringVar(&pack.ServiceAccount, "service-account", "", "with --builder-toml: the ServiceAccount that pushes the builder: NAME for a Builder, NAMESPACE/NAME for a ClusterBuilder")
	printUsage := func(w io.Writer) {
		fmt.Fprint(w, convertUsage)
		flags.SetOutput(w)
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout)
			return nil, 0
		}
		printUsage(stderr)
		return nil, 1
	}
	if !checkConvertFlags(opts, flags.NArg(), stderr) {
		return nil, 1
	}
	return opts, 0
}

// checkConvertFlags reports whether opts go together (and, with nargs
// arguments after them, give exactly one input), saying on stderr why not.
func checkConvertFlags(opts *convertOptions, nargs int, stderr io.Writer) bool {
	file, builderTOML, pack := opts.file, opts.builderTOML, opts.pack
	packFlags := pack.Tag != "" || pack.Name != "" || pack.Namespace != "" || pack.StackID != "" || pack.ServiceAccount != ""
	switch {
	case nargs > 0 || (file == "") == (builderTOML == ""):
		fmt.Fprintln(stderr, "kubectl-buildsmith convert: give exactly one input, with -f FILE (or -f - for stdin) or --builder-toml FILE (or --builder-toml -)")
		return false
	case file != "" && packFlags:
		fmt.Fprintln(stderr, "kubectl-buildsmith convert: --tag, --name, -n, --stack-id and --service-account are for --builder-toml")
		return false
	case builderTOML != "" && pack.Tag == "":
		fmt.Fprintln(stderr, "kubectl-buildsmith convert: --builder-toml needs --tag, the image the builder is pushed to (builder.toml does not say)")
		return false
	}
	if opts.maxInputBytes <= 0 {
		fmt.Fprintf(stderr, "kubectl-buildsmith convert: --max-input-bytes must be positive, not %d\n", opts.maxInputBytes)
		return false
	}
	return true
}

// openConvertInput opens the file at path, or for - returns stdin, which
// its Close leaves open.
func openConvertInput(path string, stdin io.Reader) (io.ReadCloser, error) {
	if path == "-" {
		return io.NopCloser(stdin), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// convertManifests converts kpack manifests, returning the buildsmith
// manifests, the warnings, and how many objects were not converted.
func convertManifests(in io.Reader) (out []byte, lines []string, omitted int, err error) {
	out, warnings, err := kpack.Convert(in)
	if err != nil {
		return nil, nil, 0, err
	}
	lines, omitted = warningLines(warnings, func(w kpack.Warning) (string, bool) {
		return w.Kind + "/" + w.Namespace + "/" + w.Name, w.Omitted
	})
	return out, lines, omitted, nil
}

// warningLines returns the warnings' lines, and how many objects they say
// were left out; omitted names the object a warning is about and says
// whether it was left out (an object may be, for several reasons).
func warningLines[W fmt.Stringer](warnings []W, omitted func(W) (object string, left bool)) (lines []string, objects int) {
	left := map[string]bool{}
	for _, w := range warnings {
		lines = append(lines, w.String())
		if object, ok := omitted(w); ok {
			left[object] = true
		}
	}
	return lines, len(left)
}

// convertBuilderTOML converts the pack builder.toml at path (- for stdin),
// read from in, with the options of pack; it returns what convertManifests
// does.
func convertBuilderTOML(in io.Reader, path string, pack packconfig.Options) (out []byte, lines []string, omitted int, err error) {
	// pack reads paths in builder.toml relative to it.
	pack.Source, pack.IsLocalPath = path, localPaths(filepath.Dir(path))
	if path == "-" {
		pack.Source, pack.IsLocalPath = "stdin", localPaths(".")
	}
	out, warnings, err := packconfig.Convert(in, pack)
	if err != nil {
		return nil, nil, 0, err
	}
	// Each omission of the builder.toml converter is of an object of its own.
	lines, omitted = warningLines(warnings, func(w packconfig.Warning) (string, bool) { return w.String(), w.Omitted })
	return out, lines, omitted, nil
}

// writeConverted writes the warnings (lines) to stderr and the converted
// manifests to stdout, and returns the exit status: 1 when writing failed
// or omitted objects were not converted.
func writeConverted(out []byte, lines []string, omitted int, stdout, stderr io.Writer) int {
	for _, line := range lines {
		fmt.Fprintf(stderr, "warning: %s\n", line)
	}
	if _, err := stdout.Write(out); err != nil {
		fmt.Fprintf(stderr, "kubectl-buildsmith convert: writing the output: %v\n", err)
		return 1
	}
	if omitted > 0 {
		fmt.Fprintf(stderr, "kubectl-buildsmith convert: %d object(s) not converted; see the warnings above\n", omitted)
		return 1
	}
	return 0
}

// localPaths says whether a path exists, relative to dir when not
// absolute: how pack tells a buildpack's path from an image reference.
func localPaths(dir string) func(string) bool {
	return func(p string) bool {
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		_, err := os.Stat(p)
		return err == nil
	}
}

// defaultMaxInputBytes is --max-input-bytes by default: 32 MiB, above the
// largest manifests seen (an 18 MB List), and a bound on the memory and
// time a conversion takes, which grow with its input: a 20 MB ClusterStore
// of 315,970 sources took 1.5 GB and 9 s, one of 63 MiB 4.8 GB and 46 s,
// and a 60 MiB stream of 105,837 JSON objects 3.0 GB and 49 s.
const defaultMaxInputBytes = 32 << 20

// limitedInput reads r, failing once it has given max bytes and r has more.
type limitedInput struct {
	r         io.Reader
	left, max int64
}

func (l *limitedInput) Read(p []byte) (int, error) {
	if l.left < int64(len(p)) {
		p = p[:l.left+1] // one byte more than allowed tells that there is more
	}
	n, err := l.r.Read(p)
	if int64(n) > l.left {
		return 0, fmt.Errorf("the input is larger than --max-input-bytes=%d%s; give a larger limit to convert it", l.max, mebibytes(l.max))
	}
	l.left -= int64(n)
	return n, err
}

// mebibytes is " (N MiB)" for a whole number of MiB, else "".
func mebibytes(n int64) string {
	if n%(1<<20) != 0 {
		return ""
	}
	return fmt.Sprintf(" (%d MiB)", n>>20)
}
