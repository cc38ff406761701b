// Command kubectl-buildsmith is a kubectl plugin for buildsmith. On the
// PATH, it runs as `kubectl buildsmith <command>`.
//
// Commands:
//
//	convert -f FILE|-             convert kpack builder manifests to buildsmith manifests
//	convert --builder-toml FILE|- --tag REF
//	                              convert a pack builder.toml to buildsmith manifests
//	reconcile KIND/NAME [--wait]  reconcile an object now, and wait until it is Ready
//	status [-A] [-o FORMAT]       every buildsmith object, one line each
//	receivers [-A]                each Receiver's webhook path and what it wakes
//	sbom KIND/NAME                a builder's SBOM, as attached to its image
//	provenance KIND/NAME          a builder's SLSA provenance, as attached to its image
//	completion SHELL              a shell completion script
//	version                       the version of this binary
//
// It speaks as kubectl does: its commands and flags are cobra's and pflag's,
// reconcile and status take kubectl's connection flags (cli-runtime's
// ConfigFlags: --kubeconfig, --context, -n/--namespace, -s/--server,
// --token, --as, …) and status kubectl's output flag (cli-runtime's
// PrintFlags: -o json|yaml|name|jsonpath=…|go-template=…, and wide).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/buildsmith/buildsmith/pkg/attest"
)

// version is set by release builds (hack/release.sh: -ldflags -X
// main.version=vX.Y.Z); `go build` and `go install` leave it dev.
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run runs the command line args and returns the exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCommand(genericiooptions.IOStreams{In: stdin, Out: stdout, ErrOut: stderr})
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	var exit exitStatus
	var usage *usageErr
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return int(exit)
	}
	fmt.Fprintf(stderr, "%s: %v\n", pathOf(cmd, "kubectl-buildsmith"), err)
	if errors.As(err, &usage) {
		fmt.Fprintf(stderr, "See '%s -h' for help.\n", pathOf(cmd, "kubectl buildsmith"))
	}
	return 1
}

// exitStatus ends a command that has said why it fails with that status.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// usageErr is an error in how a command was called: its message is followed
// by where to find help.
type usageErr struct{ error }

func usageError(format string, a ...any) error {
	return &usageErr{fmt.Errorf(format, a...)}
}

// pathOf is cmd's path with root for the root command's name: how a user
// types it ("kubectl buildsmith status"), or the program's name before its
// messages ("kubectl-buildsmith status: …").
func pathOf(cmd *cobra.Command, root string) string {
	if cmd.HasParent() {
		return pathOf(cmd.Parent(), root) + " " + cmd.Name()
	}
	return root
}

func newRootCommand(streams genericiooptions.IOStreams) *cobra.Command {
	root := &cobra.Command{
		Use:   "kubectl-buildsmith",
		Short: "Work with buildsmith: convert kpack and pack configurations, reconcile objects, see their status",
		Long: `kubectl buildsmith works with buildsmith, the controller that assembles Cloud Native
Buildpacks builders from ClusterStores, ClusterStacks, ClusterLifecycles, Buildpacks,
Builders and ClusterBuilders.`,
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl buildsmith"},
		// No command is a mistake, told on stderr.
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError("unknown command %q", args[0])
			}
			cmd.SetOut(streams.ErrOut)
			_ = cmd.Usage()
			return exitStatus(1)
		},
		Args:          cobra.ArbitraryArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError("%v", err) })
	root.AddCommand(newConvertCommand(streams), newReconcileCommand(streams), newStatusCommand(streams),
		newReceiversCommand(streams), newVersionCommand(streams),
		newAttestationCommand(streams, "sbom", "SBOM (SPDX)", attest.SPDXPredicateType),
		newAttestationCommand(streams, "provenance", "SLSA provenance", attest.ProvenancePredicateType))
	return root
}

func newVersionCommand(streams genericiooptions.IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "The version of this binary (dev unless built by a release)",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprintf(streams.Out, "kubectl-buildsmith %s\n", version)
			return nil
		},
	}
}

// noArgs refuses arguments, as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError("takes no arguments, got %q", args)
	}
	return nil
}
