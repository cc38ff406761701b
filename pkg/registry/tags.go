package registry

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
)

// ReasonTooManyTags: a repository lists more tags than a policy may choose
// from (Options.MaxTags).
const ReasonTooManyTags = "TooManyTags"

// Bounds on a tag listing beside Options.MaxTags: a page's body (a page of
// a thousand tags is about 40 KiB), and the pages, so that a registry
// answering a tag a page cannot hold a reconcile for a hundred thousand
// requests.
const (
	maxTagPageSize = 1 << 20
	tagsPerPage    = 1000 // asked for; registries may send fewer
	minTagsPerPage = 100  // the fewest a page, on average, the page bound allows for
)

// ListTags lists the tags of repo, page by page: each page's body is
// bounded, each next page must be on the registry's own host (ggcr checks
// the Link header), and more than Options.MaxTags tags fail the listing
// (ReasonTooManyTags, permanent: a policy choosing among the first ones
// would miss the newest, which a registry lists in no particular order).
func (a Access) ListTags(ctx context.Context, repo name.Repository) ([]string, error) {
	c := a.client
	repo = c.hosts.reference(repo.Tag("latest")).Context()
	maxTags := c.opts.MaxTags
	maxPages := maxTags/minTagsPerPage + 1
	var tags []string
	err := c.do(ctx, repo, c.opts.Timeout, func(ctx context.Context, s *session) error {
		tags = tags[:0] // an in-call retry lists again
		lister, err := s.puller.Lister(ctx, repo)
		if err != nil {
			return err
		}
		for pages := 1; lister.HasNext(); pages++ {
			if pages > maxPages {
				return permanentError(ReasonTooManyTags, repo.RegistryStr(), fmt.Errorf(
					"%s: the registry answered more than %d pages of tags, more than a listing of %d tags at most (--registry-max-tags) needs",
					repo, maxPages, maxTags))
			}
			page, err := lister.Next(ctx)
			if err != nil {
				return err
			}
			if len(tags)+len(page.Tags) > maxTags {
				return permanentError(ReasonTooManyTags, repo.RegistryStr(), fmt.Errorf(
					"%s has more than %d tags (--registry-max-tags): too many to choose a version from", repo, maxTags))
			}
			tags = append(tags, page.Tags...)
		}
		return nil
	}, a.keychain)
	if err != nil {
		return nil, err
	}
	return tags, nil
}
