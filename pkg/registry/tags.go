package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// Reasons of a tag listing that failed on what the registry answered.
const (
	// ReasonTooManyTags: more tags than Options.MaxTags, or pages that
	// would hold more.
	ReasonTooManyTags = "TooManyTags"
	// ReasonInvalidTagList: an answer that is not a tag list, a next page
	// elsewhere, or a redirect.
	ReasonInvalidTagList = "InvalidTagList"
)

// Bounds on a tag listing beside Options.MaxTags: a page's body (a page of
// a thousand tags is about 40 KiB), and the pages, so that a registry
// answering a tag a page cannot hold a reconcile for ten thousand
// requests.
const (
	maxTagPageSize = 1 << 20
	tagsPerPage    = 1000 // asked for; registries may send fewer
	minTagsPerPage = 100  // the fewest a page, on average, the page bound allows for
)

// ListTags lists the tags of repo. It pages itself rather than through
// ggcr's Lister, whose bounds are not ours: each page is the listing path
// of repo's own registry (a Link header gives only the next query; the
// body's "next" is not read), read through a size bound, never redirected;
// at most Options.MaxTags tags in at most MaxTags/100+1 pages. What the
// registry answered wrong is Waiting (polled; a registry fixed, or tags
// pruned, need no change to the object): ReasonTooManyTags, or
// ReasonInvalidTagList.
func (a Access) ListTags(ctx context.Context, repo name.Repository) ([]string, error) {
	c := a.client
	repo = c.hosts.reference(repo.Tag("latest")).Context()
	var tags []string
	err := c.do(ctx, repo, c.opts.Timeout, func(ctx context.Context, s *session) error {
		rt, err := s.reader(ctx, repo)
		if err != nil {
			return err
		}
		tags, err = c.listTags(ctx, &http.Client{Transport: rt, CheckRedirect: refuseRedirect}, repo)
		return err
	}, a.keychain)
	if err != nil {
		return nil, err
	}
	return tags, nil
}

func (c *Client) listTags(ctx context.Context, client *http.Client, repo name.Repository) ([]string, error) {
	listing := url.URL{Scheme: repo.Scheme(), Host: repo.RegistryStr(), Path: fmt.Sprintf("/v2/%s/tags/list", repo.RepositoryStr())}
	query := "n=" + strconv.Itoa(tagsPerPage)
	maxTags := c.opts.MaxTags
	maxPages := maxTags/minTagsPerPage + 1
	var tags []string
	for pages := 1; ; pages++ {
		if pages > maxPages {
			return nil, listingError(repo, ReasonTooManyTags, "its tags come in more than %d pages, more than %d tags (--registry-max-tags) need", maxPages, maxTags)
		}
		listing.RawQuery = query
		page, next, err := readTagPage(ctx, client, listing.String(), repo)
		if err != nil {
			return nil, err
		}
		if len(tags)+len(page) > maxTags {
			return nil, listingError(repo, ReasonTooManyTags, "it has more than %d tags (--registry-max-tags): too many to choose a version from", maxTags)
		}
		tags = append(tags, page...)
		if next == "" {
			return tags, nil
		}
		query = next
	}
}

// readTagPage reads the page of tags at u, and the query of the next page
// ("" for the last).
func readTagPage(ctx context.Context, client *http.Client, u string, repo name.Repository) (tags []string, next string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	if err := transport.CheckError(resp, http.StatusOK); err != nil {
		return nil, "", err
	}
	if resp.ContentLength > maxTagPageSize {
		return nil, "", listingError(repo, ReasonTooManyTags, "a page of its tags is %s, more than the %s allowed", byteSize(resp.ContentLength), byteSize(maxTagPageSize))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxTagPageSize+1))
	if err != nil {
		return nil, "", err
	}
	if len(body) > maxTagPageSize {
		return nil, "", listingError(repo, ReasonTooManyTags, "a page of its tags is larger than the %s allowed", byteSize(maxTagPageSize))
	}
	var page struct {
		Tags []string `json:"tags"`
	}
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&page); err != nil {
		return nil, "", listingError(repo, ReasonInvalidTagList, "the registry answered a tag list that does not read: %v", err)
	}
	next, err = nextPage(resp.Header.Get("Link"), req.URL)
	if err != nil {
		return nil, "", listingError(repo, ReasonInvalidTagList, "%v", err)
	}
	return page.Tags, next, nil
}

// nextPage is the query of the next page a Link header names (RFC 8288,
// as the distribution spec uses it: `<URL>; rel="next"`): only a page of
// the same listing, on the same registry, is followed.
func nextPage(link string, listing *url.URL) (string, error) {
	if link == "" {
		return "", nil
	}
	target, _, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(link), "<"), ">")
	if !ok || !strings.HasPrefix(strings.TrimSpace(link), "<") {
		return "", fmt.Errorf("its Link header does not read as <URL>; rel=\"next\"")
	}
	u, err := url.Parse(target)
	if err != nil {
		return "", fmt.Errorf("its Link header names no URL: %v", err)
	}
	if (u.Host != "" && u.Host != listing.Host) || (u.Path != "" && u.Path != listing.Path) {
		return "", fmt.Errorf("its next page is not %s on the same registry; not followed", listing.Path)
	}
	return u.RawQuery, nil
}

// refuseRedirect: a tag listing is answered by the registry itself.
func refuseRedirect(req *http.Request, _ []*http.Request) error {
	return placed(Place{Host: req.URL.Host}, failure.Waiting, ReasonInvalidTagList, 0,
		errors.New("the registry redirected a tag listing; not followed"))
}

// listingError is a Waiting error of repo's listing.
func listingError(repo name.Repository, reason, format string, args ...any) *failure.Error {
	return placed(Place{Host: repo.RegistryStr(), Repository: repo.RepositoryStr()}, failure.Waiting, reason, 0,
		fmt.Errorf("listing the tags of %s: "+format, append([]any{repo}, args...)...))
}
