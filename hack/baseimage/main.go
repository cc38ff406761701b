// Command baseimage builds the controller image's base and pushes it: for
// linux/amd64 and linux/arm64, one layer holding /etc/passwd and /etc/group
// entries for the non-root user the controller runs as, and the Mozilla root
// certificates (from golang.org/x/crypto/x509roots, pinned in go.mod) at
// /etc/ssl/certs/ca-certificates.crt. Nothing is downloaded but what go.mod
// pins, and every byte is fixed by the source (no timestamps), so the same
// commit gives the same digest. It prints the pushed index by digest.
//
//	go run ./hack/baseimage --repo registry.example/buildsmith/controller-base [--insecure]
//
// make image runs it unless BASE_IMAGE names another base (a release may
// use a distroless one).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func main() {
	repo := flag.String("repo", "", "repository to push the base to (REGISTRY/PATH)")
	tag := flag.String("tag", "latest", "tag to push it under")
	insecure := flag.Bool("insecure", false, "the registry speaks plain HTTP")
	flag.Parse()
	if err := run(*repo, *tag, *insecure); err != nil {
		fmt.Fprintln(os.Stderr, "baseimage:", err)
		os.Exit(1)
	}
}

func run(repo, tag string, insecure bool) error {
	if repo == "" {
		return fmt.Errorf("--repo is required")
	}
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.NewTag(repo+":"+tag, opts...)
	if err != nil {
		return err
	}
	index, err := Index()
	if err != nil {
		return err
	}
	if err := remote.WriteIndex(ref, index, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return err
	}
	digest, err := index.Digest()
	if err != nil {
		return err
	}
	fmt.Println(ref.Context().Digest(digest.String()).String())
	return nil
}
