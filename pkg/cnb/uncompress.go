package cnb

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// DefaultMaxZstdWindow bounds the window a zstd layer may ask its reader to
// keep, by default: what zstd itself uses up to level 19 (8 MiB, window log
// 23), and so what image tools make; only --long asks for more.
const DefaultMaxZstdWindow = 8 << 20

// Uncompressed returns the content of a layer's blob r, as its first bytes
// say it is: gunzipped (gzip's window is 32 KiB), decoded as zstd within a
// window of at most maxWindow bytes and on this goroutine alone, or as it
// is (an uncompressed tar). A zstd frame's header names the window its
// reader must keep, up to gigabytes; the reader ggcr's layers use allows
// 512 MiB, which a 67 KB layer can ask for.
func Uncompressed(r io.Reader, maxWindow int64) (io.ReadCloser, error) {
	if maxWindow <= 0 {
		maxWindow = DefaultMaxZstdWindow
	}
	br := bufio.NewReader(r)
	magic, err := br.Peek(4)
	if err != nil && err != io.EOF {
		return nil, err
	}
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		return gzip.NewReader(br)
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		// The memory bound is the window's too, for frames of a single
		// segment, whose window is their declared content size.
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(uint64(maxWindow)), zstd.WithDecoderMaxMemory(uint64(maxWindow)))
		if err != nil {
			return nil, err
		}
		return &zstdReader{zr: zr, maxWindow: maxWindow}, nil
	}
	return io.NopCloser(br), nil
}

// zstdReader says which bound a frame broke.
type zstdReader struct {
	zr        *zstd.Decoder
	maxWindow int64
}

func (z *zstdReader) Read(p []byte) (int, error) {
	n, err := z.zr.Read(p)
	if errors.Is(err, zstd.ErrWindowSizeExceeded) || errors.Is(err, zstd.ErrDecoderSizeExceeded) {
		err = fmt.Errorf("its zstd frame asks for a window larger than the %d bytes allowed (--max-zstd-window): %w", z.maxWindow, err)
	}
	return n, err
}

func (z *zstdReader) Close() error { z.zr.Close(); return nil }
