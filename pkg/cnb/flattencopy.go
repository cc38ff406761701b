package cnb

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// Copying a buildpack layer's entries into a flattened layer: within the
// budget, checked against its DiffID, and the scratch file's errors told
// apart from the layer's.

// entryCopier copies tar entries into out, a directory only the first
// time it comes, within a budget of bytes.
type entryCopier struct {
	out    *tar.Writer
	dirs   map[[sha256.Size]byte]bool // by a hash of the cleaned path
	budget *FlattenBudget
}

// copyLayer copies the entries of the uncompressed layer r, whose DiffID
// its buildpackage declares as diffID. Every byte read counts against the
// budget, whether its entry is copied or skipped (a layer of a million
// copies of one directory is small compressed), and r is read to its end,
// where its digest must be the DiffID: the flattened layer is remembered
// by the DiffIDs it was made of, so they must be the content's.
func (c *entryCopier) copyLayer(r io.Reader, diffID string) error {
	digest := sha256.New()
	counted := &budgetReader{r: io.TeeReader(r, digest), budget: c.budget}
	if err := c.copyAll(counted); err != nil {
		return err
	}
	// The tar's end and what a tar writer pads after it.
	if _, err := io.Copy(io.Discard, counted); err != nil {
		return err
	}
	if got := "sha256:" + hex.EncodeToString(digest.Sum(nil)); got != diffID {
		return fmt.Errorf("its content is %s, not the DiffID %s its buildpackage declares", got, diffID)
	}
	return nil
}

func (c *entryCopier) copyAll(r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if len(hdr.Name) > maxEntryName || len(hdr.Linkname) > maxEntryName {
			return fmt.Errorf("an entry's name or link is longer than %d bytes", maxEntryName)
		}
		if isSparse(hdr) {
			// Its holes are zeros the reader makes without reading a byte:
			// terabytes of them would cost the budget nothing.
			return fmt.Errorf("entry %s is a sparse file, which a buildpack layer has no use for", hdr.Name)
		}
		if hdr.Typeflag == tar.TypeDir {
			dir := sha256.Sum256([]byte(path.Clean("/" + hdr.Name)))
			if c.dirs[dir] {
				continue // every buildpack's layer has /cnb/buildpacks
			}
			if len(c.dirs) == maxFlattenedDirs {
				return failure.Permanentf(ReasonFlattenTooLarge, "the flattened layers would hold more than %d directories: flatten fewer buildpacks", maxFlattenedDirs)
			}
			c.dirs[dir] = true
		}
		if err := c.out.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(c.out, tr); err != nil {
			return err
		}
	}
}

// isSparse says whether hdr is a sparse file, in GNU's old form or PAX's.
func isSparse(hdr *tar.Header) bool {
	if hdr.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// budgetReader charges every byte read from r to a budget, and fails once
// it is spent.
type budgetReader struct {
	r      io.Reader
	budget *FlattenBudget
}

// Read fails once the budget is spent, and every time after: a reader that
// got all it asked for may drop the error that came with it (io.ReadFull).
func (b *budgetReader) Read(p []byte) (int, error) {
	if b.budget.Left < 0 {
		return 0, b.spent()
	}
	n, err := b.r.Read(p)
	if b.budget.Left -= int64(n); b.budget.Left < 0 {
		return n, b.spent()
	}
	return n, err
}

func (b *budgetReader) spent() error {
	return failure.Permanentf(ReasonFlattenTooLarge, "the buildpack layers to flatten are larger than %d bytes uncompressed (--max-flattened-bytes): "+
		"flatten fewer buildpacks", b.budget.Max)
}

// ScratchWriter marks the errors of writing w, a scratch file, so that they
// are not taken for those of the layer being read meanwhile.
func ScratchWriter(w io.Writer) io.Writer { return scratchWriter{w} }

type scratchWriter struct{ w io.Writer }

func (s scratchWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if err != nil {
		err = ScratchError(err)
	}
	return n, err
}

// ScratchError classifies an error of the scratch directory: Transient
// ScratchUnavailable (it fills and empties with the pushes under way).
func ScratchError(err error) error {
	if _, ok := failure.As(err); ok {
		return err
	}
	return &failure.Error{Class: failure.Transient, Reason: ReasonScratchUnavailable,
		Err: fmt.Errorf("writing a flattened layer to the controller's scratch directory: %w", err)}
}
