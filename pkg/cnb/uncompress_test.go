package cnb

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// zstdOf is content compressed as zstd with a window of window bytes
// declared in its frame header (content size unknown, as a stream).
func zstdOf(t *testing.T, content []byte, window int) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf, zstd.WithWindowSize(window), zstd.WithSingleSegment(false))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(content); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// windowedZstd is a zstd frame whose header asks for a window of
// 2^windowLog bytes, holding one raw block of content.
func windowedZstd(windowLog int, content []byte) []byte {
	out := []byte{0x28, 0xb5, 0x2f, 0xfd, 0, byte(windowLog-10) << 3}
	return rawBlock(out, content)
}

func rawBlock(out, content []byte) []byte {
	block := uint32(len(content))<<3 | 1 // last block, raw
	out = append(out, byte(block), byte(block>>8), byte(block>>16))
	return append(out, content...)
}

// singleSegmentZstd is a zstd frame of one segment declaring size bytes of
// content (its window), holding one raw block of content.
func singleSegmentZstd(size uint32, content []byte) []byte {
	out := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x20 | 2<<6} // single segment, 4-byte content size
	return rawBlock(binary.LittleEndian.AppendUint32(out, size), content)
}

func TestUncompressed(t *testing.T) {
	content := []byte(strings.Repeat("buildpack layer ", 4096))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(content)
	_ = zw.Close()
	for name, tc := range map[string]struct {
		blob     []byte
		wantErr  string
		maxAlloc uint64
	}{
		"gzip":                          {blob: gz.Bytes()},
		"zstd within the window":        {blob: zstdOf(t, content, 1<<20)},
		"zstd of 8 MiB, declared":       {blob: windowedZstd(23, content)},
		"uncompressed":                  {blob: content},
		"zstd asking for 512 MiB":       {blob: windowedZstd(29, content), wantErr: "--max-zstd-window", maxAlloc: 64 << 20},
		"one segment declaring 512 MiB": {blob: singleSegmentZstd(512<<20, content), wantErr: "--max-zstd-window", maxAlloc: 64 << 20},
	} {
		t.Run(name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			rc, err := Uncompressed(bytes.NewReader(tc.blob), DefaultMaxZstdWindow)
			var got []byte
			if err == nil {
				got, err = io.ReadAll(rc)
				rc.Close()
			}
			runtime.ReadMemStats(&after)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one naming %s", err, tc.wantErr)
				}
				if alloc := after.TotalAlloc - before.TotalAlloc; alloc > tc.maxAlloc {
					t.Errorf("%d MiB allocated refusing it, want at most %d", alloc>>20, tc.maxAlloc>>20)
				}
				return
			}
			if err != nil || !bytes.Equal(got, content) {
				t.Fatalf("read %d bytes, %v; want the %d bytes of content", len(got), err, len(content))
			}
		})
	}
}
