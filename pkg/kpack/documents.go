package kpack

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"

	"sigs.k8s.io/yaml"
)

// document is one YAML document of the input, or one item of a List
// document (what `kubectl get -o yaml` prints for several objects).
type document struct {
	where string // "document 2 (starting at line 14)", "…, item 3": for errors
	seq   int    // position among all documents and items, for ordering
	raw   []byte // the text as read, passed through verbatim; nil for List items
	obj   map[string]any
}

// readDocuments splits a YAML stream into its documents and decodes each.
// Documents holding only comments or null are skipped; a document that is
// not a mapping, or not YAML, is an error naming its index and first line.
func readDocuments(in io.Reader) ([]document, error) {
	chunks, err := splitDocuments(in)
	if err != nil {
		return nil, err
	}
	var docs []document
	index := 0
	for _, chunk := range chunks {
		var value any
		// Strict: YAML forbids duplicate keys, and a lax decoder would keep one
		// of them without a word.
		if err := yaml.UnmarshalStrict(chunk.text, &value); err != nil {
			return nil, fmt.Errorf("document %d (starting at line %d): %w", index+1, chunk.line, err)
		}
		if value == nil {
			continue // only comments
		}
		index++
		where := fmt.Sprintf("document %d (starting at line %d)", index, chunk.line)
		obj, ok := value.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: not a Kubernetes object (a YAML mapping)", where)
		}
		if obj["apiVersion"] != "v1" || obj["kind"] != "List" {
			docs = append(docs, document{where: where, seq: len(docs), raw: chunk.text, obj: obj})
			continue
		}
		items, ok := obj["items"].([]any)
		if !ok && obj["items"] != nil {
			return nil, fmt.Errorf("%s: items of a List must be a list", where)
		}
		for i, item := range items {
			itemWhere := fmt.Sprintf("%s, item %d", where, i+1)
			itemObj, ok := item.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s: not a Kubernetes object (a YAML mapping)", itemWhere)
			}
			docs = append(docs, document{where: itemWhere, seq: len(docs), obj: itemObj})
		}
	}
	return docs, nil
}

// chunk is the text of one document and the line it starts on.
type chunk struct {
	text []byte
	line int
}

// splitDocuments cuts a YAML stream at its document markers: a line that is
// "---" or "...", or starts with "--- " (text after it, unless a comment,
// belongs to the next document, as in "--- !tag" or "--- {a: b}"). YAML
// forbids these markers at the start of a line inside a document, so no
// parse is needed to find them.
func splitDocuments(in io.Reader) ([]chunk, error) {
	var chunks []chunk
	current := chunk{line: 1}
	flush := func(nextLine int) {
		if len(bytes.TrimSpace(current.text)) > 0 {
			chunks = append(chunks, current)
		}
		current = chunk{line: nextLine}
	}
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 64*1024), 16*1024*1024) // long lines: inline certificates, JSON annotations
	for lineNo := 1; scanner.Scan(); lineNo++ {
		line := strings.TrimSuffix(scanner.Text(), "\r")
		if lineNo == 1 {
			line = strings.TrimPrefix(line, "\ufeff") // a byte order mark
		}
		if marker, rest, ok := documentMarker(line); ok {
			flush(lineNo)
			if marker == "---" && rest != "" && !strings.HasPrefix(rest, "#") {
				current.text = append(current.text, rest+"\n"...)
			} else {
				current.line = lineNo + 1
			}
			continue
		}
		current.text = append(current.text, line+"\n"...)
	}
	if err := scanner.Err(); err != nil {
		return nil, fmt.Errorf("reading the input: %w", err)
	}
	flush(0)
	return chunks, nil
}

// documentMarker reports whether line is a document start ("---") or end
// ("...") marker, and returns what follows the marker on the line.
func documentMarker(line string) (marker, rest string, ok bool) {
	for _, marker := range []string{"---", "..."} {
		after, found := strings.CutPrefix(line, marker)
		if !found {
			continue
		}
		if after == "" {
			return marker, "", true
		}
		if after[0] == ' ' || after[0] == '\t' {
			return marker, strings.TrimSpace(after), true
		}
	}
	return "", "", false
}
