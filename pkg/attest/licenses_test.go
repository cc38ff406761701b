package attest

import "testing"

func TestDeclaredLicense(t *testing.T) {
	for _, tc := range []struct {
		licenses []string
		want     string
	}{
		{nil, "NOASSERTION"},
		{[]string{"Apache-2.0"}, "Apache-2.0"},
		{[]string{"MIT OR Apache-2.0", "BSD-3-Clause"}, "(MIT OR Apache-2.0) AND BSD-3-Clause"},
		{[]string{"MIT OR Apache-2.0"}, "MIT OR Apache-2.0"},
		{[]string{"GPL-2.0-or-later WITH Classpath-exception-2.0"}, "GPL-2.0-or-later WITH Classpath-exception-2.0"},
		{[]string{"(MIT AND (BSD-2-Clause OR ISC))"}, "(MIT AND (BSD-2-Clause OR ISC))"},
		{[]string{"GPL-2.0+", "0BSD"}, "GPL-2.0+ AND 0BSD"},
		// What is not an expression makes the whole unasserted, so that
		// one entry cannot change what its neighbours mean.
		{[]string{"MIT", ""}, "NOASSERTION"}, // a license given by its address alone
		{[]string{"Apache License, Version 2.0"}, "NOASSERTION"},
		{[]string{"MIT) OR (GPL-3.0", "ISC"}, "NOASSERTION"},
		{[]string{"MIT AND"}, "NOASSERTION"},
		{[]string{"AND MIT"}, "NOASSERTION"},
		{[]string{"MIT WITH"}, "NOASSERTION"},
		{[]string{"(MIT"}, "NOASSERTION"},
		{[]string{"MIT)"}, "NOASSERTION"},
		{[]string{"()"}, "NOASSERTION"},
		{[]string{"MIT ISC"}, "NOASSERTION"},
		{[]string{"MIT OR OR ISC"}, "NOASSERTION"},
		{[]string{"LicenseRef-x:y"}, "NOASSERTION"},
		// References the document would have to define.
		{[]string{"LicenseRef-acme"}, "NOASSERTION"},
		{[]string{"DocumentRef-spdx-tool-1.2:LicenseRef-MIT-Style-2"}, "NOASSERTION"},
		{[]string{"MIT\"}"}, "NOASSERTION"},
		{[]string{"((((((((( MIT )))))))))"}, "NOASSERTION"}, // nested deeper than the parser follows
		{[]string{"(((((((( MIT ))))))))"}, "((((((((MIT))))))))"},
		// Written from the tokens: a separator other than a space cannot
		// hide an operator from the parentheses that keep its meaning.
		{[]string{"MIT\tOR\tGPL-3.0-only", "Apache-2.0"}, "(MIT OR GPL-3.0-only) AND Apache-2.0"},
		{[]string{"(MIT)OR(GPL-3.0-only)", "Apache-2.0"}, "((MIT) OR (GPL-3.0-only)) AND Apache-2.0"},
		{[]string{"MIT\u00a0OR\u00a0ISC", "0BSD"}, "(MIT OR ISC) AND 0BSD"},
	} {
		if got := declaredLicense(tc.licenses); got != tc.want {
			t.Errorf("declaredLicense(%q) = %q, want %q", tc.licenses, got, tc.want)
		}
	}
}
