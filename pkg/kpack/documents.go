package kpack

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

// document is one YAML document or JSON object of the input, or one item
// of a List (what `kubectl get -o yaml` prints for several objects).
type document struct {
	where string // "document 2 (starting at line 14)", "…, item 3": for errors
	seq   int    // position among all documents and items, for ordering
	raw   []byte // the text as read, passed through verbatim; nil for List items
	obj   map[string]any
}

// readDocuments splits a stream of YAML documents, or of JSON objects (as
// `jq '.items[]'` prints them: one after another, with or without space or
// "---" between them), into its objects and decodes each; the items of a
// List are objects of their own. Documents holding only comments or null
// are skipped. Nothing else is: a document that is not a mapping, not YAML,
// or that holds more than one YAML value, and text after a JSON object that
// is not another JSON value, are errors naming the document and where it
// starts.
func readDocuments(in io.Reader) ([]document, error) {
	chunks, err := splitDocuments(in)
	if err != nil {
		return nil, err
	}
	var docs []document
	index := 0
	for _, chunk := range chunks {
		values, isJSON := chunk.jsonValues()
		if !isJSON {
			values = []value{{text: chunk.text, raw: chunk.text, line: chunk.line, column: 1}}
		}
		for _, v := range values {
			if v.err != nil {
				return nil, fmt.Errorf("%s: %w", v.where(index+1), v.err)
			}
			decoded, err := decodeValue(v.text, isJSON)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", v.where(index+1), err)
			}
			if decoded == nil {
				continue // only comments, or null
			}
			index++
			where := v.where(index)
			obj, ok := decoded.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s: not a Kubernetes object (a YAML mapping)", where)
			}
			if docs, err = appendObject(docs, where, v.raw, obj); err != nil {
				return nil, err
			}
		}
	}
	return docs, nil
}

// appendObject appends an object to docs, or, for a List, its items: a v1
// List (kubectl get -o yaml), or a typed one such as kpack.io/v1alpha2
// ClusterStoreList (the API's list responses), whose items may lack their
// apiVersion and kind, which are then the List's (as kubectl takes them).
// Lists in Lists are expanded too.
func appendObject(docs []document, where string, raw []byte, obj map[string]any) ([]document, error) {
	kind, _ := obj["kind"].(string)
	items, hasItems := obj["items"]
	if !hasItems || !strings.HasSuffix(kind, "List") {
		return append(docs, document{where: where, seq: len(docs), raw: raw, obj: obj}), nil
	}
	list, ok := items.([]any)
	if !ok && items != nil {
		return nil, fmt.Errorf("%s: items of a List must be a list", where)
	}
	apiVersion, _ := obj["apiVersion"].(string)
	itemKind := strings.TrimSuffix(kind, "List")
	for i, item := range list {
		itemWhere := fmt.Sprintf("%s, item %d", where, i+1)
		itemObj, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: not a Kubernetes object (a YAML mapping)", itemWhere)
		}
		if itemKind != "" && itemObj["apiVersion"] == nil && itemObj["kind"] == nil {
			itemObj["apiVersion"], itemObj["kind"] = apiVersion, itemKind
		}
		var err error
		if docs, err = appendObject(docs, itemWhere, nil, itemObj); err != nil {
			return nil, err
		}
	}
	return docs, nil
}

// checkTypeFields refuses an object without an apiVersion or a kind, as
// kubectl does (a ytt data values document given with the templates, say):
// passed through, it would fail only when applied.
func (d *document) checkTypeFields() error {
	apiVersion, _ := d.obj["apiVersion"].(string)
	kind, _ := d.obj["kind"].(string)
	switch {
	case apiVersion == "" && kind == "":
		return fmt.Errorf("%s: not a Kubernetes object: no apiVersion and no kind", d.where)
	case apiVersion == "":
		return fmt.Errorf("%s: not a Kubernetes object: no apiVersion", d.where)
	case kind == "":
		return fmt.Errorf("%s: not a Kubernetes object: no kind", d.where)
	}
	return nil
}

// value is what a document holds: the document itself, or one of the JSON
// values of a document that is a stream of them.
type value struct {
	text         []byte // to decode
	raw          []byte // to pass through verbatim
	line, column int    // where text starts in the input
	err          error  // for text that is not a JSON value; the last value then
}

// where names the value, as the index-th document of the input, in errors.
func (v value) where(index int) string {
	if v.column == 1 {
		return fmt.Sprintf("document %d (starting at line %d)", index, v.line)
	}
	return fmt.Sprintf("document %d (starting at line %d, column %d)", index, v.line, v.column)
}

// jsonValues cuts a document that starts (after white space and comments)
// with a JSON object into the JSON values it holds, one after another with
// or without white space between them. It returns false when the document
// does not start with a JSON object: it is YAML then, which may start with
// "{" too ({a: 1}). Text after a JSON value that is not another one is a
// value with err set: it ends the list.
func (c chunk) jsonValues() ([]value, bool) {
	text := c.text
	pos := skipSpace(text, 0)
	if pos == len(text) || text[pos] != '{' {
		return nil, false
	}
	// The line and column of offsets, counted as they grow: a document may
	// hold many values.
	counted, line, lineStart := 0, c.line, 0
	position := func(offset int) (int, int) {
		for ; counted < offset; counted++ {
			if text[counted] == '\n' {
				line, lineStart = line+1, counted+1
			}
		}
		return line, offset - lineStart + 1
	}
	var values []value
	var ends []int
	for pos < len(text) {
		dec := json.NewDecoder(bytes.NewReader(text[pos:]))
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if len(values) == 0 {
				return nil, false // YAML in flow style
			}
			v := value{err: jsonError(err)}
			v.line, v.column = position(pos)
			var syntax *json.SyntaxError
			if errors.As(err, &syntax) && syntax.Offset > 0 {
				errLine, errColumn := position(pos + int(syntax.Offset) - 1)
				v.err = fmt.Errorf("at line %d, column %d: %w", errLine, errColumn, v.err)
			}
			return append(values, v), true
		}
		end := pos + int(dec.InputOffset())
		v := value{text: text[pos:end]}
		v.line, v.column = position(pos)
		values = append(values, v)
		ends = append(ends, end)
		pos = skipSpace(text, end)
	}
	// What is passed through keeps the comments: a value takes the text
	// after the one before it, and the last one the text to the end.
	from := 0
	for i := range values {
		to := ends[i]
		if i == len(values)-1 {
			to = len(text)
		}
		values[i].raw = bytes.TrimLeft(text[from:to], " \t\n")
		from = to
	}
	return values, true
}

// jsonError says what is wrong with text after a JSON value.
func jsonError(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("an unfinished JSON value: the document ends before it does")
	}
	return fmt.Errorf("after a JSON object, text that is not another JSON value: %w", err)
}

// skipSpace returns the offset of the first byte at or after pos that is
// neither white space nor in a YAML comment (from a "#" at the start of a
// line or after white space to the end of the line).
func skipSpace(text []byte, pos int) int {
	for pos < len(text) {
		switch c := text[pos]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			pos++
		case c == '#' && (pos == 0 || isSpace(text[pos-1])):
			next := bytes.IndexByte(text[pos:], '\n')
			if next < 0 {
				return len(text)
			}
			pos += next + 1
		default:
			return pos
		}
	}
	return pos
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// decodeValue decodes a document's value (YAML, or JSON when isJSON) as
// kubectl does, after checking what kubectl's decoder lets pass: YAML
// forbids a key twice in a mapping (a lax decoder keeps one of them
// without a word), and a document holds one value ("{a: 1}\nb: 2" would
// decode as {a: 1}). yaml.v3 checks both and, unlike yaml.v2's strict
// mode, takes a merge key's overrides ("<<: *base" then "kind: …") as the
// YAML spec means them.
func decodeValue(text []byte, isJSON bool) (any, error) {
	var decoded any
	if isJSON {
		// encoding/json, not a YAML decoder: it knows all of JSON (an
		// escaped slash, "\/", which both YAML decoders refuse).
		if err := checkJSONKeys(text); err != nil {
			return nil, err
		}
		return decoded, json.Unmarshal(text, &decoded)
	}
	dec := yamlv3.NewDecoder(bytes.NewReader(text))
	var first, second any
	if err := dec.Decode(&first); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil // no value: only comments
		}
		return nil, err
	}
	switch err := dec.Decode(&second); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, fmt.Errorf("%s (%w)", moreThanOneValue, err)
	default:
		return nil, errors.New(moreThanOneValue)
	}
	return decoded, yaml.Unmarshal(text, &decoded)
}

// checkJSONKeys fails a JSON value in which an object has a key twice.
func checkJSONKeys(text []byte) error {
	dec := json.NewDecoder(bytes.NewReader(text))
	// One entry per object or array open: an object's keys, nil for an
	// array; expectKey says the next token of the innermost object is a key.
	var open []map[string]bool
	expectKey := false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			open, expectKey = append(open, map[string]bool{}), true
			continue
		case json.Delim('['):
			open = append(open, nil)
		case json.Delim('}'), json.Delim(']'):
			open = open[:len(open)-1]
		default:
			if key, ok := tok.(string); ok && expectKey {
				if open[len(open)-1][key] {
					return fmt.Errorf("the key %q twice in one object (at offset %d)", key, dec.InputOffset())
				}
				open[len(open)-1][key] = true
				expectKey = false
				continue
			}
		}
		// After a value, an object's next token is a key.
		expectKey = len(open) > 0 && open[len(open)-1] != nil
	}
}

const moreThanOneValue = "more than one YAML value, of which only the first would be read: separate documents with ---"

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
	// Lines of any length (a compact JSON List is one line): the caller
	// bounds the input's size.
	lines := bufio.NewReader(in)
	for lineNo := 1; ; lineNo++ {
		raw, err := lines.ReadString('\n')
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("reading the input: %w", err)
		}
		if raw == "" { // the end
			break
		}
		line := strings.TrimSuffix(strings.TrimSuffix(raw, "\n"), "\r")
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
