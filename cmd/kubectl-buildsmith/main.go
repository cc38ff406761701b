// Command kubectl-buildsmith is a kubectl plugin for buildsmith. On the
// PATH, it runs as `kubectl buildsmith <command>`.
//
// Commands:
//
//	convert -f FILE|-             convert kpack builder manifests to buildsmith manifests
//	reconcile KIND/NAME [--wait]  reconcile an object now, and wait until it is Ready
//	status [-A]                   every buildsmith object, one line each
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/buildsmith/buildsmith/pkg/kpack"
)

// command is a subcommand. run gets the arguments after the command's name
// and returns the exit status.
type command struct {
	name    string
	summary string
	run     func(args []string, stdin io.Reader, stdout, stderr io.Writer) int
}

// commands are the subcommands, in the order the usage text lists them.
var commands = []command{
	{name: "convert", summary: "convert kpack builder manifests (stores, stacks, builders, buildpacks) to buildsmith manifests", run: runConvert},
	{name: "reconcile", summary: "reconcile an object now (KIND/NAME), and with --wait wait until it is Ready", run: runReconcile},
	{name: "status", summary: "every buildsmith object, one line each: Ready, reason, since when, what it found last", run: runStatus},
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

Reads kpack manifests (experimental.kpack.pivotal.io/v1alpha1 Store, Stack,
CustomBuilder, CustomClusterBuilder; kpack.io/v1alpha1 and v1alpha2
ClusterStore, ClusterStack, Builder, ClusterBuilder, Buildpack,
ClusterBuildpack) and writes the buildsmith manifests to stdout. Other
documents are copied unchanged. Buildpacks and ClusterBuildpacks become
sources of the stores of the builders that use them; a builder without a
store gets one. Include the objects' status (kubectl get -o yaml) so that
builder entries naming a Buildpack without an id can be converted.

Everything not carried over is a warning on stderr:
  warning: <kind>/<namespace>/<name>: <field>: <message>

Exit status: 0 when converted, 1 on an error, or when some object could not
be converted (the output then lacks it; the warnings say why).

Flags:
`

func runConvert(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("convert", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.Usage = func() {} // printed below: -h on stdout, mistakes on stderr
	var file string
	flags.StringVar(&file, "f", "", "the manifests to convert: a file, or - for stdin")
	flags.StringVar(&file, "filename", "", "same as -f")
	printUsage := func(w io.Writer) {
		fmt.Fprint(w, convertUsage)
		flags.SetOutput(w)
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout)
			return 0
		}
		printUsage(stderr)
		return 1
	}
	if file == "" || flags.NArg() > 0 {
		fmt.Fprintln(stderr, "kubectl-buildsmith convert: give exactly one input, with -f FILE or -f - for stdin")
		return 1
	}

	in := stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			fmt.Fprintf(stderr, "kubectl-buildsmith convert: %v\n", err)
			return 1
		}
		defer f.Close()
		in = f
	}
	out, warnings, err := kpack.Convert(in)
	if err != nil {
		fmt.Fprintf(stderr, "kubectl-buildsmith convert: %v\n", err)
		return 1
	}
	omitted := 0
	for _, w := range warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
		if w.Omitted {
			omitted++
		}
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
