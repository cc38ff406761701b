package registrytest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// likeDistribution gives go-containerregistry's in-memory registry the
// behaviours of the distribution registry that pushes meet: a
// cross-repository mount of a blob it holds answers 201; an image manifest
// naming a blob it lacks is refused with 400 MANIFEST_BLOB_UNKNOWN; and a
// blob sent whole in the POST that opens an upload is ignored (202 and a
// location, as for any POST), unless postTakesBlob. Its blobs are shared by
// all repositories, so a blob held anywhere is held everywhere; DeleteBlob
// removes one.
type likeDistribution struct {
	next          http.Handler
	postTakesBlob bool
	// referrers: the registry has the referrers API, and answers the PUT
	// of a manifest with a subject with OCI-Subject, as the distribution
	// spec asks (ggcr's registry lists referrers but sends no header).
	referrers bool
}

func (d likeDistribution) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	repo, rest, ok := splitV2(r.URL.Path)
	switch {
	case ok && r.Method == http.MethodPost && rest == "blobs/uploads/" && r.URL.Query().Get("mount") != "":
		digest := r.URL.Query().Get("mount")
		if d.holds(repo, digest) {
			w.Header().Set("Location", fmt.Sprintf("/v2/%s/blobs/%s", repo, digest))
			w.Header().Set("Docker-Content-Digest", digest)
			w.WriteHeader(http.StatusCreated)
			return
		}
		// Not held: an upload session, as distribution opens.
		r.URL.RawQuery = ""
	case ok && r.Method == http.MethodPost && rest == "blobs/uploads/" && r.URL.Query().Get("digest") != "" && !d.postTakesBlob:
		_, _ = io.Copy(io.Discard, r.Body)
		r.URL.RawQuery, r.Body, r.ContentLength = "", http.NoBody, 0
	case ok && r.Method == http.MethodPut && strings.HasPrefix(rest, "manifests/") &&
		types.MediaType(r.Header.Get("Content-Type")).IsImage():
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if m, err := v1.ParseManifest(bytes.NewReader(body)); err == nil && d.referrers && m.Subject != nil {
			w.Header().Set("OCI-Subject", m.Subject.Digest.String())
		}
		if m, err := v1.ParseManifest(bytes.NewReader(body)); err == nil {
			for _, desc := range append([]v1.Descriptor{m.Config}, m.Layers...) {
				if desc.MediaType.IsDistributable() && !d.holds(repo, desc.Digest.String()) {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusBadRequest)
					fmt.Fprintf(w, `{"errors":[{"code":"MANIFEST_BLOB_UNKNOWN","message":"blob unknown to registry","detail":%q}]}`, desc.Digest)
					return
				}
			}
		}
	}
	d.next.ServeHTTP(w, r)
}

// holds asks the registry behind about a blob.
func (d likeDistribution) holds(repo, digest string) bool {
	rec := httptest.NewRecorder()
	d.next.ServeHTTP(rec, httptest.NewRequest(http.MethodHead, "/v2/"+repo+"/blobs/"+url.PathEscape(digest), nil))
	return rec.Code == http.StatusOK
}

// splitV2 splits /v2/REPO/(blobs|manifests)/... into REPO and the rest.
func splitV2(path string) (repo, rest string, ok bool) {
	path, ok = strings.CutPrefix(path, "/v2/")
	if !ok {
		return "", "", false
	}
	for _, kind := range []string{"/blobs/", "/manifests/"} {
		if i := strings.LastIndex(path, kind); i > 0 {
			return path[:i], path[i+1:], true
		}
	}
	return "", "", false
}
