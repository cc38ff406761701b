package registrytest

import (
	"errors"
	"net/http"
	"syscall"
	"testing"
	"testing/synctest"
)

// TestNetworkFailsAsTCPDoes: on a Network, a dial to an address nobody
// listens on is refused, and a connection the registry resets fails with
// ECONNRESET, as over TCP; the classification of the client sees no
// difference.
func TestNetworkFailsAsTCPDoes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewNetwork()
		f := NewOn(t, n)
		client := &http.Client{Transport: n.Transport()}
		f.Inject("", "/reset", -1, Reset)
		if _, err := client.Get("http://" + f.Addr + "/reset"); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("a reset connection: %v, want ECONNRESET", err)
		}
		f.Down()
		if _, err := client.Get("http://" + f.Addr + "/v2/"); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("nobody listening: %v, want ECONNREFUSED", err)
		}
		f.Up()
		resp, err := client.Get("http://" + f.Addr + "/v2/")
		if err != nil {
			t.Fatalf("listening again: %v", err)
		}
		_ = resp.Body.Close()
		client.CloseIdleConnections()
	})
}
