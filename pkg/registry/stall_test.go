package registry

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestStallTransport: requests that stop moving are cut after the limit of
// the phase they stopped in; requests that keep moving are never cut, however
// long they take.
func TestStallTransport(t *testing.T) {
	const limit = 300 * time.Millisecond
	const pausedUpload = 2 // KiB, with a pause between them
	trickle := func(w io.Writer, n int) {
		for range n {
			_, _ = w.Write(make([]byte, 1024))
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			time.Sleep(limit / 3)
		}
	}
	tests := []struct {
		name    string
		method  string
		body    int // KiB uploaded at once; negative: trickled a KiB at a time
		handler http.HandlerFunc
		stalled string // "" when the request must succeed
	}{
		{"a read answered at once", "GET", 0, func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }, ""},
		{"a read never answered", "GET", 0, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, "no answer"},
		{"a download that trickles for 2s", "GET", 0, func(w http.ResponseWriter, r *http.Request) { trickle(w, 20) }, ""},
		{"a download that stops halfway", "GET", 0, func(w http.ResponseWriter, r *http.Request) {
			trickle(w, 2)
			<-r.Context().Done()
		}, "the answer's body stopped"},
		{"an upload that trickles for 2s", "PUT", -20, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusCreated)
		}, ""},
		{"an upload that pauses for twice the answer timeout", "PUT", -pausedUpload, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusCreated)
		}, ""},
		{"a write never answered", "PUT", 1, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
		}, "no answer"},
		{"an upload answered slowly after it was sent (writes wait longer)", "PUT", 1, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			time.Sleep(2 * limit)
			w.WriteHeader(http.StatusCreated)
		}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T, network *registrytest.Network) {
				url := network.Serve(t, tc.handler)
				// Uploads may pause far longer than downloads.
				rt := &stallTransport{next: network.Transport(), answer: limit, writeAnswer: 4 * limit, idle: 10 * limit}
				var body io.Reader
				if tc.body > 0 {
					// A reader without Len: streamed, like a layer upload.
					body = io.MultiReader(bytes.NewReader(make([]byte, tc.body<<10)))
				} else if tc.body < 0 {
					pr, pw := io.Pipe()
					go func() {
						if tc.body == -pausedUpload {
							trickle(pw, 1)
							time.Sleep(2 * limit)
						}
						trickle(pw, -tc.body)
						_ = pw.Close()
					}()
					body = pr
				}
				req, err := http.NewRequest(tc.method, url+"/v2/team/app/blobs/x", body)
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				resp, err := rt.RoundTrip(req)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
				took := time.Since(start)
				var stalled *stallError
				switch {
				case tc.stalled == "" && err != nil:
					t.Fatalf("cut after %v: %v", took, err)
				case tc.stalled == "":
					return
				case !errors.As(err, &stalled) || stalled.what != tc.stalled:
					t.Fatalf("error %v, want a stall %q", err, tc.stalled)
				case took > 4*limit+time.Second:
					t.Errorf("cut after %v, limit %v", took, limit)
				}
			})
		})
	}
}
