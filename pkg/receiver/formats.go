package receiver

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
)

// manifestTypes are the media types of what a push of an image sends last:
// a distribution event of another type is a blob upload, not a push of an
// image.
var manifestTypes = map[string]bool{
	"application/vnd.oci.image.manifest.v1+json":                true,
	"application/vnd.oci.image.index.v1+json":                   true,
	"application/vnd.docker.distribution.manifest.v2+json":      true,
	"application/vnd.docker.distribution.manifest.list.v2+json": true,
	"application/vnd.docker.distribution.manifest.v1+prettyjws": true,
}

// registryEvent is an event of the distribution registry's notifications,
// and of ACR's webhooks, which took their shape.
type registryEvent struct {
	Action string `json:"action"`
	Target struct {
		MediaType  string `json:"mediaType"`
		Repository string `json:"repository"`
		Tag        string `json:"tag"`
		URL        string `json:"url"`
	} `json:"target"`
	Request struct {
		Host string `json:"host"`
	} `json:"request"`
}

// pushes are the event's pushes: its repository at the host the pusher
// spoke to, and at the host of the event's URL (the registry's own name
// for itself) when that differs. ACR sends no media type.
func (e registryEvent) pushes(mediaTypeRequired bool) []Push {
	if e.Action != "push" || (mediaTypeRequired || e.Target.MediaType != "") && !manifestTypes[e.Target.MediaType] {
		return nil
	}
	hosts := []string{e.Request.Host}
	if u, err := url.Parse(e.Target.URL); err == nil && u.Host != "" && u.Host != e.Request.Host {
		hosts = append(hosts, u.Host)
	}
	var out []Push
	for _, host := range hosts {
		if p, ok := push(host+"/"+e.Target.Repository, e.Target.Tag); host != "" && ok {
			out = append(out, p)
		}
	}
	return out
}

// readDistribution reads an envelope of events.
func readDistribution(_ http.Header, body []byte) ([]Push, error) {
	var envelope struct {
		Events []registryEvent `json:"events"`
	}
	if err := json.Unmarshal(body, &envelope); err != nil {
		return nil, err
	}
	var out []Push
	for _, e := range envelope.Events {
		out = append(out, e.pushes(true)...)
	}
	return out, nil
}

// readACR reads one event.
func readACR(_ http.Header, body []byte) ([]Push, error) {
	var e registryEvent
	if err := json.Unmarshal(body, &e); err != nil {
		return nil, err
	}
	return e.pushes(false), nil
}

// readHarbor reads a PUSH_ARTIFACT event: its resources' URLs are the
// images pushed (by tag, or by digest with the digest as the tag).
func readHarbor(_ http.Header, body []byte) ([]Push, error) {
	var event struct {
		Type      string `json:"type"`
		EventData struct {
			Resources []struct {
				ResourceURL string `json:"resource_url"`
			} `json:"resources"`
		} `json:"event_data"`
	}
	if err := json.Unmarshal(body, &event); err != nil {
		return nil, err
	}
	if event.Type != "PUSH_ARTIFACT" {
		return nil, nil
	}
	var out []Push
	for _, r := range event.EventData.Resources {
		if p, ok := pushOfReference(r.ResourceURL); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// readDockerHub reads a Docker Hub webhook, which only pushes send.
func readDockerHub(_ http.Header, body []byte) ([]Push, error) {
	var event struct {
		PushData struct {
			Tag string `json:"tag"`
		} `json:"push_data"`
		Repository struct {
			RepoName string `json:"repo_name"`
		} `json:"repository"`
	}
	if err := json.Unmarshal(body, &event); err != nil {
		return nil, err
	}
	if p, ok := push("docker.io/"+event.Repository.RepoName, event.PushData.Tag); ok && event.Repository.RepoName != "" {
		return []Push{p}, nil
	}
	return nil, nil
}

// readQuay reads a repository push notification: updated_tags is a list
// of tags, or, as older Quay sent it, an object keyed by them.
func readQuay(_ http.Header, body []byte) ([]Push, error) {
	var event struct {
		DockerURL   string          `json:"docker_url"`
		UpdatedTags json.RawMessage `json:"updated_tags"`
	}
	if err := json.Unmarshal(body, &event); err != nil {
		return nil, err
	}
	if event.DockerURL == "" || len(event.UpdatedTags) == 0 {
		return nil, nil // not a push
	}
	var tags []string
	if err := json.Unmarshal(event.UpdatedTags, &tags); err != nil {
		var byTag map[string]json.RawMessage
		if json.Unmarshal(event.UpdatedTags, &byTag) != nil {
			return nil, err
		}
		for tag := range byTag {
			tags = append(tags, tag)
		}
	}
	var out []Push
	for _, tag := range tags {
		if p, ok := push(event.DockerURL, tag); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// readGitHub reads a package or registry_package event (X-GitHub-Event)
// of a container published to ghcr.io; every other event (a ping) is none.
func readGitHub(header http.Header, body []byte) ([]Push, error) {
	event := header.Get("X-GitHub-Event")
	if event != "package" && event != "registry_package" {
		return nil, nil
	}
	type pkg struct {
		Name           string `json:"name"`
		Namespace      string `json:"namespace"`
		PackageVersion struct {
			PackageURL        string `json:"package_url"`
			ContainerMetadata struct {
				Tag struct {
					Name string `json:"name"`
				} `json:"tag"`
			} `json:"container_metadata"`
		} `json:"package_version"`
		Owner struct {
			Login string `json:"login"`
		} `json:"owner"`
	}
	var payload struct {
		Action          string `json:"action"`
		Package         *pkg   `json:"package"`
		RegistryPackage *pkg   `json:"registry_package"`
	}
	if err := json.Unmarshal(body, &payload); err != nil {
		return nil, err
	}
	p := payload.Package
	if event == "registry_package" {
		p = payload.RegistryPackage
	}
	if p == nil || payload.Action != "published" && payload.Action != "updated" {
		return nil, nil
	}
	tag := p.PackageVersion.ContainerMetadata.Tag.Name
	if out, ok := pushOfReference(p.PackageVersion.PackageURL); ok && strings.Contains(p.PackageVersion.PackageURL, "/") {
		return []Push{{Repository: out.Repository, Tag: tag}}, nil
	}
	// No package URL: ghcr.io/OWNER/NAME, as ghcr names containers.
	if out, ok := push("ghcr.io/"+strings.ToLower(p.Owner.Login)+"/"+strings.ToLower(p.Name), tag); ok && p.Owner.Login != "" {
		return []Push{out}, nil
	}
	return nil, nil
}

// readGCR reads a Pub/Sub push message whose data is Artifact Registry's
// (or Container Registry's) notification: INSERT of tag HOST/PATH:TAG, or
// of digest HOST/PATH@sha256:….
func readGCR(_ http.Header, body []byte) ([]Push, error) {
	var envelope struct {
		Message struct {
			Data string `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(body, &envelope); err != nil {
		return nil, err
	}
	data, err := base64.StdEncoding.DecodeString(envelope.Message.Data)
	if err != nil {
		return nil, err
	}
	var notification struct {
		Action string `json:"action"`
		Digest string `json:"digest"`
		Tag    string `json:"tag"`
	}
	if err := json.Unmarshal(data, &notification); err != nil {
		return nil, err
	}
	if notification.Action != "INSERT" {
		return nil, nil
	}
	if p, ok := pushOfReference(notification.Tag); ok && notification.Tag != "" {
		return []Push{p}, nil
	}
	repo, _, _ := strings.Cut(notification.Digest, "@")
	if p, ok := push(repo, ""); ok && repo != "" {
		return []Push{p}, nil
	}
	return nil, nil
}

// readGeneric reads {"repository": "HOST/PATH", "tag": "TAG"}.
func readGeneric(_ http.Header, body []byte) ([]Push, error) {
	var event struct {
		Repository string `json:"repository"`
		Tag        string `json:"tag"`
	}
	if err := json.Unmarshal(body, &event); err != nil {
		return nil, err
	}
	if p, ok := push(event.Repository, event.Tag); ok && event.Repository != "" {
		return []Push{p}, nil
	}
	return nil, nil
}
