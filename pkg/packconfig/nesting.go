package packconfig

import (
	"bytes"
	"fmt"
)

// maxNesting bounds how deeply arrays and inline tables nest in a
// builder.toml. The TOML parser recurses once per level and a Go stack
// overflow cannot be recovered from: 24 MiB of "a={a={…" crashed the
// plugin. A real builder.toml nests a few levels ([[order]] group =
// [{id = …}], [[targets.distributions]] versions = […]: at most ~4, table
// headers' brackets counted); 64 refuses nothing real.
const maxNesting = 64

// checkNesting refuses text whose brackets and braces nest deeper than
// limit (maxNesting), before the parser sees it. Brackets in strings and comments
// are not counted: text is scanned as the TOML lexer reads it, so far as
// strings and comments go, and where the two could differ (after a
// mistake) the parser has stopped at the mistake already.
func checkNesting(text []byte, limit int) error {
	depth, line := 0, 1
	for i := 0; i < len(text); i++ {
		switch text[i] {
		case '\n':
			line++
		case '#': // a comment, to the end of its line
			if n := bytes.IndexByte(text[i:], '\n'); n >= 0 {
				i += n - 1
			} else {
				i = len(text)
			}
		case '"', '\'':
			end, lines := skipString(text, i)
			i, line = end, line+lines
		case '[', '{':
			if depth++; depth > limit {
				return fmt.Errorf("line %d: arrays and tables nested more than %d deep", line, limit)
			}
		case ']', '}':
			if depth > 0 {
				depth--
			}
		}
	}
	return nil
}

// skipString returns the index of the last byte of the string starting at
// text[start] (its opening quote), and how many lines it spans beyond its
// first. A single-line string ends at its line's end at the latest, an
// unterminated multi-line one at text's end: the parser refuses both.
func skipString(text []byte, start int) (end, newlines int) {
	q := text[start]
	escapes := q == '"' // basic strings; literal ones ('…') have none
	triple := []byte{q, q, q}
	if bytes.HasPrefix(text[start:], triple) {
		for i := start + 3; i < len(text); i++ {
			switch {
			case escapes && text[i] == '\\' && i+1 < len(text):
				i++ // an escaped quote does not close the string
				if text[i] == '\n' {
					newlines++
				}
			case text[i] == '\n':
				newlines++
			case bytes.HasPrefix(text[i:], triple):
				// The closing quotes are the last three of their run
				// (up to two quotes may end the string's content).
				end = i + 2
				for extra := 0; extra < 2 && end+1 < len(text) && text[end+1] == q; extra++ {
					end++
				}
				return end, newlines
			}
		}
		return len(text) - 1, newlines
	}
	for i := start + 1; i < len(text); i++ {
		switch {
		case text[i] == '\n':
			return i - 1, 0 // the newline is the caller's to count
		case escapes && text[i] == '\\' && i+1 < len(text) && text[i+1] != '\n':
			i++
		case text[i] == q:
			return i, 0
		}
	}
	return len(text) - 1, 0
}
