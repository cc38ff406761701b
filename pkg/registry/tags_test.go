package registry

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"

	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestListTags: the real (ggcr) registry's tags in one request.
func TestListTags(t *testing.T) {
	f := registrytest.New(t)
	for _, tag := range []string{"1.0.0", "1.1.0", "latest"} {
		f.Push("team/app:" + tag)
	}
	f.ForgetRequests()
	c := newTestClient(t, Options{})
	tags, err := c.As(nil).ListTags(context.Background(), f.Ref("team/app").Context())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(tags)
	if want := []string{"1.0.0", "1.1.0", "latest"}; !slices.Equal(tags, want) {
		t.Errorf("tags %v, want %v", tags, want)
	}
	if n := f.Count("GET", "/tags/list"); n != 1 {
		t.Errorf("%d listing requests, want 1", n)
	}
}

// pagesOf serves tags size a page, each page linking to the next with
// link (given the tag the next page starts after; "" for the last page).
func pagesOf(tags []string, size int, link func(r *http.Request, last string) string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		start := 0
		if last := r.URL.Query().Get("last"); last != "" {
			start = slices.Index(tags, last) + 1
		}
		end := min(start+size, len(tags))
		if end < len(tags) {
			w.Header().Set("Link", link(r, tags[end-1]))
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"name":"team/app","tags":["%s"]}`, strings.Join(tags[start:end], `","`))
	}
}

func sameHostLink(r *http.Request, last string) string {
	return fmt.Sprintf(`<%s?n=3&last=%s>; rel="next"`, r.URL.Path, last)
}

// TestListTagsBounded: pages are followed on the registry's own listing
// path only; more tags than MaxTags, more pages than they take, a page
// over its size, an answer that is no tag list, a next page elsewhere and
// a redirect fail the listing at once, Waiting (the registry must change),
// after as few requests as that takes.
func TestListTagsBounded(t *testing.T) {
	many := make([]string, 12)
	for i := range many {
		many[i] = fmt.Sprintf("1.%d.0", i)
	}
	elsewhere := registrytest.New(t)
	tests := []struct {
		name     string
		maxTags  int
		serve    func(http.ResponseWriter, *http.Request)
		want     []string // nil: an error
		reason   string
		says     string
		requests int
	}{
		{name: "pages followed", maxTags: 1000, serve: pagesOf(many, 5, sameHostLink), want: many, requests: 3},
		{
			name: "an absolute link on the same registry", maxTags: 1000, want: many, requests: 3,
			serve: pagesOf(many, 5, func(r *http.Request, last string) string {
				return fmt.Sprintf(`<http://%s%s?n=5&last=%s>; rel="next"`, r.Host, r.URL.Path, last)
			}),
		},
		{
			name: "the body's next is not read", maxTags: 1000, want: []string{"1"}, requests: 1,
			serve: registrytest.Answer(200, nil, fmt.Sprintf(`{"name":"team/app","tags":["1"],"next":"http://%s/v2/team/app/tags/list"}`, elsewhere.Addr)),
		},
		{
			name: "more tags than allowed", maxTags: 107, serve: pagesOf(append(many, make([]string, 100)...), 100, sameHostLink),
			reason: ReasonTooManyTags, says: "more than 107 tags (--registry-max-tags)", requests: 2,
		},
		{
			name: "endless empty pages", maxTags: 200,
			serve: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Link", fmt.Sprintf(`<%s?n=3&last=x>; rel="next"`, r.URL.Path))
				_, _ = fmt.Fprint(w, `{"name":"team/app","tags":[]}`)
			},
			reason: ReasonTooManyTags, says: "more than 3 pages", requests: 3,
		},
		{
			name: "a page too large", maxTags: 100,
			serve: func(w http.ResponseWriter, r *http.Request) {
				_, _ = fmt.Fprintf(w, `{"name":"team/app","tags":["%s"]}`, strings.Repeat(`a","`, maxTagPageSize/2))
			},
			reason: ReasonTooManyTags, says: "a page of its tags is larger than the 1.0 MiB allowed", requests: 1,
		},
		{
			name: "a page declared too large", maxTags: 100,
			serve:  registrytest.Answer(200, map[string]string{"Content-Length": fmt.Sprint(2 << 20)}, ""),
			reason: ReasonTooManyTags, says: "a page of its tags is 2.0 MiB", requests: 1,
		},
		{
			name: "not a tag list", maxTags: 100, serve: registrytest.Answer(200, nil, "<html>maintenance</html>"),
			reason: ReasonInvalidTagList, says: "does not read", requests: 1,
		},
		{
			name: "a next page on another path", maxTags: 100,
			serve:  pagesOf(many, 5, func(*http.Request, string) string { return `</v2/other/tags/list?n=5>; rel="next"` }),
			reason: ReasonInvalidTagList, says: "is not /v2/team/app/tags/list on the same registry", requests: 1,
		},
		{
			name: "a next page on another registry", maxTags: 100,
			serve: pagesOf(many, 5, func(*http.Request, string) string {
				return fmt.Sprintf(`<http://%s/v2/team/app/tags/list?n=5>; rel="next"`, elsewhere.Addr)
			}),
			reason: ReasonInvalidTagList, says: "not followed", requests: 1,
		},
		{
			name: "a redirect", maxTags: 100,
			serve:  registrytest.Answer(http.StatusFound, map[string]string{"Location": "/v2/team/other/tags/list"}, ""),
			reason: ReasonInvalidTagList, says: "redirected a tag listing", requests: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			elsewhere.ForgetRequests()
			f := registrytest.New(t)
			f.Inject("GET", "/tags/list", -1, tc.serve)
			c := newTestClient(t, Options{MaxTags: tc.maxTags})
			tags, err := c.As(nil).ListTags(context.Background(), f.Ref("team/app").Context())
			if tc.want != nil {
				if err != nil || !slices.Equal(tags, tc.want) {
					t.Fatalf("ListTags = %v, %v; want %v", tags, err, tc.want)
				}
			} else {
				e, ok := failure.As(err)
				if !ok || e.Class != failure.Waiting || e.Reason != tc.reason || !strings.Contains(err.Error(), tc.says) {
					t.Fatalf("error %v, want a Waiting %s saying %q", err, tc.reason, tc.says)
				}
				t.Log(err)
			}
			if n := f.Count("GET", "/tags/list"); n != tc.requests {
				t.Errorf("%d listing requests, want %d", n, tc.requests)
			}
			if n := f.Count("GET", "/team/other/"); n != 0 {
				t.Errorf("%d requests to the redirect's target, want none", n)
			}
			if n := elsewhere.Count("", ""); n != 0 {
				t.Errorf("%d requests to another registry, want none", n)
			}
		})
	}
}

// TestListTagsOverTLS: a registry on an address ggcr guesses speaks plain
// HTTP (loopback, private networks) and that answers over HTTPS lists its
// pages over HTTPS: the Link's next page is the same listing, whatever
// scheme the registry wrote into it.
func TestListTagsOverTLS(t *testing.T) {
	tags := []string{"1.0.0", "1.1.0", "1.2.0", "2.0.0"}
	paged := pagesOf(tags, 3, func(r *http.Request, last string) string {
		return fmt.Sprintf(`<https://%s%s?n=3&last=%s>; rel="next"`, r.Host, r.URL.Path, last)
	})
	inner := ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/tags/list") {
			paged(w, r)
			return
		}
		inner.ServeHTTP(w, r)
	}))
	defer srv.Close()
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	repo, err := name.NewRepository(strings.TrimPrefix(srv.URL, "https://") + "/team/app")
	if err != nil {
		t.Fatal(err)
	}
	if repo.Scheme() != "http" {
		t.Fatalf("ggcr guesses %s for %s; the test needs a host it guesses http for", repo.Scheme(), repo.RegistryStr())
	}
	got, err := newTestClient(t, Options{CACertificates: ca}).As(nil).ListTags(context.Background(), repo)
	if err != nil || !slices.Equal(got, tags) {
		t.Errorf("ListTags = %v, %v; want %v", got, err, tags)
	}
}
