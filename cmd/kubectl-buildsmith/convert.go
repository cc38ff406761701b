package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/buildsmith/buildsmith/pkg/kpack"
	"github.com/buildsmith/buildsmith/pkg/packconfig"
)

const convertHelp = `Reads kpack manifests (experimental.kpack.pivotal.io/v1alpha1 Store, Stack,
CustomBuilder, CustomClusterBuilder; kpack.io/v1alpha1 and v1alpha2
ClusterStore, ClusterStack, Builder, ClusterBuilder, Buildpack,
ClusterBuildpack) and writes the buildsmith manifests to stdout. Other
documents are copied unchanged. A Buildpack stays a Buildpack, a
ClusterBuildpack becomes a ClusterStore of its one image named
NAME-clusterbuildpack (never a ClusterStore's own name), and the builders
that name them draw from them in spec.sources; a builder without a store
draws from them alone (one that draws from none is left out). Include the
objects' status (kubectl
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
extensions, system buildpacks, build env and targets, pushed to --tag, and with
the layers --flatten asks for (pack builder create's flag, repeated: one group
of id@version,id@version per value). They are named --name (by default the last part of the tag's repository; a namespaced
Builder's cluster objects <namespace>-<name>). Buildpacks that are not images
(paths, https archives, urn:cnb:registry ids) are warnings, not errors.

Everything not carried over is a warning on stderr:
  warning: <kind>/<namespace>/<name>: <field>: <message>
  warning: <builder.toml>: <field>: <message>          (with --builder-toml)

Exit status: 0 when converted, 1 on an error, or when some object could not
be converted (the output then lacks it; the warnings say why).`

// convertOptions are convert's flags.
type convertOptions struct {
	file          string // -f: kpack manifests
	builderTOML   string // --builder-toml: a pack builder.toml instead
	maxInputBytes int64
	pack          packconfig.Options // what --tag, --name, -n, --stack-id, --service-account and --flatten give
}

// input is the path of the input: a file, or - for stdin.
func (o *convertOptions) input() string {
	if o.builderTOML != "" {
		return o.builderTOML
	}
	return o.file
}

func newConvertCommand(streams genericiooptions.IOStreams) *cobra.Command {
	opts := &convertOptions{}
	cmd := &cobra.Command{
		Use:   "convert (-f FILE|- | --builder-toml FILE|- --tag REF)",
		Short: "Convert kpack builder manifests (stores, stacks, builders, buildpacks), or a pack builder.toml, to buildsmith manifests",
		Long:  convertHelp,
		Example: `  kubectl get clusterstores,clusterstacks,clusterbuilders,builders -A -o yaml | kubectl buildsmith convert -f - | kubectl apply -f -
  kubectl buildsmith convert --builder-toml builder.toml --tag registry.example.com/builders/base`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			if err := checkConvertFlags(opts); err != nil {
				return err
			}
			return runConvert(opts, streams)
		},
	}
	flags := cmd.Flags()
	flags.StringVarP(&opts.file, "filename", "f", "", "the manifests to convert: a file, or - for stdin")
	flags.Int64Var(&opts.maxInputBytes, "max-input-bytes", defaultMaxInputBytes, "the largest input to read, in bytes; a larger one is an error")
	pack := &opts.pack
	flags.StringVar(&opts.builderTOML, "builder-toml", "", "a pack builder.toml to convert instead: a file, or - for stdin")
	flags.StringVar(&pack.Tag, "tag", "", "with --builder-toml: where the builder image is pushed (required)")
	flags.StringVar(&pack.Name, "name", "", "with --builder-toml: the objects' name (default: the last part of the tag's repository)")
	flags.StringVarP(&pack.Namespace, "namespace", "n", "", "with --builder-toml: make a Builder in this namespace instead of a ClusterBuilder")
	flags.StringVar(&pack.StackID, "stack-id", "", "with --builder-toml: the ClusterStack's id when builder.toml has no stack id")
	flags.StringArrayVar(&pack.Flatten, "flatten", nil, "with --builder-toml: buildpacks put in one layer, as pack builder create's --flatten: id@version,id@version (repeat for more groups)")
	flags.StringVar(&pack.ServiceAccount, "service-account", "", "with --builder-toml: the ServiceAccount that pushes the builder: NAME for a Builder, NAMESPACE/NAME for a ClusterBuilder")
	_ = cmd.MarkFlagFilename("filename", "yaml", "yml", "json")
	_ = cmd.MarkFlagFilename("builder-toml", "toml")
	return cmd
}

func runConvert(opts *convertOptions, streams genericiooptions.IOStreams) error {
	in, err := openConvertInput(opts.input(), streams.In)
	if err != nil {
		return err
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
		return err
	}
	return writeConverted(out, lines, omitted, streams.Out, streams.ErrOut)
}

// checkConvertFlags says why opts do not go together (or give no input or
// two), if they do not.
func checkConvertFlags(opts *convertOptions) error {
	file, builderTOML, pack := opts.file, opts.builderTOML, opts.pack
	packFlags := pack.Tag != "" || pack.Name != "" || pack.Namespace != "" || pack.StackID != "" || pack.ServiceAccount != "" || len(pack.Flatten) > 0
	switch {
	case (file == "") == (builderTOML == ""):
		return usageError("give exactly one input, with -f FILE (or -f - for stdin) or --builder-toml FILE (or --builder-toml -)")
	case file != "" && packFlags:
		return usageError("--tag, --name, -n, --stack-id, --service-account and --flatten are for --builder-toml")
	case builderTOML != "" && pack.Tag == "":
		return usageError("--builder-toml needs --tag, the image the builder is pushed to (builder.toml does not say)")
	case opts.maxInputBytes <= 0:
		return usageError("--max-input-bytes must be positive, not %d", opts.maxInputBytes)
	}
	return nil
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
// manifests to stdout; it fails when writing failed or omitted objects
// were not converted.
func writeConverted(out []byte, lines []string, omitted int, stdout, stderr io.Writer) error {
	for _, line := range lines {
		fmt.Fprintf(stderr, "warning: %s\n", line)
	}
	if _, err := stdout.Write(out); err != nil {
		return fmt.Errorf("writing the output: %w", err)
	}
	if omitted > 0 {
		return fmt.Errorf("%d object(s) not converted; see the warnings above", omitted)
	}
	return nil
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
